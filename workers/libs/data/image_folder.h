// Image folders: a data set as one sub-folder per class of JPEG and PNG files (the layout every
// image-classification tool reads: DIR/CLASS/*.png). Classes are the sub-folders' names in byte
// order, labels their index. Each file is decoded (libpng, libjpeg-turbo), converted to the
// model's 1 (grey) or 3 (RGB) channels, and fitted to its height x width (stb_image_resize):
// stretched, or scaled until it covers the target and centre-cropped. Decoding runs on every
// core. A file that cannot be decoded is skipped and named; more than `max_corrupt` of them fail
// the load. Functions are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/idx.h"

namespace adam::data {

enum class Fit { kCrop, kStretch };

struct FolderOptions {
  int channels = 1;  // 1: grey, 3: RGB
  int height = 0;
  int width = 0;
  Fit fit = Fit::kCrop;
  int max_corrupt = 100;  // files that may be skipped before the load fails
  int threads = 0;        // decoding threads; 0: one per core
  // Called from the loading thread about every 200 ms while decoding, and once at the end.
  std::function<void(int64_t done, int64_t total)> progress;
};

// Images larger than this on a side, or in pixels, are refused (a decompression bomb).
inline constexpr int kMaxImageSide = 16384;
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 26;

// Decodes one PNG or JPEG file's bytes (told apart by their magic) into channels x height x width
// bytes as `o` asks. Errors say what is wrong (not an image, truncated, too large).
StatusOr<std::vector<uint8_t>> DecodeImage(std::string_view bytes, const FolderOptions& o);

struct FolderSet {
  Dataset data;
  std::vector<std::string> classes;  // the sub-folders, in label order
  std::vector<std::string> skipped;  // "PATH: why" for every file that could not be decoded
  int other_files = 0;               // files that are neither .png nor .jpg/.jpeg: ignored
};

// Loads DIR/CLASS/FILE for every class folder. Fails naming the folder when it cannot be read or
// holds no class folder or no image, and naming the first skipped files when more than
// o.max_corrupt could not be decoded.
StatusOr<FolderSet> LoadImageFolder(const std::string& dir, const FolderOptions& o);

// Moves a `fraction` (0 < fraction < 1) of `train`'s images, drawn by `seed` from every class
// alike (at least one per class that has two), into a new held-out set.
Dataset SplitHeldOut(Dataset* train, double fraction, uint64_t seed);

}  // namespace adam::data
