// How updates and weights travel between trainers and parameter servers (ps.proto's ShardData,
// DenseUpdate and PullRequest), and the significantly-modified filter that decides which parts
// of a push are worth sending (Li et al., "Scaling Distributed Machine Learning with the
// Parameter Server", OSDI 2014).
//
// Floats travel as 4-byte IEEE-754 values, or rounded to IEEE half precision (2 bytes, round to
// nearest even; beyond the half range they become infinities, so a sender rounds first and
// keeps the difference). Either may be compressed: the values' byte planes (every value's byte 0,
// then byte 1, ...: sign and exponent bytes compress well together) as one zstd frame. Indices of
// a filtered push travel as 4-byte unsigned integers, compressed the same way when asked.
//
// Decoding is for bytes from the network: every error names what is wrong and nothing is read
// past the input. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace adam::update {

struct WireFormat {
  bool float16 = false;
  bool zstd = false;
  size_t value_bytes() const { return float16 ? 2 : 4; }
  bool operator==(const WireFormat&) const = default;
};

uint16_t ToHalf(float f);
float FromHalf(uint16_t h);
// `f` as it arrives in half precision.
inline float RoundToHalf(float f) { return FromHalf(ToHalf(f)); }

// Byte planes of `n` elements of `size` bytes, and back.
void Shuffle(const void* in, size_t n, size_t size, uint8_t* out);
void Unshuffle(const uint8_t* in, size_t n, size_t size, void* out);

// Writes `n` floats in `format` to *out (replacing what it held).
void EncodeFloats(const float* values, size_t n, WireFormat format, std::string* out);
// How many floats `bytes` holds in `format`: an error when it cannot be read as such (a length
// that is not a whole number of values, a zstd frame that is corrupt, or more than `max`).
StatusOr<size_t> FloatCount(std::string_view bytes, WireFormat format, size_t max);
// Decodes exactly `n` floats into `out` (FloatCount's answer, or a count the caller expects): an
// error when `bytes` holds any other number; a zstd frame is never inflated past `n`.
Status DecodeFloats(std::string_view bytes, WireFormat format, size_t n, float* out);

void EncodeIndices(const uint32_t* indices, size_t n, bool zstd, std::string* out);
StatusOr<size_t> IndexCount(std::string_view bytes, bool zstd, size_t max);
Status DecodeIndices(std::string_view bytes, bool zstd, size_t n, uint32_t* out);

// The significantly-modified filter, with what is not sent carried forward. `pending[i]` is what
// entry i still owes the servers (this push's change plus what earlier pushes kept back). An
// entry whose |pending| reaches `threshold` is sent: `sent[i]` is its value as it will arrive
// (rounded to half precision when `float16`) and pending[i] keeps only the rounding's
// difference; any other entry sends 0 and keeps its pending value for a later push. Nothing is
// lost: pending after + sent == pending before, entry by entry, to float rounding. A threshold
// of 0 sends every entry.
struct Taken {
  int64_t sent = 0;  // entries sent
  int64_t held = 0;  // nonzero entries kept for later
};
Taken TakeSignificant(float* pending, float* sent, int64_t n, float threshold, bool float16);

}  // namespace adam::update
