// The trainer tests' model: 1x12x12 input, conv 4x3x3, 2x2 max-pool, dense 16, softmax 4.
#pragma once

#include "spec/adamjob.h"

namespace adam::trainer {

inline spec::ModelSpec SmallModel(spec::Activation dense_activation) {
  spec::ModelSpec m;
  m.input = {1, 12, 12};
  spec::LayerSpec conv, pool, dense, soft;
  conv.type = spec::LayerType::kConv;
  conv.maps = 4;
  conv.kernel = 3;
  pool.type = spec::LayerType::kMaxPool;
  pool.size = 2;
  dense.type = spec::LayerType::kDense;
  dense.units = 16;
  dense.activation = dense_activation;
  soft.type = spec::LayerType::kSoftmax;
  soft.classes = 4;
  m.layers = {conv, pool, dense, soft};
  return m;
}

}  // namespace adam::trainer
