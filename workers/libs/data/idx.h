// Reading and writing IDX files (the MNIST / Fashion-MNIST format), raw or gzip-compressed.
//
// An IDX file is: two zero bytes, a type byte (0x08 = unsigned byte, the only one supported), a
// dimension count, each dimension as a big-endian uint32, then the data. Every read checks the
// magic, the dimensions and the data size against the file, and an error names the file and the
// byte offset (in the decompressed data) at fault. Functions are thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace adam::data {

struct IdxArray {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;  // row-major, product(dims) bytes
};

// Parses an in-memory IDX image; `name` is used in error messages.
StatusOr<IdxArray> ParseIdx(std::string_view bytes, const std::string& name);

// Reads a whole file; gzip input (detected by its magic 1f 8b) is decompressed. Refuses a
// directory, files that decompress to more than `max_bytes`, and a gzip stream that goes on past
// the size its IDX header declares (stopped as soon as it does: a gzip bomb costs no memory).
StatusOr<std::string> ReadMaybeGzip(const std::string& path, size_t max_bytes = size_t{1} << 31);

// Returns `raw` decompressed when it starts with the gzip magic (1f 8b), else `raw` itself;
// `name` is used in error messages. Refuses output larger than `max_bytes`.
StatusOr<std::string> DecodeMaybeGzip(std::string raw, const std::string& name,
                                      size_t max_bytes = size_t{1} << 31);

// ReadMaybeGzip + ParseIdx.
StatusOr<IdxArray> ReadIdx(const std::string& path);

// Writes an IDX file of unsigned bytes, gzip-compressed when `gzip`.
Status WriteIdx(const std::string& path, const std::vector<uint32_t>& dims,
                const std::vector<uint8_t>& data, bool gzip);

// A labelled image set: `count` images of channels x height x width bytes each.
struct Dataset {
  int count = 0;
  int channels = 1;
  int height = 0;
  int width = 0;
  std::vector<uint8_t> pixels;  // count * channels * height * width
  std::vector<uint8_t> labels;  // count, each < classes
  int64_t image_bytes() const { return int64_t{channels} * height * width; }
};

// Loads an images file (3 dims: N, H, W; or 4: N, C, H, W) and a labels file (1 dim: N) and checks
// that the counts agree, the image shape matches `channels x height x width` when those are > 0,
// and every label is < `classes`.
StatusOr<Dataset> LoadIdxDataset(const std::string& images_path, const std::string& labels_path,
                                 int classes, int channels = 0, int height = 0, int width = 0);

}  // namespace adam::data
