// Model specs for tests: a layer of each kind in one call.
#pragma once

#include <utility>
#include <vector>

#include "spec/adamjob.h"

namespace adam::testing {

inline spec::ModelSpec MakeSpec(std::vector<spec::LayerSpec> layers, spec::Shape input) {
  spec::ModelSpec m;
  m.input = input;
  m.layers = std::move(layers);
  return m;
}

inline spec::LayerSpec Conv(int maps, int kernel, spec::Activation a, int padding = 0) {
  spec::LayerSpec l;
  l.type = spec::LayerType::kConv;
  l.maps = maps;
  l.kernel = kernel;
  l.padding = padding;
  l.activation = a;
  return l;
}
inline spec::LayerSpec Pool(int size, spec::LayerType type = spec::LayerType::kMaxPool) {
  spec::LayerSpec l;
  l.type = type;
  l.size = size;
  return l;
}
inline spec::LayerSpec Dense(int units, spec::Activation a) {
  spec::LayerSpec l;
  l.type = spec::LayerType::kDense;
  l.units = units;
  l.activation = a;
  return l;
}
inline spec::LayerSpec Dropout(double rate) {
  spec::LayerSpec l;
  l.type = spec::LayerType::kDropout;
  l.rate = rate;
  return l;
}
inline spec::LayerSpec Softmax(int classes) {
  spec::LayerSpec l;
  l.type = spec::LayerType::kSoftmax;
  l.classes = classes;
  l.activation = spec::Activation::kNone;
  return l;
}

}  // namespace adam::testing
