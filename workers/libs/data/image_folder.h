// Image folders: a data set as one sub-folder per class of JPEG and PNG files (the layout every
// image-classification tool reads: DIR/CLASS/*.png, sub-folders of a class folder included).
// Classes are the sub-folders' names in byte order, labels their index. Each file is decoded
// (libpng, libjpeg-turbo), converted to the model's 1 (grey) or 3 (RGB) channels, and fitted to
// its height x width (stb_image_resize): stretched, or scaled until it covers the target and
// centre-cropped. Decoding runs on every core.
//
// What decoding makes of the kinds real folders hold (docs/reference/adamjob.md, "Image folders"):
// - PNG of 1, 2, 4, 8 or 16 bits, grey, colour or palette: 8 bits per channel; 16-bit samples
//   without gamma information are taken as sRGB (the high byte, rounded);
// - transparency (an alpha channel, or a palette's or grey image's transparent colour):
//   composited on white, in sRGB values;
// - JPEG grey, YCbCr (baseline or progressive), CMYK and YCCK: CMYK to RGB as (255 - C)(255 - K)
//   / 255 per channel, the values taken as inverted (255 = no ink) when the file has Adobe's APP14
//   marker, as Adobe's tools write them;
// - EXIF orientation (tag 0x0112 in a JPEG's APP1 block or a PNG's eXIf chunk) is applied: the
//   image is turned as a viewer shows it;
// - colour to grey: ITU-R BT.601 luma (the Y of a JPEG); grey to colour: three equal channels. A
// file that cannot be decoded is skipped and named; more than `max_corrupt` of them fail the load.
// Functions are thread-safe.
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
// spec.dataset.fit's and the ONNX metadata's words: "stretch", or crop for any other ("crop", and
// "none" of a model trained on IDX images, which are the input's size already).
inline Fit FitNamed(std::string_view name) {
  return name == "stretch" ? Fit::kStretch : Fit::kCrop;
}

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

// One image decoded, before fitting: height x width x channels (1 or 3) bytes.
struct DecodedImage {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> hwc;
};

// Decodes one PNG or JPEG file's bytes (told apart by their magic) as above.
StatusOr<DecodedImage> DecodeImagePixels(std::string_view bytes, int channels);

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

// How a job's test images meet the model's input (spec.dataset.fit and augment.crop): decoded,
// fitted to (height + 2 margin) x (width + 2 margin) as `fit` says, then the centre height x
// width (CentreCrop). The data server's test set and `adam predict` and `adam evaluate --folder`
// all go through these, so a model sees at inference what it was tested on.
struct InputFit {
  int channels = 1;
  int height = 0;
  int width = 0;
  Fit fit = Fit::kCrop;
  int margin = 0;
  FolderOptions Enlarged() const;  // the options that decode to the fitted, uncropped size
};
StatusOr<std::vector<uint8_t>> DecodeTestImage(std::string_view bytes, const InputFit& f);
// LoadImageFolder with Enlarged() options, then CentreCrop(margin). `o` gives max_corrupt,
// threads and progress.
StatusOr<FolderSet> LoadTestFolder(const std::string& dir, const InputFit& f, FolderOptions o);

// The image files (.png, .jpg, .jpeg in any case) under `dir` and its sub-folders, in byte order
// of their paths, as LoadImageFolder finds them in a class folder; other files are counted in
// `*other_files`. Fails naming the folder when it cannot be listed.
StatusOr<std::vector<std::string>> ListImageFiles(const std::string& dir, int* other_files);

// Moves a `fraction` (0 < fraction < 1) of `train`'s images, drawn by `seed` from every class
// alike (at least one per class that has two), into a new held-out set.
Dataset SplitHeldOut(Dataset* train, double fraction, uint64_t seed);

}  // namespace adam::data
