// ONNX export and import of Adam's models (see onnx.h for the graph's shape).
#include "model/onnx.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/file.h"
#include "model/network.h"  // kPixelScale, kPixelShift

namespace adam::model {
namespace {

constexpr int64_t kIrVersion = 8;   // ONNX 1.10+, opset 13 and up
constexpr int kMaxCropMargin = 32;  // spec.dataset.augment.crop's bound

void AddMetadata(onnx::ModelProto* m, const std::string& key, const std::string& value) {
  auto* p = m->add_metadata_props();
  p->set_key(key);
  p->set_value(value);
}

std::vector<std::string> NumberedClasses(int n) {
  std::vector<std::string> names;
  names.reserve(size_t(n));
  for (int c = 0; c < n; ++c) names.push_back(std::to_string(c));
  return names;
}

void WriteMetadata(onnx::ModelProto* m, const ModelLayout& layout, const OnnxInfo& info) {
  AddMetadata(
      m, "classes",
      nlohmann::json(info.classes.empty() ? NumberedClasses(layout.classes()) : info.classes)
          .dump());
  AddMetadata(m, "input_layout", "NCHW");
  AddMetadata(m, "input_channels", layout.spec().input.channels == 1 ? "grey" : "rgb");
  AddMetadata(m, "input_range", "0..255");
  AddMetadata(m, "normalization", "x*2/255-1");
  AddMetadata(m, "fit", info.fit.fit);
  AddMetadata(m, "crop_margin", std::to_string(info.fit.crop_margin));
  AddMetadata(m, "background", "white");
}

// The metadata WriteMetadata writes, checked; a key that is absent keeps its default, one that
// is present must be right.
Status ReadMetadata(const onnx::ModelProto& m, ImportedModel* out) {
  const int classes = spec::NumClasses(out->model);
  out->classes = NumberedClasses(classes);
  for (const auto& p : m.metadata_props()) {
    const std::string at = "onnx: metadata_props[\"" + p.key() + "\"]: ";
    if (p.key() == "classes") {
      auto j = nlohmann::json::parse(p.value(), nullptr, /*allow_exceptions=*/false);
      if (!j.is_array() || int(j.size()) != classes)
        return InvalidArgumentError(at + "not a JSON array of " + std::to_string(classes) +
                                    " class names");
      for (size_t c = 0; c < j.size(); ++c) {
        if (!j[c].is_string())
          return InvalidArgumentError(at + "entry " + std::to_string(c) + " is not a string");
        out->classes[c] = j[c].get<std::string>();
      }
    } else if (p.key() == "fit") {
      if (p.value() != "crop" && p.value() != "stretch" && p.value() != "none")
        return InvalidArgumentError(at + "\"" + p.value() + "\" is not crop, stretch or none");
      out->fit.fit = p.value();
    } else if (p.key() == "crop_margin") {
      char* end = nullptr;
      const long v = std::strtol(p.value().c_str(), &end, 10);
      if (p.value().empty() || *end != '\0' || v < 0 || v > kMaxCropMargin)
        return InvalidArgumentError(at + "\"" + p.value() + "\" is not a margin of 0 to " +
                                    std::to_string(kMaxCropMargin) + " pixels");
      out->fit.crop_margin = int(v);
    }
  }
  return OkStatus();
}

using spec::Activation;
using spec::LayerType;

void AddInts(onnx::NodeProto* n, const char* name, std::initializer_list<int64_t> v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void AddInt(onnx::NodeProto* n, const char* name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void AddTensor(onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& dims,
               const float* data, int64_t count) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  // raw_data is little-endian, as this machine's floats.
  t->set_raw_data(std::string(reinterpret_cast<const char*>(data), size_t(count) * sizeof(float)));
}

void SetFloatShape(onnx::ValueInfoProto* v, const std::string& name,
                   std::initializer_list<int64_t> dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  auto* shape = tt->mutable_shape();
  auto* n = shape->add_dim();
  n->set_dim_param("N");  // any batch
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

const char* ActivationOp(Activation a) {
  switch (a) {
    case Activation::kTanh:
      return "Tanh";
    case Activation::kRelu:
      return "Relu";
    case Activation::kSigmoid:
      return "Sigmoid";
    case Activation::kLeakyRelu:
      return "LeakyRelu";
    case Activation::kNone:
      return nullptr;
  }
  return nullptr;
}

// Writes a model's layers as a chain of ONNX nodes into a graph, each node's output the next
// one's input (Importer reads that chain back).
class Exporter {
 public:
  Exporter(onnx::GraphProto* g, const ModelLayout& layout, const float* params)
      : g_(g), layout_(layout), params_(params) {}

  // The input's normalisation, then every layer.
  void Write() {
    AddTensor(g_, "pixel_scale", {}, &kPixelScale, 1);
    AddTensor(g_, "pixel_shift", {}, &kPixelShift, 1);
    x_ = Node("Mul", {"pixels", "pixel_scale"})->output(0);
    x_ = Node("Add", {x_, "pixel_shift"})->output(0);
    for (size_t i = 0; i < layout_.spec().layers.size(); ++i) Layer(i);
  }

 private:
  onnx::NodeProto* Node(const char* op, std::vector<std::string> inputs) {
    auto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(std::string(op) + "_" + std::to_string(next_++));
    for (auto& in : inputs) n->add_input(std::move(in));
    n->add_output(n->name());
    return n;
  }

  void Layer(size_t i) {
    const auto& l = layout_.spec().layers[i];
    const auto& s = layout_.shapes()[i];
    const auto& p = layout_.params()[i];
    const std::string w = "layers." + std::to_string(i) + ".weight";
    const std::string b = "layers." + std::to_string(i) + ".bias";
    Activation act = Activation::kNone;
    switch (l.type) {
      case LayerType::kConv: {
        AddTensor(g_, w, {l.maps, s.in.channels, l.kernel, l.kernel}, params_ + p.weights.offset,
                  p.weights.count);
        AddTensor(g_, b, {l.maps}, params_ + p.bias.offset, p.bias.count);
        auto* n = Node("Conv", {x_, w, b});
        AddInts(n, "kernel_shape", {l.kernel, l.kernel});
        AddInts(n, "strides", {l.stride, l.stride});
        AddInts(n, "pads", {l.padding, l.padding, l.padding, l.padding});
        x_ = n->output(0);
        act = l.activation;
        break;
      }
      case LayerType::kMaxPool:
      case LayerType::kAvgPool: {
        auto* n = Node(l.type == LayerType::kMaxPool ? "MaxPool" : "AveragePool", {x_});
        AddInts(n, "kernel_shape", {l.size, l.size});
        AddInts(n, "strides", {l.size, l.size});
        x_ = n->output(0);
        break;
      }
      case LayerType::kDropout:
        break;  // identity at evaluation
      case LayerType::kDense:
      case LayerType::kSoftmax:
        act = Gemm(l, s, p, w, b);
        break;
    }
    if (const char* op = ActivationOp(act)) {
      auto* n = Node(op, {x_});
      if (act == Activation::kLeakyRelu) {
        auto* a = n->add_attribute();
        a->set_name("alpha");
        a->set_type(onnx::AttributeProto::FLOAT);
        a->set_f(spec::kLeakySlope);
      }
      x_ = n->output(0);
    }
  }

  // A dense or softmax layer: Flatten before the first, Gemm, and a Softmax for the last. Returns
  // the activation still to apply.
  Activation Gemm(const spec::LayerSpec& l, const spec::LayerShape& s, const LayerParams& p,
                  const std::string& w, const std::string& b) {
    if (!flat_) {
      auto* n = Node("Flatten", {x_});
      AddInt(n, "axis", 1);
      x_ = n->output(0);
      flat_ = true;
    }
    const int units = s.out.channels;
    AddTensor(g_, w, {units, s.in.size()}, params_ + p.weights.offset, p.weights.count);
    AddTensor(g_, b, {units}, params_ + p.bias.offset, p.bias.count);
    auto* n = Node("Gemm", {x_, w, b});
    AddInt(n, "transB", 1);
    x_ = n->output(0);
    if (l.type == LayerType::kDense) return l.activation;
    auto* sm = Node("Softmax", {x_});
    AddInt(sm, "axis", 1);
    x_ = sm->output(0);
    return Activation::kNone;
  }

  onnx::GraphProto* g_;
  const ModelLayout& layout_;
  const float* params_;
  int next_ = 0;   // numbers the nodes' names
  std::string x_;  // the output the next node reads
  bool flat_ = false;
};

}  // namespace

StatusOr<std::string> ExportOnnx(const ModelLayout& layout, const float* params,
                                 const OnnxInfo& info) {
  const auto& spec = layout.spec();
  if (spec.layers.empty() || spec.layers.back().type != LayerType::kSoftmax)
    return InvalidArgumentError("onnx: the model does not end in a softmax layer");
  if (!info.classes.empty() && int(info.classes.size()) != layout.classes())
    return InvalidArgumentError("onnx: " + std::to_string(info.classes.size()) +
                                " class names for the softmax's " +
                                std::to_string(layout.classes()) + " classes");
  onnx::ModelProto model;
  model.set_ir_version(kIrVersion);
  model.set_producer_name("adam");
  model.set_producer_version(info.producer_version);
  model.set_doc_string(info.doc);
  WriteMetadata(&model, layout, info);
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxOpset);
  auto* g = model.mutable_graph();
  g->set_name(info.name.empty() ? "adam" : info.name);
  SetFloatShape(g->add_input(), "pixels",
                {spec.input.channels, spec.input.height, spec.input.width});
  Exporter(g, layout, params).Write();
  // The last node's output is the graph's.
  g->mutable_node(g->node_size() - 1)->set_output(0, "probabilities");
  SetFloatShape(g->add_output(), "probabilities", {layout.classes()});
  std::string out;
  if (!model.SerializeToString(&out)) return InternalError("onnx: serialising the model failed");
  return out;
}

namespace {

// Reads the chain of nodes ExportOnnx writes. Every error names the node (index, op, name) or
// the tensor at fault.
class Importer {
 public:
  explicit Importer(const onnx::GraphProto& g) : g_(g) {
    for (const auto& t : g.initializer()) tensors_.emplace(t.name(), &t);
  }

  StatusOr<ImportedModel> Run() {
    ImportedModel out;
    out.name = g_.name();
    if (g_.input_size() < 1)
      return InvalidArgumentError("onnx: graph.input: the graph has no input");
    ADAM_ASSIGN_OR_RETURN(out.model.input, InputShape(g_.input(0)));
    std::string x = g_.input(0).name();
    // The normalisation: Mul by 2/255, then Add -1.
    ADAM_RETURN_IF_ERROR(Scalar("Mul", kPixelScale, &x));
    ADAM_RETURN_IF_ERROR(Scalar("Add", kPixelShift, &x));
    Tensors tensors;
    while (i_ < g_.node_size()) {
      const auto& n = g_.node(i_);
      ADAM_RETURN_IF_ERROR(Chained(n, x));
      const std::string op = n.op_type();
      spec::LayerSpec l;
      if (op == "Flatten") {
        ADAM_RETURN_IF_ERROR(Flatten(n, &x));
        continue;
      }
      if (op == "Conv") {
        ADAM_RETURN_IF_ERROR(Conv(n, &l, &x, &tensors));
      } else if (op == "MaxPool" || op == "AveragePool") {
        ADAM_RETURN_IF_ERROR(Pool(n, &l, &x, &tensors));
      } else if (op == "Gemm") {
        ADAM_RETURN_IF_ERROR(Gemm(n, &l, &x, &tensors));
      } else {
        return NodeError(n,
                         "an op Adam does not write (Conv, MaxPool, AveragePool, Flatten, "
                         "Gemm, Softmax and activations only)");
      }
      if (int(out.model.layers.size()) >= spec::kMaxLayers)
        return NodeError(n, "more than " + std::to_string(spec::kMaxLayers) + " layers");
      out.model.layers.push_back(l);
    }
    if (out.model.layers.empty() || out.model.layers.back().type != LayerType::kSoftmax)
      return InvalidArgumentError("onnx: the graph does not end in Gemm + Softmax");
    if (g_.output_size() != 1 || g_.output(0).name() != x)
      return InvalidArgumentError("onnx: graph.output: must be the softmax's output '" + x + "'");
    ADAM_RETURN_IF_ERROR(Fill(tensors, &out));
    return out;
  }

 private:
  // Per layer, the weight and bias tensors it reads (none for a pool), in the order ModelLayout
  // lays them out.
  using Tensors = std::vector<std::pair<const onnx::TensorProto*, const onnx::TensorProto*>>;

  Status Conv(const onnx::NodeProto& n, spec::LayerSpec* l, std::string* x, Tensors* tensors) {
    l->type = LayerType::kConv;
    const onnx::TensorProto *w, *b;
    ADAM_RETURN_IF_ERROR(Weights(n, 4, &w, &b));
    std::vector<int64_t> k, st, pads;
    ADAM_RETURN_IF_ERROR(Ints(n, "kernel_shape", 2, &k));
    ADAM_RETURN_IF_ERROR(Ints(n, "strides", 2, &st));
    ADAM_RETURN_IF_ERROR(Ints(n, "pads", 4, &pads));
    if (k[0] != k[1] || st[0] != st[1] || pads[0] != pads[1] || pads[0] != pads[2] ||
        pads[0] != pads[3])
      return NodeError(n, "kernel, strides and pads must be square and symmetric");
    if (w->dims(2) != k[0] || w->dims(3) != k[0])
      return NodeError(n, "the weight's dims do not match kernel_shape");
    for (const auto& a : n.attribute()) {
      const bool ones = a.i() <= 1 && std::all_of(a.ints().begin(), a.ints().end(),
                                                  [](int64_t v) { return v == 1; });
      if (a.name() == "kernel_shape" || a.name() == "strides" || a.name() == "pads" ||
          ((a.name() == "dilations" || a.name() == "group") && ones) ||
          (a.name() == "auto_pad" && a.s() == "NOTSET"))
        continue;
      return NodeError(n, "attribute " + a.name() + ": Adam's convolutions have none");
    }
    ADAM_RETURN_IF_ERROR(Int32(n, w->dims(0), &l->maps));
    ADAM_RETURN_IF_ERROR(Int32(n, k[0], &l->kernel));
    ADAM_RETURN_IF_ERROR(Int32(n, st[0], &l->stride));
    ADAM_RETURN_IF_ERROR(Int32(n, pads[0], &l->padding));
    tensors->push_back({w, b});
    *x = n.output(0);
    ++i_;
    return ReadActivation(l, x);
  }

  Status Pool(const onnx::NodeProto& n, spec::LayerSpec* l, std::string* x, Tensors* tensors) {
    l->type = n.op_type() == "MaxPool" ? LayerType::kMaxPool : LayerType::kAvgPool;
    std::vector<int64_t> k, st;
    ADAM_RETURN_IF_ERROR(Ints(n, "kernel_shape", 2, &k));
    ADAM_RETURN_IF_ERROR(Ints(n, "strides", 2, &st));
    if (k[0] != k[1] || st != k)
      return NodeError(n, "the window must be square with strides equal to its size");
    for (const auto& a : n.attribute()) {
      const bool zero = a.i() == 0 && std::all_of(a.ints().begin(), a.ints().end(),
                                                  [](int64_t v) { return v == 0; });
      if ((a.name() == "pads" || a.name() == "ceil_mode") && !zero)
        return NodeError(n, "attribute " + a.name() + ": Adam's pools have no padding");
      if (a.name() == "auto_pad" && a.s() != "NOTSET")
        return NodeError(n, "attribute auto_pad: Adam's pools have no padding");
    }
    ADAM_RETURN_IF_ERROR(Int32(n, k[0], &l->size));
    tensors->push_back({nullptr, nullptr});
    *x = n.output(0);
    ++i_;
    return OkStatus();
  }

  // A Flatten, allowed only right before a Gemm: no layer of its own.
  Status Flatten(const onnx::NodeProto& n, std::string* x) {
    for (const auto& a : n.attribute())
      if (a.name() == "axis" && a.i() != 1) return NodeError(n, "axis must be 1");
    if (i_ + 1 >= g_.node_size() || g_.node(i_ + 1).op_type() != "Gemm")
      return NodeError(n, "Adam flattens only right before a Gemm");
    *x = n.output(0);
    ++i_;
    return OkStatus();
  }

  // A Gemm: a dense layer with its activation, or, followed by a Softmax, the last layer.
  Status Gemm(const onnx::NodeProto& n, spec::LayerSpec* l, std::string* x, Tensors* tensors) {
    const onnx::TensorProto *w, *b;
    ADAM_RETURN_IF_ERROR(Weights(n, 2, &w, &b));
    for (const auto& a : n.attribute()) {
      if (a.name() == "transB" && a.i() == 1) continue;
      if ((a.name() == "alpha" || a.name() == "beta") && a.f() == 1.f) continue;
      if (a.name() == "transA" && a.i() == 0) continue;
      return NodeError(n, "attribute " + a.name() + ": Adam writes Gemm with transB 1 only");
    }
    tensors->push_back({w, b});
    *x = n.output(0);
    ++i_;
    if (i_ >= g_.node_size() || g_.node(i_).op_type() != "Softmax") {
      l->type = LayerType::kDense;
      ADAM_RETURN_IF_ERROR(Int32(n, w->dims(0), &l->units));
      return ReadActivation(l, x);
    }
    const auto& sm = g_.node(i_);
    ADAM_RETURN_IF_ERROR(Chained(sm, *x));
    for (const auto& a : sm.attribute())
      if (a.name() == "axis" && a.i() != 1 && a.i() != -1) return NodeError(sm, "axis must be 1");
    l->type = LayerType::kSoftmax;
    ADAM_RETURN_IF_ERROR(Int32(n, w->dims(0), &l->classes));
    *x = sm.output(0);
    ++i_;
    if (i_ != g_.node_size())
      return NodeError(g_.node(i_), "a node after the softmax (it must be the last)");
    return OkStatus();
  }

  // Checks each weight's dims against the model's layout and copies the tensors into
  // `out->params`. Since every tensor holds the values its dims promise (Weights checked), the
  // allocation is bounded by the file's size.
  Status Fill(const Tensors& tensors, ImportedModel* out) {
    auto layout = ModelLayout::Make(out->model);
    if (!layout.ok()) return layout.status().Annotate("onnx: the graph's model");
    for (size_t li = 0; li < tensors.size(); ++li) {
      const auto& s = layout->shapes()[li];
      const onnx::TensorProto* w = tensors[li].first;
      if (w == nullptr) continue;
      // Dense weights: (units, inputs); the inputs must be the flattened previous output.
      if (w->dims_size() == 2 && w->dims(1) != s.in.size())
        return InvalidArgumentError("onnx: tensor '" + w->name() +
                                    "': " + std::to_string(w->dims(1)) +
                                    " inputs where the layer has " + std::to_string(s.in.size()));
      if (w->dims_size() == 4 && w->dims(1) != s.in.channels)
        return InvalidArgumentError(
            "onnx: tensor '" + w->name() + "': " + std::to_string(w->dims(1)) +
            " input maps where the layer has " + std::to_string(s.in.channels));
    }
    out->params.resize(size_t(layout->num_params()));
    for (size_t li = 0; li < tensors.size(); ++li) {
      const auto& p = layout->params()[li];
      const auto [w, b] = tensors[li];
      if (w == nullptr) continue;
      ADAM_RETURN_IF_ERROR(Floats(*w, p.weights.count, out->params.data() + p.weights.offset));
      ADAM_RETURN_IF_ERROR(Floats(*b, p.bias.count, out->params.data() + p.bias.offset));
    }
    return OkStatus();
  }

  static Status NodeError(const onnx::NodeProto& n, const std::string& what) {
    return InvalidArgumentError("onnx: node '" + n.name() + "' (" + n.op_type() + "): " + what);
  }

  Status Chained(const onnx::NodeProto& n, const std::string& x) {
    if (n.input_size() < 1 || n.input(0) != x || n.output_size() != 1)
      return NodeError(n, "must read '" + x +
                              "' (the previous node's output) and write one "
                              "output: Adam reads back the chain of nodes it writes");
    return OkStatus();
  }

  static StatusOr<spec::Shape> InputShape(const onnx::ValueInfoProto& v) {
    const std::string at = "onnx: graph.input '" + v.name() + "': ";
    if (!v.type().has_tensor_type() ||
        v.type().tensor_type().elem_type() != onnx::TensorProto::FLOAT)
      return InvalidArgumentError(at + "must be a float tensor");
    const auto& shape = v.type().tensor_type().shape();
    if (shape.dim_size() != 4) return InvalidArgumentError(at + "must be [N, C, H, W]");
    int d[3];
    for (int k = 0; k < 3; ++k) {
      const int64_t v3 = shape.dim(k + 1).dim_value();
      if (v3 < 1 || v3 > 65536)
        return InvalidArgumentError(at + "dim " + std::to_string(k + 1) + " must be in [1, 65536]");
      d[k] = int(v3);
    }
    return spec::Shape{d[0], d[1], d[2]};
  }

  // The next node must be `op`(x, a scalar initializer equal to `value`).
  Status Scalar(const char* op, float value, std::string* x) {
    if (i_ >= g_.node_size())
      return InvalidArgumentError(std::string("onnx: the graph ends before its ") + op +
                                  " normalisation node");
    const auto& n = g_.node(i_);
    ADAM_RETURN_IF_ERROR(Chained(n, *x));
    if (n.op_type() != op || n.input_size() != 2)
      return NodeError(n, std::string("expected the normalisation's ") + op);
    const auto it = tensors_.find(n.input(1));
    float v = 0;
    if (it == tensors_.end() || !Floats(*it->second, 1, &v).ok() || std::fabs(v - value) > 1e-6f)
      return NodeError(
          n, "its constant must be " + std::to_string(value) + " (Adam's pixel normalisation)");
    *x = n.output(0);
    ++i_;
    return OkStatus();
  }

  // The activation node after a Conv or a hidden Gemm, if any.
  Status ReadActivation(spec::LayerSpec* l, std::string* x) {
    l->activation = Activation::kNone;
    if (i_ >= g_.node_size()) return OkStatus();
    const auto& n = g_.node(i_);
    const std::string& op = n.op_type();
    if (op == "Tanh")
      l->activation = Activation::kTanh;
    else if (op == "Relu")
      l->activation = Activation::kRelu;
    else if (op == "Sigmoid")
      l->activation = Activation::kSigmoid;
    else if (op == "LeakyRelu")
      l->activation = Activation::kLeakyRelu;
    else
      return OkStatus();
    ADAM_RETURN_IF_ERROR(Chained(n, *x));
    if (l->activation == Activation::kLeakyRelu)
      for (const auto& a : n.attribute())
        if (a.name() == "alpha" && std::fabs(a.f() - spec::kLeakySlope) > 1e-7f)
          return NodeError(n, "alpha must be " + std::to_string(spec::kLeakySlope));
    *x = n.output(0);
    ++i_;
    return OkStatus();
  }

  Status Weights(const onnx::NodeProto& n, int rank, const onnx::TensorProto** w,
                 const onnx::TensorProto** b) {
    if (n.input_size() != 3) return NodeError(n, "needs a weight and a bias input");
    const auto wi = tensors_.find(n.input(1)), bi = tensors_.find(n.input(2));
    if (wi == tensors_.end() || bi == tensors_.end())
      return NodeError(n, "its weight and bias must be initializers");
    *w = wi->second;
    *b = bi->second;
    if ((*w)->dims_size() != rank)
      return NodeError(n,
                       "weight '" + (*w)->name() + "' must have " + std::to_string(rank) + " dims");
    for (int64_t d : (*w)->dims())
      if (d < 1 || d > spec::kMaxParameters)
        return NodeError(n, "weight '" + (*w)->name() + "' has a dim out of range");
    if ((*b)->dims_size() != 1 || (*b)->dims(0) != (*w)->dims(0))
      return NodeError(
          n, "bias '" + (*b)->name() + "' must be [" + std::to_string((*w)->dims(0)) + "]");
    for (const onnx::TensorProto* t : {*w, *b}) {
      int64_t count = 1;
      for (int64_t d : t->dims()) {
        count *= d;
        if (count > spec::kMaxParameters) return NodeError(n, "'" + t->name() + "' is too large");
      }
      ADAM_RETURN_IF_ERROR(Floats(*t, count, nullptr));  // the values its dims promise are there
    }
    return OkStatus();
  }

  Status Ints(const onnx::NodeProto& n, const char* name, int count, std::vector<int64_t>* out) {
    for (const auto& a : n.attribute())
      if (a.name() == name) {
        if (a.ints_size() != count)
          return NodeError(n, std::string("attribute ") + name + " must have " +
                                  std::to_string(count) + " values");
        out->assign(a.ints().begin(), a.ints().end());
        return OkStatus();
      }
    return NodeError(n, std::string("attribute ") + name + " is missing");
  }

  static Status Int32(const onnx::NodeProto& n, int64_t v, int* out) {
    if (v < 0 || v > (1 << 24)) return NodeError(n, "a size out of range: " + std::to_string(v));
    *out = int(v);
    return OkStatus();
  }

  // Copies the tensor's `count` floats into `out` (null: only checks that it holds them).
  static Status Floats(const onnx::TensorProto& t, int64_t count, float* out) {
    const std::string at = "onnx: tensor '" + t.name() + "': ";
    if (t.data_type() != onnx::TensorProto::FLOAT)
      return InvalidArgumentError(at + "must be float");
    int64_t n = 1;
    for (int64_t d : t.dims()) {
      if (d < 0 || d > spec::kMaxParameters) return InvalidArgumentError(at + "a dim out of range");
      n *= d;
      if (n > spec::kMaxParameters) return InvalidArgumentError(at + "too many values");
    }
    if (n != count)
      return InvalidArgumentError(at + std::to_string(n) + " values where the layer has " +
                                  std::to_string(count));
    if (!t.raw_data().empty()) {
      if (t.raw_data().size() != size_t(count) * sizeof(float))
        return InvalidArgumentError(at + "raw_data holds " + std::to_string(t.raw_data().size()) +
                                    " bytes, not " + std::to_string(count * 4));
      if (out != nullptr) std::memcpy(out, t.raw_data().data(), t.raw_data().size());
    } else if (t.float_data_size() == count) {
      if (out != nullptr) std::copy(t.float_data().begin(), t.float_data().end(), out);
    } else {
      return InvalidArgumentError(at + "holds " + std::to_string(t.float_data_size()) +
                                  " floats, not " + std::to_string(count));
    }
    return OkStatus();
  }

  const onnx::GraphProto& g_;
  std::map<std::string, const onnx::TensorProto*> tensors_;
  int i_ = 0;  // the next node
};

}  // namespace

StatusOr<ImportedModel> ImportOnnx(const std::string& bytes) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes))
    return InvalidArgumentError("onnx: not a serialised ModelProto (" +
                                std::to_string(bytes.size()) + " bytes)");
  bool opset = false;
  for (const auto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version() >= 13;
  if (!opset)
    return InvalidArgumentError("onnx: opset_import: needs the default domain at 13 or later");
  ADAM_ASSIGN_OR_RETURN(ImportedModel out, Importer(model.graph()).Run());
  out.doc = model.doc_string();
  ADAM_RETURN_IF_ERROR(ReadMetadata(model, &out));
  return out;
}

Status WriteOnnxFile(const std::string& path, const ModelLayout& layout, const float* params,
                     const OnnxInfo& info) {
  ADAM_ASSIGN_OR_RETURN(std::string bytes, ExportOnnx(layout, params, info));
  // Written aside and renamed: a reader never sees half a model.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return UnavailableError(path + ": cannot write the model: " + std::strerror(errno));
    f.write(bytes.data(), std::streamsize(bytes.size()));
    if (!f.flush()) return UnavailableError(tmp + ": write failed: " + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return UnavailableError(path + ": cannot rename the written model: " + ec.message());
  return OkStatus();
}

StatusOr<ImportedModel> ReadOnnxFile(const std::string& path) {
  const auto bytes = ReadWholeFile(path);
  if (!bytes) return NotFoundError(path + ": cannot open the model");
  auto m = ImportOnnx(*bytes);
  if (!m.ok()) return m.status().Annotate(path);
  return m;
}

}  // namespace adam::model
