// A small DataSource for the data server's tests.
#pragma once

#include <memory>

#include "data_server/data_source.h"

namespace adam::data_server {

// `n` 2x2 images whose first pixel is the image's index (mod 256) and whose label is index % 3.
inline std::unique_ptr<DataSource> MakeSource(int n, int trainers, double quorum, int batch,
                                              int variants = 1) {
  data::Dataset train;
  train.count = n;
  train.height = train.width = 2;
  train.pixels.assign(size_t(n * 4), 0);
  for (int i = 0; i < n; ++i) {
    train.pixels[size_t(i * 4)] = uint8_t(i);
    train.pixels[size_t(i * 4 + 1)] = uint8_t(i >> 8);
    train.labels.push_back(uint8_t(i % 3));
  }
  spec::AugmentSpec a;
  a.variants = variants;
  auto cache = std::make_unique<data::AugmentedCache>(train, a, 1);
  data::Dataset test = train;
  DataSourceOptions o;
  o.trainers = trainers;
  o.quorum = quorum;
  o.batch_images = batch;
  return std::make_unique<DataSource>(std::move(cache), train.labels, std::move(test), o);
}

}  // namespace adam::data_server
