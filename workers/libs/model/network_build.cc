// Network::Create and CreateSegment: a Network's forward and backward steps made from its layout,
// one oneDNN primitive (or step of our own) at a time.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/hogwild.h"
#include "model/network_impl.h"
#include "model/pool.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace adam::model {

// oneDNN's CPU stream (its OpenMP runtime) has run a primitive when execute returns, so a step of
// our own between two primitives reads the first's output and the second reads its own.
void Execute(Step& s, dnnl::stream& strm) {
  if (s.run) {
    s.run();
  } else {
    s.prim.execute(strm, s.args);
  }
}

// The fused dense update W = sum_scale * W + (-lr) * diff_dst^T x src (diff_dst given as
// units x batch through strides, see Create), with -lr a runtime output scale.
dnnl::matmul FusedUpdate(const memory::desc& a_md, const memory::desc& src_md,
                         const memory::desc& w_md, float sum_scale, const dnnl::engine& eng) {
  dnnl::primitive_attr mattr;
  mattr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  mattr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
  dnnl::post_ops ops;
  ops.append_sum(sum_scale);
  mattr.set_post_ops(ops);
  return dnnl::matmul(dnnl::matmul::primitive_desc({a_md, src_md, w_md}, mattr, eng));
}

namespace {

// A step of our own; `buffers` are the memories it reads and writes through raw pointers, held
// in its arguments (as a primitive's are) so that they live as long as the Network.
Step OwnStep(std::function<void()> run, Args buffers) {
  Step st;
  st.args = std::move(buffers);
  st.run = std::move(run);
  return st;
}

// Marks the steps `bwd` gained since it held `from` as the weights' (Network::BackwardWeights).
void MarkWeights(std::vector<Step>& bwd, size_t from) {
  for (size_t k = from; k < bwd.size(); ++k) bwd[k].weights = true;
}

// Every activation's backward is computed from its output (the forward runs in place).
algorithm EltwiseAlg(spec::Activation a) {
  switch (a) {
    case spec::Activation::kRelu:
    case spec::Activation::kLeakyRelu:
      return algorithm::eltwise_relu_use_dst_for_bwd;
    case spec::Activation::kSigmoid:
      return algorithm::eltwise_logistic_use_dst_for_bwd;
    default:
      return algorithm::eltwise_tanh_use_dst_for_bwd;
  }
}
// The slope below 0 for relu (oneDNN's alpha); unused by the others.
float EltwiseAlpha(spec::Activation a) {
  return a == spec::Activation::kLeakyRelu ? spec::kLeakySlope : 0.f;
}

// The weight gradient's descriptor of the convolution `fpd`. Where oneDNN's first choice reads an
// input of few channels (an image's 1 or 3) in channel blocks (8 on AVX2), it reads mostly
// padding: on AVX2 the first layer's of examples/fashion-mnist.yaml took 31% of a step that way
// (10x its AVX-512 time). There it asks again for the input in plain NCHW (oneDNN then picks its
// im2col-and-GEMM implementation) and takes that unless it is the reference one. (Walking oneDNN
// 2.6's list of implementations instead crashed inside it for a 1x1 convolution.)
dnnl::convolution_backward_weights::primitive_desc WeightGradientDesc(
    const dnnl::convolution_forward::primitive_desc& fpd, const memory::desc& w_any,
    const memory::desc& b_md, const memory::dims& strides, const memory::dims& pad,
    const dnnl::primitive_attr& attr, const dnnl::engine& eng) {
  const memory::dims in = fpd.src_desc().dims();
  const memory::desc dst_any(fpd.dst_desc().dims(), dt::f32, tag::any);
  auto make = [&](tag src_tag) {
    const memory::desc src(in, dt::f32, src_tag);
    return dnnl::convolution_backward_weights::primitive_desc(
        {algorithm::convolution_direct, src, w_any, b_md, dst_any, strides, pad, pad}, attr, eng,
        fpd);
  };
  auto pd = make(tag::any);
  if (pd.src_desc().data.padded_dims[1] < 4 * in[1]) return pd;
  try {
    auto plain = make(tag::nchw);
    if (std::string(plain.impl_info_str()).rfind("ref", 0) != 0) return plain;
  } catch (const dnnl::error&) {
    // no implementation for a plain input: keep the first choice
  }
  return pd;
}

memory::dims Dims4(int n, const spec::Shape& s) { return {n, s.channels, s.height, s.width}; }

// Reorders use a user scratchpad too, like every other primitive here (see Network::Impl).
Step ReorderStep(const memory& from, const memory& to) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::reorder::primitive_desc pd(from.get_engine(), from.get_desc(), to.get_engine(),
                                   to.get_desc(), attr);
  return {dnnl::reorder(pd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}};
}

// `m` itself when it already has layout `want`; otherwise a new buffer in `want`, filled from
// `m` by a reorder appended to `steps`.
memory Reformat(const memory& m, const memory::desc& want, const dnnl::engine& eng,
                std::vector<Step>* steps) {
  if (m.get_desc() == want) return m;
  memory out(want, eng);
  steps->push_back(ReorderStep(m, out));
  return out;
}

}  // namespace

struct Network::Options {
  int batch = 1;
  float* params = nullptr;
  float* grads = nullptr;
  NetworkMode mode = NetworkMode::kInference;
  int apply_every = 1;
  bool hold = false;
  StepRule rule;
  bool segment = false;
  bool input_gradient = false;
};

// Builds a Network's forward and backward steps one layer at a time; src and diff_src are the
// next layer's input activations and the gradient with respect to them.
struct Network::Builder {
  Impl& m;
  const dnnl::engine& eng;
  const dnnl::primitive_attr& attr;
  int batch;
  bool train;
  bool sgd;
  float* grads;
  float* wp;
  memory src;
  memory diff_src;              // empty for layer 0, unless the input's gradient is wanted
  bool input_gradient = false;  // layer 0 computes its diff_src too

  void Conv(size_t i, const spec::LayerSpec& l, const spec::LayerShape& s, const LayerParams& p,
            std::vector<Step>& bwd, bool need_diff_src);
  // A convolution's backward passes: to its weights and bias, and to its input.
  struct ConvDescs;
  void ConvWeightsGrad(const ConvDescs& d, const dnnl::convolution_forward::primitive_desc& fpd,
                       const LayerParams& p, const memory& conv_src, const memory& diff_dst,
                       std::vector<Step>& bwd);
  void ConvDataGrad(const ConvDescs& d, const dnnl::convolution_forward::primitive_desc& fpd,
                    const memory& w, const memory& w_fwd, const memory& diff_dst,
                    const memory& conv_diff_src, std::vector<Step>& bwd);
  void Dropout(size_t i, const spec::LayerSpec& l, const spec::LayerShape& s, const LayerParams& p,
               std::vector<Step>& bwd, bool need_diff_src);
  Status Pool(size_t i, const spec::LayerSpec& l, const spec::LayerShape& s, const LayerParams& p,
              std::vector<Step>& bwd, bool need_diff_src);
  // Dense or softmax: an inner product over the flattened input.
  // A dense layer's SGD step: held for apply_every, fused into the weights, or into the
  // velocity.
  void DenseStep(size_t i, const LayerParams& p, int64_t in, int units, const memory::desc& src_md,
                 const memory::desc& w_md, const memory& flat_src, const memory& diff_dst,
                 const memory& w, std::vector<Step>& bwd);
  void InnerProduct(size_t i, const spec::LayerSpec& l, const spec::LayerShape& s,
                    const LayerParams& p, std::vector<Step>& bwd, bool need_diff_src);
  // The softmax after the last inner product: its logits, probabilities and their gradient.
  void SoftmaxHead(const memory::desc& md, const memory& logits, const memory& diff_logits);
  // Every layer of `layout`: forward steps in order, backward steps in reverse.
  Status Layers(const ModelLayout& layout);
  // A segment's last step: its output (`src`) reordered to a plain layout, and the caller's
  // plain output gradient reordered into `diff_src` before the first backward step.
  void SegmentEnd();
  // An activation applied in place to `dst` (described by `md`), and its gradient to `diff_dst`.
  void Activate(spec::Activation a, const memory::desc& md, const memory& dst,
                const memory& diff_dst, std::vector<Step>& bwd);
};

void Network::Builder::Activate(spec::Activation a, const memory::desc& md, const memory& dst,
                                const memory& diff_dst, std::vector<Step>& bwd) {
  dnnl::eltwise_forward::primitive_desc epd(
      {prop_kind::forward_training, EltwiseAlg(a), md, EltwiseAlpha(a), 0.f}, attr, eng);
  m.forward.push_back({dnnl::eltwise_forward(epd), {{DNNL_ARG_SRC, dst}, {DNNL_ARG_DST, dst}}});
  if (!train) return;
  dnnl::eltwise_backward::primitive_desc ebd({EltwiseAlg(a), md, md, EltwiseAlpha(a), 0.f}, attr,
                                             eng, epd);
  bwd.push_back(
      {dnnl::eltwise_backward(ebd),
       {{DNNL_ARG_DST, dst}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, diff_dst}}});
}

void Network::Builder::SegmentEnd() {
  const memory::desc& md = src.get_desc();
  memory::desc plain = md;
  if (md.data.ndims == 4) {
    plain = memory::desc(md.dims(), dt::f32, tag::nchw);
  } else {
    plain = memory::desc(md.dims(), dt::f32, tag::nc);
  }
  m.output = Reformat(src, plain, eng, &m.forward);
  if (!train) return;
  m.output_grad = diff_src;
  if (m.output != src) {
    m.output_grad = memory(plain, eng);
    m.backward.insert(m.backward.begin(), ReorderStep(m.output_grad, diff_src));
    for (auto& i : m.decayed_steps) ++i;
  }
}

Status Network::Builder::Layers(const ModelLayout& layout) {
  // Backward steps are collected per layer and then reversed.
  std::vector<std::vector<Step>> bwd_layers;
  for (size_t i = 0; i < layout.shapes().size(); ++i) {
    const auto& l = layout.spec().layers[i];
    const auto& s = layout.shapes()[i];
    const auto& p = layout.params()[i];
    std::vector<Step> bwd;
    const bool need_diff_src = i > 0 || input_gradient;
    switch (l.type) {
      case spec::LayerType::kConv:
        Conv(i, l, s, p, bwd, need_diff_src);
        break;
      case spec::LayerType::kDropout:
        Dropout(i, l, s, p, bwd, need_diff_src);
        break;
      case spec::LayerType::kMaxPool:
      case spec::LayerType::kAvgPool:
        ADAM_RETURN_IF_ERROR(Pool(i, l, s, p, bwd, need_diff_src));
        break;
      default:
        InnerProduct(i, l, s, p, bwd, need_diff_src);
        break;
    }
    bwd_layers.push_back(std::move(bwd));
  }
  for (auto it = bwd_layers.rbegin(); it != bwd_layers.rend(); ++it)
    for (auto& st : *it) {
      if (st.decayed >= 0) m.decayed_steps.push_back(m.backward.size());
      m.backward.push_back(std::move(st));
    }
  return OkStatus();
}

// The descriptors a convolution's three passes share: any-layout source, destination and
// weights (oneDNN picks), the plain OIHW weights and the bias.
struct Network::Builder::ConvDescs {
  memory::desc src_any, dst_any, w_any, w_md, b_md;
  memory::dims strides, pad;
};

void Network::Builder::Conv(size_t i, const spec::LayerSpec& l, const spec::LayerShape& s,
                            const LayerParams& p, std::vector<Step>& bwd, bool need_diff_src) {
  // oneDNN picks the activation and weight layouts for each pass (tag::any); the shared
  // parameter vector stays OIHW, with reorders in and out (a few thousand floats).
  const ConvDescs d{memory::desc(Dims4(batch, s.in), dt::f32, tag::any),
                    memory::desc(Dims4(batch, s.out), dt::f32, tag::any),
                    memory::desc({l.maps, s.in.channels, l.kernel, l.kernel}, dt::f32, tag::any),
                    memory::desc({l.maps, s.in.channels, l.kernel, l.kernel}, dt::f32, tag::oihw),
                    memory::desc({l.maps}, dt::f32, tag::x),
                    {l.stride, l.stride},
                    {l.padding, l.padding}};
  dnnl::convolution_forward::primitive_desc fpd(
      {prop_kind::forward_training, algorithm::convolution_direct, d.src_any, d.w_any, d.b_md,
       d.dst_any, d.strides, d.pad, d.pad},
      attr, eng);
  memory w(d.w_md, eng, wp + p.weights.offset), b(d.b_md, eng, wp + p.bias.offset);
  std::vector<Step> after_bwd_data;  // runs after this layer's backward-data step
  memory conv_src = Reformat(src, fpd.src_desc(), eng, &m.forward);
  memory conv_diff_src = diff_src;
  if (train && need_diff_src && conv_src != src) {
    conv_diff_src = memory(fpd.src_desc(), eng);
    after_bwd_data.push_back(ReorderStep(conv_diff_src, diff_src));
  }
  memory w_fwd = Reformat(w, fpd.weights_desc(), eng, &m.forward);
  memory dst(fpd.dst_desc(), eng);
  m.forward.push_back({dnnl::convolution_forward(fpd),
                       {{DNNL_ARG_SRC, conv_src},
                        {DNNL_ARG_WEIGHTS, w_fwd},
                        {DNNL_ARG_BIAS, b},
                        {DNNL_ARG_DST, dst}}});
  memory diff_dst;
  if (train) diff_dst = memory(fpd.dst_desc(), eng);
  if (l.activation != spec::Activation::kNone)
    Activate(l.activation, fpd.dst_desc(), dst, diff_dst, bwd);
  if (train) {
    if (sgd) {
      m.looped_updates.insert(m.looped_updates.end(), {p.weights, p.bias});
      m.looped_is_weight.insert(m.looped_is_weight.end(), {true, false});
    }
    ConvWeightsGrad(d, fpd, p, conv_src, diff_dst, bwd);
    if (need_diff_src) {
      ConvDataGrad(d, fpd, w, w_fwd, diff_dst, conv_diff_src, bwd);
      for (auto& st : after_bwd_data) bwd.push_back(std::move(st));
    }
  }
  src = dst;
  diff_src = diff_dst;
}

void Network::Builder::ConvWeightsGrad(const ConvDescs& d,
                                       const dnnl::convolution_forward::primitive_desc& fpd,
                                       const LayerParams& p, const memory& conv_src,
                                       const memory& diff_dst, std::vector<Step>& bwd) {
  memory dw(d.w_md, eng, grads + p.weights.offset), db(d.b_md, eng, grads + p.bias.offset);
  const size_t weights_from = bwd.size();
  // Each backward pass picks its own layouts too; reorder where they differ.
  const auto wpd = WeightGradientDesc(fpd, d.w_any, d.b_md, d.strides, d.pad, attr, eng);
  memory w_src = Reformat(conv_src, wpd.src_desc(), eng, &bwd);
  memory w_diff_dst = Reformat(diff_dst, wpd.diff_dst_desc(), eng, &bwd);
  memory dw_pass = dw;
  if (wpd.diff_weights_desc() != d.w_md) dw_pass = memory(wpd.diff_weights_desc(), eng);
  bwd.push_back({dnnl::convolution_backward_weights(wpd),
                 {{DNNL_ARG_SRC, w_src},
                  {DNNL_ARG_DIFF_DST, w_diff_dst},
                  {DNNL_ARG_DIFF_WEIGHTS, dw_pass},
                  {DNNL_ARG_DIFF_BIAS, db}}});
  if (dw_pass != dw) bwd.push_back(ReorderStep(dw_pass, dw));
  MarkWeights(bwd, weights_from);
}

void Network::Builder::ConvDataGrad(const ConvDescs& d,
                                    const dnnl::convolution_forward::primitive_desc& fpd,
                                    const memory& w, const memory& w_fwd, const memory& diff_dst,
                                    const memory& conv_diff_src, std::vector<Step>& bwd) {
  dnnl::convolution_backward_data::primitive_desc dpd(
      {algorithm::convolution_direct, d.src_any, d.w_any, d.dst_any, d.strides, d.pad, d.pad}, attr,
      eng, fpd);
  memory w_bwd =
      dpd.weights_desc() == fpd.weights_desc() ? w_fwd : Reformat(w, dpd.weights_desc(), eng, &bwd);
  memory d_diff_dst = Reformat(diff_dst, dpd.diff_dst_desc(), eng, &bwd);
  memory d_diff_src = conv_diff_src;
  if (dpd.diff_src_desc() != conv_diff_src.get_desc())
    d_diff_src = memory(dpd.diff_src_desc(), eng);
  bwd.push_back({dnnl::convolution_backward_data(dpd),
                 {{DNNL_ARG_DIFF_DST, d_diff_dst},
                  {DNNL_ARG_WEIGHTS, w_bwd},
                  {DNNL_ARG_DIFF_SRC, d_diff_src}}});
  if (d_diff_src != conv_diff_src) bwd.push_back(ReorderStep(d_diff_src, conv_diff_src));
}

void Network::Builder::Dropout(size_t i, const spec::LayerSpec& l, const spec::LayerShape& s,
                               const LayerParams& p, std::vector<Step>& bwd, bool need_diff_src) {
  if (train && l.rate > 0) {  // at inference the layer is the identity
    const memory::desc md = src.get_desc();
    memory mask(md, eng), dst(md, eng);
    dnnl::binary::primitive_desc mul({algorithm::binary_mul, md, md, md}, attr, eng);
    m.forward.push_back(
        {dnnl::binary(mul), {{DNNL_ARG_SRC_0, src}, {DNNL_ARG_SRC_1, mask}, {DNNL_ARG_DST, dst}}});
    memory diff_dst(md, eng);
    if (need_diff_src)
      bwd.push_back(
          {dnnl::binary(mul),
           {{DNNL_ARG_SRC_0, diff_dst}, {DNNL_ARG_SRC_1, mask}, {DNNL_ARG_DST, diff_src}}});
    m.dropouts.push_back({mask, float(1.0 - l.rate)});
    src = dst;
    diff_src = diff_dst;
  }
}

namespace {

// An activation in one of the layouts model/pool.h runs on: its pooling shape and the layout's
// tag (the output's too).
struct PoolIn {
  PoolShape shape;
  memory::format_tag layout;
};

std::optional<PoolIn> PoolLayout(const memory::desc& md, int size) {
  const memory::dims d = md.dims();
  if (md.data.ndims != 4 || md.data_type() != dt::f32) return std::nullopt;
  const int64_t n = d[0], c = d[1], h = d[2], w = d[3];
  if (md == memory::desc(d, dt::f32, tag::nchw)) return PoolIn{{n * c, h, w, 1, size}, tag::nchw};
  if (md == memory::desc(d, dt::f32, tag::nhwc)) return PoolIn{{n, h, w, c, size}, tag::nhwc};
  for (const auto& [blocked, block] : {std::pair{tag::nChw8c, 8}, std::pair{tag::nChw16c, 16}})
    if (md == memory::desc(d, dt::f32, blocked))
      return PoolIn{{n * (md.data.padded_dims[1] / block), h, w, block, size}, blocked};
  return std::nullopt;
}

}  // namespace

Status Network::Builder::Pool(size_t i, const spec::LayerSpec& l, const spec::LayerShape& s,
                              const LayerParams& p, std::vector<Step>& bwd, bool need_diff_src) {
  // Pools in the layout its input arrives in (model/pool.h), after a reorder to NHWC when that
  // is none it knows. Windows tile the input: stride = size, no padding.
  const bool is_max = l.type == spec::LayerType::kMaxPool;
  memory pool_src = src, pool_diff_src = diff_src;
  std::optional<PoolIn> found = PoolLayout(src.get_desc(), l.size);
  if (!found) {
    pool_src = Reformat(src, memory::desc(Dims4(batch, s.in), dt::f32, tag::nhwc), eng, &m.forward);
    found = PoolLayout(pool_src.get_desc(), l.size);
    if (train && need_diff_src) pool_diff_src = memory(pool_src.get_desc(), eng);
  }
  if (!found || found->shape.out_h() != s.out.height || found->shape.out_w() != s.out.width)
    return InternalError("network: pooling layer " + std::to_string(i) +
                         " has no layout to run in");
  const PoolShape ps = found->shape;
  memory dst({Dims4(batch, s.out), dt::f32, found->layout}, eng);
  ADAM_CHECK(dst.get_desc().get_size() == size_t(ps.out_count()) * sizeof(float));
  const auto* in = static_cast<const float*>(pool_src.get_data_handle());
  auto* out = static_cast<float*>(dst.get_data_handle());
  int32_t* where = nullptr;
  if (train && is_max) {
    m.pool_where.emplace_back(new int32_t[size_t(ps.out_count())]);
    where = m.pool_where.back().get();
  }
  const Args fwd_buffers = {{DNNL_ARG_SRC, pool_src}, {DNNL_ARG_DST, dst}};
  if (is_max) {
    m.forward.push_back(OwnStep([=] { MaxPoolForward(ps, in, out, where); }, fwd_buffers));
  } else {
    m.forward.push_back(OwnStep([=] { AvgPoolForward(ps, in, out); }, fwd_buffers));
  }
  memory diff_dst;
  if (train) {
    diff_dst = memory(dst.get_desc(), eng);
    if (need_diff_src) {
      const auto* g = static_cast<const float*>(diff_dst.get_data_handle());
      auto* gin = static_cast<float*>(pool_diff_src.get_data_handle());
      const Args bwd_buffers = {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, pool_diff_src}};
      if (is_max) {
        bwd.push_back(OwnStep([=] { MaxPoolBackward(ps, g, where, gin); }, bwd_buffers));
      } else {
        bwd.push_back(OwnStep([=] { AvgPoolBackward(ps, g, gin); }, bwd_buffers));
      }
      if (pool_diff_src != diff_src) bwd.push_back(ReorderStep(pool_diff_src, diff_src));
    }
  }
  src = dst;
  diff_src = diff_dst;
  return OkStatus();
}

void Network::Builder::DenseStep(size_t i, const LayerParams& p, int64_t in, int units,
                                 const memory::desc& src_md, const memory::desc& w_md,
                                 const memory& flat_src, const memory& diff_dst, const memory& w,
                                 std::vector<Step>& bwd) {
  if (m.hold) {
    m.held_index[i] = int(m.held.size());
    m.held.push_back({int(i), in, units, p.weights.offset, p.bias.offset,
                      std::vector<float>(size_t(m.apply_every) * batch * in),
                      std::vector<float>(size_t(m.apply_every) * batch * units)});
  } else if (sgd && m.velocity == nullptr) {
    // W += (-lr) * diff_dst^T x src, straight into the shared weights: diff_dst (batch x
    // units, row-major) read as units x batch through strides.
    if (!m.neg_lr) m.neg_lr = memory({{1}, dt::f32, tag::x}, eng);
    memory::desc a_md({units, batch}, dt::f32, memory::dims{1, units});
    const int decayed = m.rule.weight_decay > 0 ? int(m.decayed.size()) : -1;
    if (decayed >= 0) m.decayed.push_back({a_md, src_md, w_md});
    bwd.push_back({FusedUpdate(a_md, src_md, w_md, 1.f, eng),
                   {{DNNL_ARG_SRC, memory(a_md, eng, diff_dst.get_data_handle())},
                    {DNNL_ARG_WEIGHTS, flat_src},
                    {DNNL_ARG_DST, w},
                    {DNNL_ARG_ATTR_OUTPUT_SCALES, m.neg_lr}},
                   decayed});
    // The bias gradient is the column sum of diff_dst: computed in the bias loop below.
    m.dense_bias.push_back({diff_dst, p.bias.offset, units});
  } else if (sgd) {
    // V = momentum * V + diff_dst^T x src into this Network's velocity; Backward then
    // takes the step from V.
    memory::desc a_md({units, batch}, dt::f32, memory::dims{1, units});
    dnnl::primitive_attr mattr;
    mattr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (m.rule.momentum > 0) {
      dnnl::post_ops ops;
      ops.append_sum(m.rule.momentum);
      mattr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc mpd({a_md, src_md, w_md}, mattr, eng);
    bwd.push_back({dnnl::matmul(mpd),
                   {{DNNL_ARG_SRC, memory(a_md, eng, diff_dst.get_data_handle())},
                    {DNNL_ARG_WEIGHTS, flat_src},
                    {DNNL_ARG_DST, memory(w_md, eng, m.velocity + p.weights.offset)}}});
    // The bias gradient is the column sum of diff_dst: computed in the bias loop below.
    m.dense_bias.push_back({diff_dst, p.bias.offset, units});
  }
}

void Network::Builder::SoftmaxHead(const memory::desc& md, const memory& logits,
                                   const memory& diff_logits) {
  m.logits = logits;
  m.probs = memory(md, eng);
  m.diff_logits = diff_logits;
  dnnl::softmax_forward::primitive_desc spd({prop_kind::forward_inference, md, 1}, attr, eng);
  m.forward.push_back(
      {dnnl::softmax_forward(spd), {{DNNL_ARG_SRC, logits}, {DNNL_ARG_DST, m.probs}}});
}

void Network::Builder::InnerProduct(size_t i, const spec::LayerSpec& l, const spec::LayerShape& s,
                                    const LayerParams& p, std::vector<Step>& bwd,
                                    bool need_diff_src) {
  const bool is_softmax = l.type == spec::LayerType::kSoftmax;
  const int units = is_softmax ? l.classes : l.units;
  const int64_t in = s.in.size();
  memory::desc src_md({batch, in}, dt::f32, tag::nc);
  memory::desc dst_md({batch, units}, dt::f32, tag::nc);
  memory::desc w_md({units, in}, dt::f32, tag::oi);
  memory::desc b_md({units}, dt::f32, tag::x);
  // Inner products read a plain batch x features matrix: reorder a blocked input first.
  memory plain_src = src, plain_diff_src = diff_src;
  if (src.get_desc().data.ndims == 4) {
    memory::desc nchw(Dims4(batch, s.in), dt::f32, tag::nchw);
    plain_src = Reformat(src, nchw, eng, &m.forward);
    if (train && need_diff_src && plain_src != src) plain_diff_src = memory(nchw, eng);
  }
  memory flat_src(src_md, eng, plain_src.get_data_handle());
  memory w(w_md, eng, wp + p.weights.offset), b(b_md, eng, wp + p.bias.offset);
  memory dst(dst_md, eng);
  dnnl::inner_product_forward::primitive_desc fpd(
      {prop_kind::forward_training, src_md, w_md, b_md, dst_md}, attr, eng);
  m.forward.push_back(
      {dnnl::inner_product_forward(fpd),
       {{DNNL_ARG_SRC, flat_src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, dst}}});
  memory diff_dst;
  if (train) {
    diff_dst = memory(dst_md, eng);
    m.dense_io[i] = {static_cast<const float*>(flat_src.get_data_handle()),
                     static_cast<const float*>(diff_dst.get_data_handle()), in, units};
  }
  if (is_softmax) {
    SoftmaxHead(dst_md, dst, diff_dst);
  } else if (l.activation != spec::Activation::kNone) {
    Activate(l.activation, dst_md, dst, diff_dst, bwd);
  }
  if (train && need_diff_src) {
    // Before the weights change: the gradient flows through the weights of this step.
    memory flat_diff_src(src_md, eng, plain_diff_src.get_data_handle());
    dnnl::inner_product_backward_data::primitive_desc dpd({src_md, w_md, dst_md}, attr, eng, fpd);
    bwd.push_back({dnnl::inner_product_backward_data(dpd),
                   {{DNNL_ARG_DIFF_DST, diff_dst},
                    {DNNL_ARG_WEIGHTS, w},
                    {DNNL_ARG_DIFF_SRC, flat_diff_src}}});
    if (plain_diff_src != diff_src) bwd.push_back(ReorderStep(plain_diff_src, diff_src));
  }
  const size_t weights_from = bwd.size();
  if (train && !sgd) {
    memory dw(w_md, eng, grads + p.weights.offset), db(b_md, eng, grads + p.bias.offset);
    dnnl::inner_product_backward_weights::primitive_desc wpd({src_md, w_md, b_md, dst_md}, attr,
                                                             eng, fpd);
    bwd.push_back({dnnl::inner_product_backward_weights(wpd),
                   {{DNNL_ARG_SRC, flat_src},
                    {DNNL_ARG_DIFF_DST, diff_dst},
                    {DNNL_ARG_DIFF_WEIGHTS, dw},
                    {DNNL_ARG_DIFF_BIAS, db}}});
  }
  if (sgd || m.hold) DenseStep(i, p, in, units, src_md, w_md, flat_src, diff_dst, w, bwd);
  MarkWeights(bwd, weights_from);
  src = dst;
  diff_src = diff_dst;
}

namespace {

Status CheckNetworkOptions(int batch, const float* grads, NetworkMode mode, int apply_every,
                           bool hold, const StepRule& rule) {
  if (batch < 1) return InvalidArgumentError("network: batch must be >= 1");
  if (apply_every < 1) return InvalidArgumentError("network: apply_every must be >= 1");
  if (!(rule.momentum >= 0 && rule.momentum < 1) || !(rule.weight_decay >= 0))
    return InvalidArgumentError("network: momentum must be in [0, 1) and weight decay >= 0");
  if (!(rule.label_smoothing >= 0 && rule.label_smoothing < 1))
    return InvalidArgumentError("network: label smoothing must be in [0, 1)");
  if (mode == NetworkMode::kSgd && !rule.plain() && (apply_every > 1 || hold))
    return InvalidArgumentError(
        "network: momentum and weight decay need every step applied at once (apply_every 1)");
  if (mode == NetworkMode::kGradients && grads == nullptr)
    return InvalidArgumentError("network: gradient mode needs a gradient vector");
  return OkStatus();
}

// One scratchpad for every step, as large as the largest step needs (oneDNN's user scratchpad
// mode): a network runs its steps one at a time. Empty when no step needs one.
memory ShareScratchpad(const dnnl::engine& eng, std::vector<Step>* forward,
                       std::vector<Step>* backward) {
  size_t scratch = 0;
  auto scratch_md = [](const Step& st) {
    if (st.run) return memory::desc();
    return memory::desc(
        *dnnl_primitive_desc_query_md(st.prim.get_primitive_desc(), dnnl_query_scratchpad_md, 0));
  };
  for (auto* list : {forward, backward})
    for (const auto& st : *list) scratch = std::max(scratch, scratch_md(st).get_size());
  if (scratch == 0) return {};
  memory pad({{int64_t(scratch)}, dt::u8, tag::x}, eng);
  for (auto* list : {forward, backward})
    for (auto& st : *list)
      if (scratch_md(st).get_size() > 0)
        st.args[DNNL_ARG_SCRATCHPAD] = memory(scratch_md(st), eng, pad.get_data_handle());
  return pad;
}

}  // namespace

StatusOr<std::unique_ptr<Network>> Network::Create(const ModelLayout& layout, int batch,
                                                   float* params, float* grads, NetworkMode mode,
                                                   int apply_every, bool hold, StepRule rule) {
  if (layout.spec().layers.empty() || layout.spec().layers.back().type != spec::LayerType::kSoftmax)
    return InvalidArgumentError("network: the last layer must be softmax");
  return Build(layout, {batch, params, grads, mode, apply_every, hold, rule});
}

StatusOr<std::unique_ptr<Network>> Network::CreateSegment(const ModelLayout& layout, int batch,
                                                          float* params, float* grads,
                                                          NetworkMode mode, bool input_gradient,
                                                          StepRule rule) {
  if (!layout.spec().layers.empty() &&
      layout.spec().layers.back().type == spec::LayerType::kSoftmax)
    return InvalidArgumentError("network: a segment has no softmax layer");
  if (input_gradient && mode == NetworkMode::kInference)
    return InvalidArgumentError("network: an input gradient needs a training mode");
  return Build(layout, {batch, params, grads, mode, 1, false, rule, true, input_gradient});
}

StatusOr<std::unique_ptr<Network>> Network::Build(const ModelLayout& layout, const Options& o) {
  const int batch = o.batch;
  float* params = o.params;
  float* grads = o.grads;
  const NetworkMode mode = o.mode;
  const StepRule& rule = o.rule;
  ADAM_RETURN_IF_ERROR(CheckNetworkOptions(batch, grads, mode, o.apply_every, o.hold, rule));
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.batch = batch;
  m.classes = layout.classes();
  m.input_size = layout.input_size();
  m.labels.resize(batch);
  m.mode = mode;
  m.params = params;
  if (mode == NetworkMode::kSgd)
    m.rng = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  const bool train = mode != NetworkMode::kInference;
  const bool sgd = mode == NetworkMode::kSgd;
  if (sgd) {
    m.own_grads.assign(size_t(layout.num_params()), 0.f);
    grads = m.own_grads.data();
  }
  m.grads = grads;
  m.dense_io.resize(layout.shapes().size());
  m.apply_every = sgd ? o.apply_every : 1;
  m.hold = sgd && (o.apply_every > 1 || o.hold);
  m.segment = o.segment;
  m.held_index.assign(layout.shapes().size(), -1);
  if (sgd) m.rule = rule;
  m.label_smoothing = rule.label_smoothing;
  if (sgd && rule.momentum > 0) {
    if (rule.velocity == nullptr) m.own_velocity.assign(size_t(layout.num_params()), 0.f);
    m.velocity = rule.velocity ? rule.velocity : m.own_velocity.data();
    for (const auto& lp : layout.params()) {
      if (lp.weights.count > 0) m.weight_ranges.push_back(lp.weights);
      if (lp.bias.count > 0) m.bias_ranges.push_back(lp.bias);
    }
  }
  try {
    const auto& eng = m.eng;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    m.input = memory({Dims4(batch, layout.spec().input), dt::f32, tag::nchw}, eng);
    memory input_diff;
    if (train && o.input_gradient) m.input_grad = input_diff = memory(m.input.get_desc(), eng);
    Builder b{m,     eng,    attr,    batch,      train,           sgd,
              grads, params, m.input, input_diff, o.input_gradient};
    ADAM_RETURN_IF_ERROR(b.Layers(layout));
    if (m.segment) b.SegmentEnd();
    m.scratchpad = ShareScratchpad(eng, &m.forward, &m.backward);
  } catch (const dnnl::error& e) {
    return InternalError(std::string("oneDNN could not build the model: ") + e.what());
  }
  return std::unique_ptr<Network>(new Network(std::move(impl)));
}

}  // namespace adam::model
