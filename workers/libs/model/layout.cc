// ModelLayout construction and initialisation.
#include "model/layout.h"

#include <cmath>
#include <random>

namespace adam::model {

StatusOr<ModelLayout> ModelLayout::Make(const spec::ModelSpec& spec) {
  ModelLayout m;
  m.spec_ = spec;
  ADAM_ASSIGN_OR_RETURN(m.shapes_, spec::InferShapes(spec));
  int64_t off = 0;
  for (const auto& s : m.shapes_) {
    LayerParams p;
    p.weights = {off, s.weights};
    off += s.weights;
    p.bias = {off, s.biases};
    off += s.biases;
    m.params_.push_back(p);
  }
  m.num_params_ = off;
  if (off == 0) return InvalidArgumentError("spec.model: the model has no parameters");
  return m;
}

double ModelLayout::ForwardFlops() const {
  double f = 0;
  for (size_t i = 0; i < shapes_.size(); ++i) {
    const auto& s = shapes_[i];
    if (spec_.layers[i].type == spec::LayerType::kConv)
      f += 2.0 * s.weights * s.out.height * s.out.width;
    else
      f += 2.0 * s.weights;
  }
  return f;
}

float ModelLayout::InitLimit(size_t layer) const {
  const auto& s = shapes_[layer];
  const auto& l = spec_.layers[layer];
  if (s.weights == 0) return 0.f;
  double fan_in, fan_out;
  if (l.type == spec::LayerType::kConv) {
    fan_in = double(s.in.channels) * l.kernel * l.kernel;
    fan_out = double(l.maps) * l.kernel * l.kernel;
  } else {
    fan_in = double(s.in.size());
    fan_out = double(s.out.channels);
  }
  const bool rectifier =
      l.activation == spec::Activation::kRelu || l.activation == spec::Activation::kLeakyRelu;
  return float(rectifier ? std::sqrt(6.0 / fan_in) : std::sqrt(6.0 / (fan_in + fan_out)));
}

void ModelLayout::InitParams(uint64_t seed, float* out) const {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < shapes_.size(); ++i) {
    const LayerParams& p = params_[i];
    if (p.weights.count > 0) {
      const float limit = InitLimit(i);
      std::uniform_real_distribution<float> dist(-limit, limit);
      for (int64_t k = 0; k < p.weights.count; ++k) out[p.weights.offset + k] = dist(rng);
    }
    for (int64_t k = 0; k < p.bias.count; ++k) out[p.bias.offset + k] = 0.f;
  }
}

}  // namespace adam::model
