// Shift/flip augmentation and the precomputed cache.
#include "data/augment.h"

#include <algorithm>
#include <cstring>
#include <random>

namespace adam::data {

void AugmentImage(const uint8_t* src, uint8_t* dst, int channels, int height, int width, int dx,
                  int dy, bool flip) {
  std::memset(dst, 0, size_t(channels) * height * width);
  for (int c = 0; c < channels; ++c) {
    const uint8_t* s = src + size_t(c) * height * width;
    uint8_t* d = dst + size_t(c) * height * width;
    for (int y = 0; y < height; ++y) {
      const int sy = y - dy;
      if (sy < 0 || sy >= height) continue;
      for (int x = 0; x < width; ++x) {
        int sx = x - dx;
        if (sx < 0 || sx >= width) continue;
        if (flip) sx = width - 1 - sx;
        d[y * width + x] = s[sy * width + sx];
      }
    }
  }
}

AugmentedCache::AugmentedCache(const Dataset& base, const spec::AugmentSpec& spec, uint64_t seed,
                               const std::function<void(int64_t, int64_t)>& progress)
    : variants_(std::max(1, spec.variants)),
      count_(base.count),
      image_bytes_(base.image_bytes()),
      pixels_(size_t(variants_) * count_ * image_bytes_) {
  std::memcpy(pixels_.data(), base.pixels.data(), base.pixels.size());
  std::mt19937_64 rng(seed ^ 0xa5a5a5a5ULL);
  std::uniform_int_distribution<int> shift(-spec.shift, spec.shift);
  std::bernoulli_distribution flip(0.5);
  const int64_t total = int64_t{variants_ - 1} * count_;
  int64_t done = 0;
  for (int v = 1; v < variants_; ++v) {
    for (int i = 0; i < count_; ++i, ++done) {
      const int dx = shift(rng), dy = shift(rng);
      const bool f = spec.hflip && flip(rng);
      AugmentImage(base.pixels.data() + i * image_bytes_,
                   pixels_.data() + (int64_t{v} * count_ + i) * image_bytes_, base.channels,
                   base.height, base.width, dx, dy, f);
      if (progress && (done % 8192 == 0)) progress(done, total);
    }
  }
  if (progress) progress(total, total);
}

}  // namespace adam::data
