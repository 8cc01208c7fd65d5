#include "update/codec.h"

#include <zstd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

namespace adam::update {
namespace {

// zstd's fastest level: a push is compressed once and sent at once.
constexpr int kZstdLevel = 1;

std::string Hex(uint8_t b) {
  constexpr char kDigits[] = "0123456789abcdef";
  return {kDigits[b >> 4], kDigits[b & 15]};
}

// `n` elements of `size` bytes at `raw`, as is or as a zstd frame of their byte planes.
void Encode(const void* raw, size_t n, size_t size, bool zstd, std::string* out) {
  const size_t bytes = n * size;
  if (!zstd) {
    out->assign(static_cast<const char*>(raw), bytes);
    return;
  }
  thread_local std::vector<uint8_t> planes;
  planes.resize(bytes);
  Shuffle(raw, n, size, planes.data());
  out->resize(ZSTD_compressBound(bytes));
  const size_t c = ZSTD_compress(out->data(), out->size(), planes.data(), bytes, kZstdLevel);
  // Compressing into a buffer of ZSTD_compressBound cannot fail.
  out->resize(ZSTD_isError(c) ? 0 : c);
}

StatusOr<size_t> Count(std::string_view bytes, size_t size, bool zstd, size_t max,
                       const char* what) {
  if (!zstd) {
    if (bytes.size() % size != 0)
      return InvalidArgumentError(std::to_string(bytes.size()) + " bytes of " + what +
                                  " are not a whole number of " + std::to_string(size) +
                                  "-byte values");
    if (bytes.size() / size > max)
      return InvalidArgumentError(std::string(what) + ": " + std::to_string(bytes.size() / size) +
                                  " values, more than the " + std::to_string(max) + " allowed");
    return bytes.size() / size;
  }
  if (bytes.empty()) return size_t{0};
  const unsigned long long content = ZSTD_getFrameContentSize(bytes.data(), bytes.size());
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN)
    return InvalidArgumentError(std::string(what) +
                                ": not a zstd frame that states its size (first byte 0x" +
                                Hex(uint8_t(bytes[0])) + ")");
  if (content % size != 0)
    return InvalidArgumentError(std::string(what) + ": zstd frame holds " +
                                std::to_string(content) + " bytes, not a whole number of " +
                                std::to_string(size) + "-byte values");
  if (content / size > max)
    return InvalidArgumentError(std::string(what) + ": zstd frame holds " +
                                std::to_string(content / size) + " values, more than the " +
                                std::to_string(max) + " allowed");
  return size_t(content / size);
}

Status Decode(std::string_view bytes, size_t size, bool zstd, size_t n, void* out,
              const char* what) {
  const size_t want = n * size;
  if (!zstd) {
    if (bytes.size() != want)
      return InvalidArgumentError(std::string(what) + ": " + std::to_string(bytes.size()) +
                                  " bytes where " + std::to_string(want) + " were expected");
    if (want != 0) std::memcpy(out, bytes.data(), want);
    return OkStatus();
  }
  if (want == 0) return OkStatus();
  thread_local std::vector<uint8_t> planes;
  planes.resize(want);
  const size_t got = ZSTD_decompress(planes.data(), want, bytes.data(), bytes.size());
  if (ZSTD_isError(got))
    return InvalidArgumentError(std::string(what) + ": zstd: " + ZSTD_getErrorName(got));
  if (got != want)
    return InvalidArgumentError(std::string(what) + ": zstd frame gave " + std::to_string(got) +
                                " bytes where " + std::to_string(want) + " were expected");
  Unshuffle(planes.data(), n, size, out);
  return OkStatus();
}

#if defined(__x86_64__)
// F16C's conversions (x86 since 2012), rounding to nearest even as ToHalf does.
__attribute__((target("avx,f16c"))) void ToHalvesF16c(const float* in, size_t n, uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = ToHalf(in[i]);
}

__attribute__((target("avx,f16c"))) void FromHalvesF16c(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = FromHalf(in[i]);
}

// CPUID leaf 1: F16C (ECX bit 29) and AVX (bit 28), with the OS saving the YMM registers
// (OSXSAVE, bit 27, and XCR0's SSE and AVX state bits).
bool HasF16c() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
    constexpr unsigned kNeeded = (1u << 27) | (1u << 28) | (1u << 29);
    if ((c & kNeeded) != kNeeded) return false;
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;
  }();
  return has;
}
#endif

void ToHalves(const float* in, size_t n, uint16_t* out) {
#if defined(__x86_64__)
  if (HasF16c()) return ToHalvesF16c(in, n, out);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = ToHalf(in[i]);
}

void FromHalves(const uint16_t* in, size_t n, float* out) {
#if defined(__x86_64__)
  if (HasF16c()) return FromHalvesF16c(in, n, out);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = FromHalf(in[i]);
}

}  // namespace

uint16_t ToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u)  // infinity or NaN (NaN stays a quiet NaN)
    return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds past 65504: infinity
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal half, or zero.
    if (abs < 0x33000000u) return uint16_t(sign);  // below half the smallest subnormal
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - int(abs >> 23);  // 14..24
    const uint32_t half = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    const uint32_t up = rest > mid || (rest == mid && (half & 1u));
    return uint16_t(sign | (half + up));
  }
  // Normal: re-bias the exponent (127 -> 15) and round the mantissa to 10 bits, nearest even.
  const uint32_t rebased = abs - (112u << 23);
  const uint32_t half = rebased >> 13;
  const uint32_t rest = rebased & 0x1fffu;
  const uint32_t up = rest > 0x1000u || (rest == 0x1000u && (half & 1u));
  return uint16_t(sign | (half + up));  // a carry into the exponent is the right rounding
}

float FromHalf(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f)  // infinity, or a NaN made quiet (as IEEE conversion and F16C do)
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);
  // Subnormal half: normalise.
  int e = 113;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (uint32_t(e) << 23) | ((mant & 0x3ffu) << 13));
}

void Shuffle(const void* in, size_t n, size_t size, uint8_t* out) {
  const auto* b = static_cast<const uint8_t*>(in);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < size; ++k) out[k * n + i] = b[i * size + k];
}

void Unshuffle(const uint8_t* in, size_t n, size_t size, void* out) {
  auto* b = static_cast<uint8_t*>(out);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < size; ++k) b[i * size + k] = in[k * n + i];
}

void EncodeFloats(const float* values, size_t n, WireFormat format, std::string* out) {
  if (!format.float16) {
    Encode(values, n, 4, format.zstd, out);  // the build targets little-endian machines
    return;
  }
  thread_local std::vector<uint16_t> halves;
  halves.resize(n);
  ToHalves(values, n, halves.data());
  Encode(halves.data(), n, 2, format.zstd, out);
}

StatusOr<size_t> FloatCount(std::string_view bytes, WireFormat format, size_t max) {
  return Count(bytes, format.value_bytes(), format.zstd, max, "values");
}

Status DecodeFloats(std::string_view bytes, WireFormat format, size_t n, float* out) {
  if (!format.float16) return Decode(bytes, 4, format.zstd, n, out, "values");
  thread_local std::vector<uint16_t> halves;
  halves.resize(n);
  ADAM_RETURN_IF_ERROR(Decode(bytes, 2, format.zstd, n, halves.data(), "values"));
  FromHalves(halves.data(), n, out);
  return OkStatus();
}

void EncodeIndices(const uint32_t* indices, size_t n, bool zstd, std::string* out) {
  Encode(indices, n, 4, zstd, out);
}

StatusOr<size_t> IndexCount(std::string_view bytes, bool zstd, size_t max) {
  return Count(bytes, 4, zstd, max, "indices");
}

Status DecodeIndices(std::string_view bytes, bool zstd, size_t n, uint32_t* out) {
  return Decode(bytes, 4, zstd, n, out, "indices");
}

Taken TakeSignificant(float* pending, float* sent, int64_t n, float threshold, bool float16) {
  Taken t;
  constexpr int64_t kBlock = 1024;  // rounded a block at a time (F16C where there is)
  uint16_t halves[kBlock];
  float rounded[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    if (float16) {
      ToHalves(pending + b, size_t(m), halves);
      FromHalves(halves, size_t(m), rounded);
    }
    for (int64_t i = 0; i < m; ++i) {
      const float p = pending[b + i];
      if (p == 0.f || !(std::fabs(p) >= threshold)) {
        sent[b + i] = 0.f;
        t.held += p != 0.f;
        continue;
      }
      const float s = float16 ? rounded[i] : p;
      if (s == 0.f) {  // below half precision's smallest: it waits, as a small change does
        sent[b + i] = 0.f;
        ++t.held;
        continue;
      }
      sent[b + i] = s;
      pending[b + i] = p - s;
      ++t.sent;
    }
  }
  return t;
}

}  // namespace adam::update
