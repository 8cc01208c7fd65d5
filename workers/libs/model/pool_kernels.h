// The pooling loops of model/pool.h, included by one source file per instruction set, each
// compiled with its own -m flags (workers/libs/CMakeLists.txt), which defines ADAM_POOL_ISA. A
// function's target attribute would not do: GCC lowers a vector type for the instruction set of
// the function it is written in, before inlining, so the vectors below must be compiled whole
// for the wider set. Nothing here may be an inline function or template with external linkage
// (the linker could keep the wider copy for every caller): it is all inside an unnamed
// namespace but the four entry points, whose names carry the instruction set. It has no include
// guard on purpose: it is compiled once in each of those files, never included elsewhere.
#include <cstdint>
#include <cstring>

#include "model/pool.h"

#ifndef ADAM_POOL_ISA
#error "define ADAM_POOL_ISA before including pool_kernels.h"
#endif

namespace adam::model {
namespace {

// A pixel of a blocked layout as one vector (GCC's and Clang's vector extensions: one register
// per 64 bytes on AVX-512, two on AVX2, four on the baseline), so that a window's compare and
// select stay whole vectors. The widths are spelled out: a vector_size that depends on a
// template argument compiles to scalar code (GCC 12).
template <int64_t kWidth>
struct Lanes;
template <>
struct Lanes<8> {
  typedef float F __attribute__((vector_size(32)));
  typedef int32_t I __attribute__((vector_size(32)));
};
template <>
struct Lanes<16> {
  typedef float F __attribute__((vector_size(64)));
  typedef int32_t I __attribute__((vector_size(64)));
};

// Zeroes what no window covers: the rows below the last whole window and, above them, the
// columns right of it.
void ZeroUncovered(const PoolShape& s, float* diff_src) {
  const int64_t covered_h = (s.in_h / s.size) * s.size, covered_w = (s.in_w / s.size) * s.size;
  if (covered_h == s.in_h && covered_w == s.in_w) return;
  const int64_t row = s.in_w * s.inner;
  for (int64_t o = 0; o < s.outer; ++o) {
    float* plane = diff_src + o * s.in_h * row;
    for (int64_t h = 0; h < covered_h; ++h)
      std::memset(plane + h * row + covered_w * s.inner, 0,
                  size_t((s.in_w - covered_w) * s.inner) * sizeof(float));
    std::memset(plane + covered_h * row, 0, size_t((s.in_h - covered_h) * row) * sizeof(float));
  }
}

// The loops below take a pixel's width as a template argument: 8 and 16 (the blocked layouts)
// become whole vector registers the compiler keeps the window's maximum in; 0 reads s.inner.
template <int64_t kInner>
inline int64_t Inner(const PoolShape& s) {
  return kInner > 0 ? kInner : s.inner;
}

template <int64_t kInner>
void MaxForward(const PoolShape& s, const float* src, float* dst, int32_t* where) {
  const int64_t k = s.size, c_n = Inner<kInner>(s), row = s.in_w * c_n, oh_n = (s.in_h / s.size),
                ow_n = (s.in_w / s.size);
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t oh = 0; oh < oh_n; ++oh)
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        const float* win = src + (o * s.in_h + oh * k) * row + ow * k * c_n;
        const int64_t out = ((o * oh_n + oh) * ow_n + ow) * c_n;
        if constexpr (kInner > 0) {
          using F = typename Lanes<kInner>::F;
          using I = typename Lanes<kInner>::I;
          F best;
          std::memcpy(&best, win, sizeof(F));
          I pos = {};
          for (int64_t kh = 0; kh < k; ++kh)
            for (int64_t kw = kh == 0 ? 1 : 0; kw < k; ++kw) {
              F q;
              std::memcpy(&q, win + kh * row + kw * c_n, sizeof(F));
              const I more = q > best;
              best = more ? q : best;
              pos = more ? I{} + int32_t(kh * k + kw) : pos;
            }
          std::memcpy(dst + out, &best, sizeof(F));
          if (where != nullptr) std::memcpy(where + out, &pos, sizeof(I));
        } else {
          for (int64_t c = 0; c < c_n; ++c) {
            float best = win[c];
            int32_t pos = 0;
            for (int64_t kh = 0; kh < k; ++kh)
              for (int64_t kw = kh == 0 ? 1 : 0; kw < k; ++kw) {
                const float q = win[kh * row + kw * c_n + c];
                if (q > best) {
                  best = q;
                  pos = int32_t(kh * k + kw);
                }
              }
            dst[out + c] = best;
            if (where != nullptr) where[out + c] = pos;
          }
        }
      }
}

template <int64_t kInner>
void MaxBackward(const PoolShape& s, const float* diff_dst, const int32_t* where, float* diff_src) {
  const int64_t k = s.size, c_n = Inner<kInner>(s), row = s.in_w * c_n, oh_n = (s.in_h / s.size),
                ow_n = (s.in_w / s.size);
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t oh = 0; oh < oh_n; ++oh)
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        float* win = diff_src + (o * s.in_h + oh * k) * row + ow * k * c_n;
        const int64_t out = ((o * oh_n + oh) * ow_n + ow) * c_n;
        if constexpr (kInner > 0) {
          using F = typename Lanes<kInner>::F;
          using I = typename Lanes<kInner>::I;
          F g;
          I w;
          std::memcpy(&g, diff_dst + out, sizeof(F));
          std::memcpy(&w, where + out, sizeof(I));
          for (int64_t kh = 0; kh < k; ++kh)
            for (int64_t kw = 0; kw < k; ++kw) {
              const F q = w == int32_t(kh * k + kw) ? g : F{};
              std::memcpy(win + kh * row + kw * c_n, &q, sizeof(F));
            }
        } else {
          for (int64_t kh = 0; kh < k; ++kh)
            for (int64_t kw = 0; kw < k; ++kw)
              for (int64_t c = 0; c < c_n; ++c)
                win[kh * row + kw * c_n + c] =
                    where[out + c] == int32_t(kh * k + kw) ? diff_dst[out + c] : 0.f;
        }
      }
  ZeroUncovered(s, diff_src);
}

template <int64_t kInner>
void AvgForward(const PoolShape& s, const float* src, float* dst) {
  const int64_t k = s.size, c_n = Inner<kInner>(s), row = s.in_w * c_n, oh_n = (s.in_h / s.size),
                ow_n = (s.in_w / s.size);
  const float inv = 1.f / float(k * k);
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t oh = 0; oh < oh_n; ++oh)
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        const float* win = src + (o * s.in_h + oh * k) * row + ow * k * c_n;
        float* d = dst + ((o * oh_n + oh) * ow_n + ow) * c_n;
        for (int64_t c = 0; c < c_n; ++c) d[c] = 0.f;
        for (int64_t kh = 0; kh < k; ++kh)
          for (int64_t kw = 0; kw < k; ++kw) {
            const float* q = win + kh * row + kw * c_n;
            for (int64_t c = 0; c < c_n; ++c) d[c] += q[c];
          }
        for (int64_t c = 0; c < c_n; ++c) d[c] *= inv;
      }
}

template <int64_t kInner>
void AvgBackward(const PoolShape& s, const float* diff_dst, float* diff_src) {
  const int64_t k = s.size, c_n = Inner<kInner>(s), row = s.in_w * c_n, oh_n = (s.in_h / s.size),
                ow_n = (s.in_w / s.size);
  const float inv = 1.f / float(k * k);
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t oh = 0; oh < oh_n; ++oh)
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        float* win = diff_src + (o * s.in_h + oh * k) * row + ow * k * c_n;
        const float* g = diff_dst + ((o * oh_n + oh) * ow_n + ow) * c_n;
        for (int64_t kh = 0; kh < k; ++kh)
          for (int64_t kw = 0; kw < k; ++kw) {
            float* q = win + kh * row + kw * c_n;
            for (int64_t c = 0; c < c_n; ++c) q[c] = g[c] * inv;
          }
      }
  ZeroUncovered(s, diff_src);
}

#define ADAM_POOL_BY_WIDTH(Loop, ...) \
  switch (s.inner) {                  \
    case 8:                           \
      return Loop<8>(__VA_ARGS__);    \
    case 16:                          \
      return Loop<16>(__VA_ARGS__);   \
    default:                          \
      return Loop<0>(__VA_ARGS__);    \
  }

}  // namespace

#define ADAM_POOL_CAT2(a, b) a##b
#define ADAM_POOL_CAT(a, b) ADAM_POOL_CAT2(a, b)

void ADAM_POOL_CAT(MaxPoolForward_, ADAM_POOL_ISA)(const PoolShape& s, const float* src, float* dst,
                                                   int32_t* where) {
  ADAM_POOL_BY_WIDTH(MaxForward, s, src, dst, where)
}
void ADAM_POOL_CAT(MaxPoolBackward_, ADAM_POOL_ISA)(const PoolShape& s, const float* diff_dst,
                                                    const int32_t* where, float* diff_src) {
  ADAM_POOL_BY_WIDTH(MaxBackward, s, diff_dst, where, diff_src)
}
void ADAM_POOL_CAT(AvgPoolForward_, ADAM_POOL_ISA)(const PoolShape& s, const float* src,
                                                   float* dst) {
  ADAM_POOL_BY_WIDTH(AvgForward, s, src, dst)
}
void ADAM_POOL_CAT(AvgPoolBackward_, ADAM_POOL_ISA)(const PoolShape& s, const float* diff_dst,
                                                    float* diff_src) {
  ADAM_POOL_BY_WIDTH(AvgBackward, s, diff_dst, diff_src)
}

}  // namespace adam::model
