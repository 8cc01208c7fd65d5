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

namespace {

// The h x w window at (x0, y0) of `src` (channels x sh x sw) into `dst` (channels x h x w).
void Window(const uint8_t* src, int channels, int sh, int sw, int x0, int y0, int h, int w,
            uint8_t* dst) {
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < h; ++y)
      std::memcpy(dst + (size_t(c) * h + y) * w, src + (size_t(c) * sh + y0 + y) * sw + x0,
                  size_t(w));
}

}  // namespace

Dataset CentreCrop(const Dataset& d, int margin) {
  if (margin <= 0) return d;
  Dataset out;
  out.count = d.count;
  out.channels = d.channels;
  out.height = d.height - 2 * margin;
  out.width = d.width - 2 * margin;
  out.labels = d.labels;
  out.pixels.resize(size_t(out.count) * size_t(out.image_bytes()));
  for (int i = 0; i < d.count; ++i)
    Window(d.pixels.data() + int64_t{i} * d.image_bytes(), d.channels, d.height, d.width, margin,
           margin, out.height, out.width, out.pixels.data() + int64_t{i} * out.image_bytes());
  return out;
}

AugmentedCache::AugmentedCache(const Dataset& base, const spec::AugmentSpec& spec, uint64_t seed,
                               const std::function<void(int64_t, int64_t)>& progress)
    : variants_(std::max(1, spec.variants)),
      count_(base.count),
      image_bytes_(int64_t{base.channels} * (base.height - 2 * spec.crop) *
                   (base.width - 2 * spec.crop)),
      pixels_(size_t(variants_) * count_ * image_bytes_) {
  const int c = spec.crop, h = base.height - 2 * c, w = base.width - 2 * c;
  std::mt19937_64 rng(seed ^ 0xa5a5a5a5ULL);
  std::uniform_int_distribution<int> shift(-spec.shift, spec.shift);
  std::uniform_int_distribution<int> offset(0, 2 * c);
  std::bernoulli_distribution flip(0.5);
  std::vector<uint8_t> window(static_cast<size_t>(image_bytes_));
  for (int i = 0; i < count_; ++i)  // variant 0: the centre window (with no crop, the image)
    Window(base.pixels.data() + i * base.image_bytes(), base.channels, base.height, base.width, c,
           c, h, w, pixels_.data() + int64_t{i} * image_bytes_);
  const int64_t total = int64_t{variants_ - 1} * count_;
  int64_t done = 0;
  for (int v = 1; v < variants_; ++v) {
    for (int i = 0; i < count_; ++i, ++done) {
      const uint8_t* src = pixels_.data() + int64_t{i} * image_bytes_;
      if (c > 0) {
        const int x0 = offset(rng), y0 = offset(rng);
        Window(base.pixels.data() + i * base.image_bytes(), base.channels, base.height, base.width,
               x0, y0, h, w, window.data());
        src = window.data();
      }
      const int dx = shift(rng), dy = shift(rng);
      const bool f = spec.hflip && flip(rng);
      AugmentImage(src, pixels_.data() + (int64_t{v} * count_ + i) * image_bytes_, base.channels, h,
                   w, dx, dy, f);
      if (progress && (done % 8192 == 0)) progress(done, total);
    }
  }
  if (progress) progress(total, total);
}

}  // namespace adam::data
