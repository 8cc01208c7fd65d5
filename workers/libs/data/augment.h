// Augmentation and the augmented-image cache of the data server.
//
// Project Adam's data servers precompute randomized transformations so trainers never spend cycles
// on them. AugmentedCache holds `variants` copies of a training set: variant 0 is the original,
// the others are shifted by up to `shift` pixels and, with `hflip`, mirrored at random. With
// `crop` c > 0 the set's images are 2c pixels larger each way than the cache's: variant 0 is the
// centre window, the others random windows (then shifted and flipped as above). Built once, then
// read-only: thread-safe for concurrent readers.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "data/idx.h"
#include "spec/adamjob.h"

namespace adam::data {

// Writes into `dst` the image `src` (channels x height x width bytes) translated by (dx, dy)
// pixels (zero fill at the borders) and mirrored left-right when `flip`. `src` and `dst` must not
// overlap.
void AugmentImage(const uint8_t* src, uint8_t* dst, int channels, int height, int width, int dx,
                  int dy, bool flip);

// The centre window of every image of `d`, `margin` pixels in from each edge.
Dataset CentreCrop(const Dataset& d, int margin);

class AugmentedCache {
 public:
  // Builds the cache. `progress(done, total)` is called now and then from the calling thread.
  AugmentedCache(const Dataset& base, const spec::AugmentSpec& spec, uint64_t seed,
                 const std::function<void(int64_t, int64_t)>& progress = {});

  int variants() const { return variants_; }
  int count() const { return count_; }
  int64_t image_bytes() const { return image_bytes_; }
  // Image `index` of variant `variant`.
  const uint8_t* Image(int variant, int index) const {
    return pixels_.data() + (int64_t{variant} * count_ + index) * image_bytes_;
  }

 private:
  int variants_;
  int count_;
  int64_t image_bytes_;
  std::vector<uint8_t> pixels_;
};

}  // namespace adam::data
