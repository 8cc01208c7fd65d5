// The pooling loops against a direct reading of their definition, in every layout they run in,
// with windows that leave rows and columns out.
#include "model/pool.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace adam::model {
namespace {

// A tensor of `outer` planes, each in_h x in_w pixels of `inner` floats: element (o, h, w, c).
int64_t Element(const PoolShape& s, int64_t o, int64_t h, int64_t w, int64_t c, int64_t height,
                int64_t width) {
  return ((o * height + h) * width + w) * s.inner + c;
}

struct PoolCase {
  PoolShape shape;
  std::string name;
};

std::vector<PoolCase> PoolCases() {
  return {
      {{6, 7, 7, 1, 2}, "nchw, 7x7 by 2"},
      {{2, 9, 8, 10, 3}, "nhwc with 10 channels, 9x8 by 3"},
      {{4, 24, 24, 8, 2}, "8-channel blocks, 24x24 by 2"},
      {{3, 5, 6, 16, 2}, "16-channel blocks, 5x6 by 2"},
      {{1, 4, 4, 3, 4}, "one window"},
  };
}

std::vector<float> RandomValues(int64_t n, std::mt19937& rng, bool ties) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(n));
  // With ties, values come from a set of four, so windows often hold equal largest values.
  for (auto& x : v) x = ties ? float(int(rng() % 4)) : u(rng);
  return v;
}

TEST(Pool, MaxForwardAndBackwardFollowTheirDefinition) {
  std::mt19937 rng(7);
  for (const PoolCase& c : PoolCases())
    for (bool ties : {false, true}) {
      const PoolShape& s = c.shape;
      SCOPED_TRACE(c.name + (ties ? ", with ties" : ""));
      const auto src = RandomValues(s.in_count(), rng, ties);
      const auto diff_dst = RandomValues(s.out_count(), rng, false);
      std::vector<float> dst(size_t(s.out_count())), diff_src(size_t(s.in_count()), 99.f);
      std::vector<int32_t> where(size_t(s.out_count()));
      MaxPoolForward(s, src.data(), dst.data(), where.data());
      MaxPoolBackward(s, diff_dst.data(), where.data(), diff_src.data());
      std::vector<float> want_diff(size_t(s.in_count()), 0.f);
      for (int64_t o = 0; o < s.outer; ++o)
        for (int64_t oh = 0; oh < s.out_h(); ++oh)
          for (int64_t ow = 0; ow < s.out_w(); ++ow)
            for (int64_t c = 0; c < s.inner; ++c) {
              // The first largest value in row-major order takes the gradient.
              int64_t best = -1;
              float top = 0;
              for (int64_t kh = 0; kh < s.size; ++kh)
                for (int64_t kw = 0; kw < s.size; ++kw) {
                  const float v = src[size_t(
                      Element(s, o, oh * s.size + kh, ow * s.size + kw, c, s.in_h, s.in_w))];
                  if (best < 0 || v > top) {
                    top = v;
                    best = Element(s, o, oh * s.size + kh, ow * s.size + kw, c, s.in_h, s.in_w);
                  }
                }
              const auto out = size_t(Element(s, o, oh, ow, c, s.out_h(), s.out_w()));
              ASSERT_EQ(dst[out], top) << "output " << out;
              want_diff[size_t(best)] = diff_dst[out];
            }
      for (size_t i = 0; i < want_diff.size(); ++i)
        ASSERT_EQ(diff_src[i], want_diff[i]) << "input " << i;
    }
}

TEST(Pool, MaxForwardWithoutPositionsGivesTheSameMaxima) {
  std::mt19937 rng(8);
  for (const PoolCase& c : PoolCases()) {
    const PoolShape& s = c.shape;
    SCOPED_TRACE(c.name);
    const auto src = RandomValues(s.in_count(), rng, false);
    std::vector<float> a(size_t(s.out_count())), b(size_t(s.out_count()));
    std::vector<int32_t> where(size_t(s.out_count()));
    MaxPoolForward(s, src.data(), a.data(), where.data());
    MaxPoolForward(s, src.data(), b.data(), nullptr);
    EXPECT_EQ(a, b);
  }
}

TEST(Pool, AverageForwardAndBackwardFollowTheirDefinition) {
  std::mt19937 rng(9);
  for (const PoolCase& c : PoolCases()) {
    const PoolShape& s = c.shape;
    SCOPED_TRACE(c.name);
    const auto src = RandomValues(s.in_count(), rng, false);
    const auto diff_dst = RandomValues(s.out_count(), rng, false);
    std::vector<float> dst(size_t(s.out_count())), diff_src(size_t(s.in_count()), 99.f);
    AvgPoolForward(s, src.data(), dst.data());
    AvgPoolBackward(s, diff_dst.data(), diff_src.data());
    std::vector<float> want_diff(size_t(s.in_count()), 0.f);
    const float n = float(s.size * s.size);
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t oh = 0; oh < s.out_h(); ++oh)
        for (int64_t ow = 0; ow < s.out_w(); ++ow)
          for (int64_t c = 0; c < s.inner; ++c) {
            double sum = 0;
            const auto out = size_t(Element(s, o, oh, ow, c, s.out_h(), s.out_w()));
            for (int64_t kh = 0; kh < s.size; ++kh)
              for (int64_t kw = 0; kw < s.size; ++kw) {
                const auto in =
                    size_t(Element(s, o, oh * s.size + kh, ow * s.size + kw, c, s.in_h, s.in_w));
                sum += src[in];
                want_diff[in] = diff_dst[out] / n;
              }
            ASSERT_NEAR(dst[out], sum / n, 1e-6) << "output " << out;
          }
    for (size_t i = 0; i < want_diff.size(); ++i)
      ASSERT_NEAR(diff_src[i], want_diff[i], 1e-7) << "input " << i;
  }
}

TEST(Pool, RunsTheWidestCopyTheCpuAndOneDnnAllow) {
  const std::string isa = PoolKernelIsa();
  EXPECT_TRUE(isa == "avx512" || isa == "avx2" || isa == "baseline") << isa;
#if defined(__x86_64__)
  const bool capped =
      std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr || std::getenv("DNNL_MAX_CPU_ISA") != nullptr;
  if (!capped && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    EXPECT_EQ(isa, "avx512");
  } else if (!capped && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_EQ(isa, "avx2");
  }
#endif
}

}  // namespace
}  // namespace adam::model
