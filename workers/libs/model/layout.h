// The model's parameter layout: where each layer's weights and biases live in one flat float
// vector, how they are initialised, and how much work one image costs.
//
// The flat vector is what parameter servers shard and what trainers push and pull. Conv weights
// are OIHW, dense weights are OI (units x inputs), biases follow their weights. Immutable after
// Make: thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "spec/adamjob.h"

namespace adam::model {

struct ParamRange {
  int64_t offset = 0;
  int64_t count = 0;
};

struct LayerParams {
  ParamRange weights;
  ParamRange bias;
};

class ModelLayout {
 public:
  // Fails with the layer at fault if the model's shapes are impossible.
  static StatusOr<ModelLayout> Make(const spec::ModelSpec& spec);

  const spec::ModelSpec& spec() const { return spec_; }
  const std::vector<spec::LayerShape>& shapes() const { return shapes_; }
  const std::vector<LayerParams>& params() const { return params_; }
  int64_t num_params() const { return num_params_; }
  int64_t input_size() const { return spec_.input.size(); }
  int classes() const { return spec::NumClasses(spec_); }
  // Multiply-adds x2 of one image's forward pass (convolutions and dense layers).
  double ForwardFlops() const;
  // Forward + backward (data and weights) + update: about 3x forward.
  double TrainFlops() const { return 3 * ForwardFlops(); }

  // Writes num_params() initial values into `out`: Glorot-uniform weights (He for relu), zero
  // biases, drawn from `seed` so every process that calls it gets the same vector.
  void InitParams(uint64_t seed, float* out) const;
  // The bound b of layer i's initial weights, drawn uniformly from [-b, b] (0: no weights).
  float InitLimit(size_t layer) const;

 private:
  spec::ModelSpec spec_;
  std::vector<spec::LayerShape> shapes_;
  std::vector<LayerParams> params_;
  int64_t num_params_ = 0;
};

}  // namespace adam::model
