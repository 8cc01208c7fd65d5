// A tiny synthetic data set and a manifest training on it, for end-to-end tests of whole runs.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "data/idx.h"
#include "testing/manifest.h"
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

}  // namespace adam::testing
