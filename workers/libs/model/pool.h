// Max and average pooling whose windows tile the input (kernel = stride, no padding), the only
// pooling an AdamJob describes, written out instead of oneDNN's: oneDNN 2.6's pooling kernels
// were the slowest step of the demo model's training step, on AVX2 CPUs by far (profiled in
// docs/reference/performance.md, "Why batch 32 fell 3-4x on AVX2"). Each function is compiled
// for AVX-512, AVX2 and plain x86-64 and runs the copy for the instruction set oneDNN uses
// (PoolKernelIsa).
//
// The layouts are the ones oneDNN gives a convolution's output: a tensor is `outer` planes of
// height x width pixels, each pixel `inner` consecutive floats, which covers NCHW (outer = N x C,
// inner 1), NHWC (outer N, inner C) and the blocked nChw8c and nChw16c (outer N x C / block,
// inner the block, channels padded to whole blocks).
#pragma once

#include <cstdint>

namespace adam::model {

struct PoolShape {
  int64_t outer = 0;
  int64_t in_h = 0, in_w = 0;                    // the input's height and width
  int64_t inner = 0;                             // floats per pixel
  int64_t size = 0;                              // window side = stride
  int64_t out_h() const { return in_h / size; }  // rows and columns past the last whole window
  int64_t out_w() const { return in_w / size; }  // are left out
  int64_t in_count() const { return outer * in_h * in_w * inner; }
  int64_t out_count() const { return outer * out_h() * out_w() * inner; }
};

// Max pooling: dst (out_count floats) gets each window's largest value; `where` (out_count
// entries, as wide as a float so that both vectorise alike; may be null when no gradient is
// wanted) its position in the window, row-major, the first of equal values.
void MaxPoolForward(const PoolShape& s, const float* src, float* dst, int32_t* where);
// Writes every element of diff_src (in_count floats): an output's gradient where `where` points,
// 0 elsewhere (including the rows and columns no window covers).
void MaxPoolBackward(const PoolShape& s, const float* diff_dst, const int32_t* where,
                     float* diff_src);
// Average pooling: each window's mean, and its gradient spread evenly over the window (0 where
// no window covers).
void AvgPoolForward(const PoolShape& s, const float* src, float* dst);
void AvgPoolBackward(const PoolShape& s, const float* diff_dst, float* diff_src);

// The copy the functions above run: "avx512", "avx2" or "baseline".
const char* PoolKernelIsa();

}  // namespace adam::model
