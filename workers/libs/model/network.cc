// Network on oneDNN 2.x primitives: conv, inner product, eltwise and softmax, forward and
// backward, and pooling of our own (model/pool.h); the parameter vector keeps plain layouts
// (OIHW/OI weights), so it is the wire format as it is. This file runs the steps that
// network_build.cc makes (the Impl they share is in network_impl.h).
#include "model/network.h"

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

Network::Network(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Network::~Network() = default;

int Network::batch() const { return impl_->batch; }

int Network::pending() const { return impl_->pending; }

Network::PendingRows Network::pending_rows(int layer) const {
  const Impl& m = *impl_;
  if (layer < 0 || size_t(layer) >= m.held_index.size() || m.held_index[size_t(layer)] < 0)
    return {};
  const auto& h = m.held[size_t(m.held_index[size_t(layer)])];
  return {h.a.data(), h.e.data(), int64_t{m.pending} * m.batch, h.in, h.units};
}

void Network::ApplyPending() {
  Impl& m = *impl_;
  if (m.pending == 0) return;
  const int64_t rows = int64_t{m.pending} * m.batch;
  HogwildScope hogwild;  // the shared weights, written without a lock
  float* w = m.params;
  size_t j = 0;
  for (const auto& r : m.looped_updates)
    for (int64_t k = r.offset; k < r.offset + r.count; ++k) {
      w[k] -= m.held_steps[j];
      m.held_steps[j++] = 0.f;
    }
  for (const auto& h : m.held) {
    // W (units x in) += E^T (units x rows) x A (rows x in); bias += column sums of E.
    dnnl_sgemm('T', 'N', h.units, h.in, rows, 1.f, h.e.data(), h.units, h.a.data(), h.in, 1.f,
               w + h.weights, h.in);
    float* bias = w + h.bias;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t u = 0; u < h.units; ++u) bias[u] += h.e[size_t(r * h.units + u)];
  }
  m.pending = 0;
}

Network::DenseIo Network::dense_io(int layer) const {
  if (layer < 0 || size_t(layer) >= impl_->dense_io.size()) return {};
  return impl_->dense_io[size_t(layer)];
}

const std::vector<ParamRange>& Network::looped_ranges() const { return impl_->looped_updates; }

const float* Network::pending_steps() const { return impl_->held_steps.data(); }

void Network::ClearPending() {
  Impl& m = *impl_;
  std::fill(m.held_steps.begin(), m.held_steps.end(), 0.f);
  m.pending = 0;
}

const float* Network::output() const {
  return impl_->output ? static_cast<const float*>(impl_->output.get_data_handle()) : nullptr;
}
float* Network::output_gradient() {
  return impl_->output_grad ? static_cast<float*>(impl_->output_grad.get_data_handle()) : nullptr;
}
const float* Network::input_gradient() const {
  return impl_->input_grad ? static_cast<const float*>(impl_->input_grad.get_data_handle())
                           : nullptr;
}

float* Network::input() { return static_cast<float*>(impl_->input.get_data_handle()); }

void Network::SetInputFromBytes(const uint8_t* pixels) {
  float* in = input();
  const int64_t n = impl_->input_size * impl_->batch;
  for (int64_t i = 0; i < n; ++i) in[i] = pixels[i] * kPixelScale + kPixelShift;
}

const float* Network::probabilities() const {
  return static_cast<const float*>(impl_->probs.get_data_handle());
}

float SmoothedCrossEntropy(const float* p, int classes, int label, float s) {
  float loss = -std::log(std::max(p[label], 1e-30f));
  if (s == 0.f) return loss;
  float all = 0.f;  // -sum_c log p[c]
  for (int c = 0; c < classes; ++c) all -= std::log(std::max(p[c], 1e-30f));
  return (1.f - s) * loss + s / float(classes) * all;
}

namespace {
uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

float Network::Forward(const uint8_t* labels, int* predicted) {
  Impl& m = *impl_;
  if (!m.dropouts.empty()) {
    if (m.mode == NetworkMode::kGradients) m.rng = 0;
    for (auto& d : m.dropouts) {
      float* mask = static_cast<float*>(d.mask.get_data_handle());
      const size_t n = d.mask.get_desc().get_size() / sizeof(float);
      const uint32_t below = uint32_t(std::min(double(d.keep) * 4294967296.0, 4294967295.0));
      const float scale = 1.f / d.keep;
      for (size_t k = 0; k < n; k += 2) {  // two 32-bit draws per 64-bit number
        const uint64_t r = SplitMix64(&m.rng);
        mask[k] = uint32_t(r) < below ? scale : 0.f;
        if (k + 1 < n) mask[k + 1] = uint32_t(r >> 32) < below ? scale : 0.f;
      }
    }
  }
  for (auto& s : m.forward) Execute(s, m.strm);
  m.strm.wait();
  if (m.segment) return 0.f;
  const float* p = probabilities();
  float loss = 0.f;
  for (int n = 0; n < m.batch; ++n) {
    const float* row = p + int64_t{n} * m.classes;
    if (predicted) predicted[n] = int(std::max_element(row, row + m.classes) - row);
    if (labels) {
      m.labels[n] = labels[n];
      loss += SmoothedCrossEntropy(row, m.classes, labels[n], m.label_smoothing);
    }
  }
  return loss;
}

void Network::Backward(float lr) { RunBackward(lr, Pass::kAll); }

void Network::BackwardData() {
  ADAM_CHECK(impl_->apply_every == 1 && !impl_->hold);
  RunBackward(0.f, Pass::kData);
}

void Network::BackwardWeights(float lr) { RunBackward(lr, Pass::kWeights); }

// Backward's steps in order, or one half of them: every step towards an input gradient (kData)
// or every other (kWeights). Deferring the weights' steps changes nothing they compute: a layer's
// weight step reads its input and its output's gradient, which no step of the data half writes
// once that layer's own activation step has run, and the data half reads the weights before
// any of this step's changes (a dense layer's input gradient was already taken before its fused
// update).
void Network::RunBackward(float lr, Pass pass) {
  Impl& m = *impl_;
  ADAM_CHECK(!m.backward.empty());
  if (pass != Pass::kWeights) PrepareBackwardData();
  if (pass == Pass::kData) {
    for (auto& s : m.backward)
      if (!s.weights) Execute(s, m.strm);
    m.strm.wait();
    return;
  }
  if (m.neg_lr) *static_cast<float*>(m.neg_lr.get_data_handle()) = -lr;
  const float decay_scale = 1.f - lr * m.rule.weight_decay;
  if (m.velocity == nullptr && decay_scale != m.decay_scale) m.SetDecayScale(decay_scale);
  for (auto& s : m.backward)
    if (pass == Pass::kAll || s.weights) Execute(s, m.strm);
  m.strm.wait();
  if (m.mode != NetworkMode::kSgd) return;
  if (m.hold) {
    m.HoldStep(lr);
  } else if (m.velocity != nullptr) {
    StepWithVelocity(lr);
  } else {
    m.StepInPlace(lr, decay_scale);
  }
}

void Network::Impl::SetDecayScale(float scale) {
  // The rate changed (once an epoch): the dense layers' fused updates get the new decay.
  for (size_t i : decayed_steps) {
    Step& st = backward[i];
    const auto& d = decayed[size_t(st.decayed)];
    st.prim = FusedUpdate(d.a, d.src, d.w, scale, eng);
    const auto it = st.args.find(DNNL_ARG_SCRATCHPAD);
    ADAM_CHECK(memory::desc(*dnnl_primitive_desc_query_md(st.prim.get_primitive_desc(),
                                                          dnnl_query_scratchpad_md, 0))
                   .get_size() <= (it == st.args.end() ? 0 : it->second.get_desc().get_size()));
  }
  decay_scale = scale;
}

void Network::Impl::HoldStep(float lr) {
  if (held_steps.empty()) {
    size_t n = 0;
    for (const auto& r : looped_updates) n += size_t(r.count);
    held_steps.assign(n, 0.f);
  }
  ADAM_CHECK(pending < apply_every);
  size_t j = 0;
  for (const auto& r : looped_updates)
    for (int64_t k = r.offset; k < r.offset + r.count; ++k) held_steps[j++] += lr * grads[k];
  const int64_t row0 = int64_t{pending} * batch;
  for (auto& h : held) {
    const auto& io = dense_io[size_t(h.layer)];
    std::memcpy(h.a.data() + row0 * h.in, io.src, size_t(batch * h.in) * sizeof(float));
    float* e = h.e.data() + row0 * h.units;
    for (int64_t k = 0; k < batch * h.units; ++k) e[k] = -lr * io.diff_dst[k];
  }
  ++pending;
}

void Network::Impl::StepInPlace(float lr, float decay) {
  HogwildScope hogwild;  // the shared weights, written without a lock
  float* w = params;
  const float* g = grads;
  for (size_t i = 0; i < looped_updates.size(); ++i) {
    const auto& r = looped_updates[i];
    const float scale = looped_is_weight[i] ? decay : 1.f;
    if (scale == 1.f) {
      for (int64_t k = r.offset; k < r.offset + r.count; ++k) w[k] -= lr * g[k];
    } else {
      for (int64_t k = r.offset; k < r.offset + r.count; ++k) w[k] = scale * w[k] - lr * g[k];
    }
  }
  for (const auto& b : dense_bias) {
    const float* d = static_cast<const float*>(b.diff_dst.get_data_handle());
    float* bias = w + b.offset;
    for (int n = 0; n < batch; ++n)
      for (int u = 0; u < b.units; ++u) bias[u] -= lr * d[int64_t{n} * b.units + u];
  }
}

// What the first backward step reads: the loss's gradient at the logits (a whole model).
void Network::PrepareBackwardData() {
  Impl& m = *impl_;
  if (!m.segment) {
    // d(mean cross-entropy)/d(logits) = (softmax - target) / batch (the targets sum to 1).
    const float* p = probabilities();
    float* d = static_cast<float*>(m.diff_logits.get_data_handle());
    const float inv = 1.f / float(m.batch);
    for (int n = 0; n < m.batch; ++n)
      for (int c = 0; c < m.classes; ++c) {
        const int64_t k = int64_t{n} * m.classes + c;
        d[k] = (p[k] - SmoothedTarget(c, m.labels[n], m.classes, m.label_smoothing)) * inv;
      }
  }
}

void Network::StepWithVelocity(float lr) {
  Impl& m = *impl_;
  float* v = m.velocity;
  const float mu = m.rule.momentum, wd = m.rule.weight_decay;
  const float* g = m.grads;
  for (const auto& r : m.looped_updates)
    for (int64_t k = r.offset; k < r.offset + r.count; ++k) v[k] = mu * v[k] + g[k];
  for (const auto& b : m.dense_bias) {
    const float* d = static_cast<const float*>(b.diff_dst.get_data_handle());
    float* vb = v + b.offset;
    for (int u = 0; u < b.units; ++u) vb[u] *= mu;
    for (int n = 0; n < m.batch; ++n)
      for (int u = 0; u < b.units; ++u) vb[u] += d[int64_t{n} * b.units + u];
  }
  HogwildScope hogwild;  // the shared weights, written without a lock
  float* w = m.params;
  for (const auto& r : m.weight_ranges)
    for (int64_t k = r.offset; k < r.offset + r.count; ++k) {
      v[k] += wd * w[k];
      w[k] -= lr * v[k];
    }
  for (const auto& r : m.bias_ranges)
    for (int64_t k = r.offset; k < r.offset + r.count; ++k) w[k] -= lr * v[k];
}

}  // namespace adam::model
