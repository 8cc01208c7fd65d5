// A tiny synthetic data set and a manifest training on it, for end-to-end tests of whole runs.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "data/idx.h"
#include "testing/tmp_dir.h"

namespace adam::testing {

// Four classes of 12x12 images: a bright 4x4 square in one quadrant, over noise.
inline data::Dataset SyntheticDataset(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> noise(0, 60);
  data::Dataset d;
  d.count = n;
  d.height = d.width = 12;
  d.pixels.resize(static_cast<size_t>(n) * 144);
  d.labels.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int c = int(rng() % 4);
    d.labels[size_t(i)] = uint8_t(c);
    const int y0 = (c / 2) * 6 + 1 + int(rng() % 2), x0 = (c % 2) * 6 + 1 + int(rng() % 2);
    for (int y = 0; y < 12; ++y)
      for (int x = 0; x < 12; ++x) {
        const bool in = y >= y0 && y < y0 + 4 && x >= x0 && x < x0 + 4;
        d.pixels[size_t(i * 144 + y * 12 + x)] = uint8_t(in ? 200 + noise(rng) / 2 : noise(rng));
      }
  }
  return d;
}

// SyntheticDataset as PREFIX-images.gz and PREFIX-labels (IDX).
inline void WriteSynthetic(const std::string& prefix, int n, uint32_t seed) {
  const data::Dataset d = SyntheticDataset(n, seed);
  ASSERT_TRUE(data::WriteIdx(prefix + "-images.gz", {uint32_t(n), 12, 12}, d.pixels, true).ok());
  ASSERT_TRUE(data::WriteIdx(prefix + "-labels", {uint32_t(n)}, d.labels, false).ok());
}

// Writes DIR/job.yaml training a small conv net on DIR/{train,test}-* with the given
// `training` and `roles` flow mappings (without braces); returns its path.
inline std::string Manifest(const TmpDir& dir, const std::string& training,
                            const std::string& roles) {
  std::ostringstream m;
  m << "apiVersion: adam.dev/v1alpha1\nkind: AdamJob\nmetadata: {name: synthetic}\nspec:\n"
    << "  dataset:\n"
    << "    train: {images: " << dir.File("train-images.gz")
    << ", labels: " << dir.File("train-labels") << "}\n"
    << "    test: {images: " << dir.File("test-images.gz")
    << ", labels: " << dir.File("test-labels") << "}\n"
    << "    augment: {shift: 1, hflip: false, variants: 2}\n"
    << "  model:\n    input: {channels: 1, height: 12, width: 12}\n    layers:\n"
    << "      - {type: conv, maps: 4, kernel: 3, activation: tanh}\n"
    << "      - {type: maxpool, size: 2}\n"
    << "      - {type: dense, units: 16, activation: relu}\n"
    << "      - {type: softmax, classes: 4}\n"
    << "  training: {" << training << "}\n"
    << "  roles: {" << roles << "}\n";
  const std::string path = dir.File("job.yaml");
  std::ofstream(path) << m.str();
  return path;
}

}  // namespace adam::testing
