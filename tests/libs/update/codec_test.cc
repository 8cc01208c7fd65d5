// The wire formats of pushes and pulls (update/codec.h): half precision exactly as IEEE-754
// rounds, every format read back as written, bad bytes refused naming why, and the
// significantly-modified filter losing nothing.
#include "update/codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zstd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace adam::update {
namespace {

using ::testing::HasSubstr;

TEST(Half, KnownValuesAndRounding) {
  EXPECT_EQ(ToHalf(0.f), 0x0000);
  EXPECT_EQ(ToHalf(-0.f), 0x8000);
  EXPECT_EQ(ToHalf(1.f), 0x3c00);
  EXPECT_EQ(ToHalf(-2.f), 0xc000);
  EXPECT_EQ(ToHalf(65504.f), 0x7bff);                     // the largest half
  EXPECT_EQ(ToHalf(65519.f), 0x7bff);                     // below the midpoint to infinity
  EXPECT_EQ(ToHalf(65520.f), 0x7c00);                     // the midpoint rounds to even: infinity
  EXPECT_EQ(ToHalf(std::ldexp(1.f, -14)), 0x0400);        // the smallest normal
  EXPECT_EQ(ToHalf(std::ldexp(1.f, -24)), 0x0001);        // the smallest subnormal
  EXPECT_EQ(ToHalf(std::ldexp(1.f, -25)), 0x0000);        // half of it: ties to even, zero
  EXPECT_EQ(ToHalf(std::ldexp(1.5f, -25)), 0x0001);       // above the tie: up
  EXPECT_EQ(ToHalf(1.f + std::ldexp(1.f, -11)), 0x3c00);  // tie between 1 and 1+2^-10: even
  EXPECT_EQ(ToHalf(1.f + 3 * std::ldexp(1.f, -11)), 0x3c02);  // tie: to the even one above
  EXPECT_EQ(ToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(FromHalf(ToHalf(std::numeric_limits<float>::quiet_NaN()))));
}

// Every half that is a number comes back from float unchanged.
TEST(Half, EveryHalfSurvivesARoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t half = uint16_t(h);
    if ((half & 0x7c00) == 0x7c00 && (half & 0x3ff) != 0) continue;  // NaN
    ASSERT_EQ(ToHalf(FromHalf(half)), half) << std::hex << h;
  }
}

// For random floats in the half range, the rounded value is the nearest half: no half lies
// closer (checked against both neighbours).
TEST(Half, RoundsToTheNearestHalf) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> exponent(-26.f, 15.9f);
  std::uniform_int_distribution<int> sign(0, 1);
  for (int i = 0; i < 200000; ++i) {
    const float f = (sign(rng) ? -1.f : 1.f) * std::exp2(exponent(rng));
    const uint16_t h = ToHalf(f);
    const float r = FromHalf(h);
    const float err = std::fabs(r - f);
    for (int d : {-1, 1}) {
      const uint16_t other = uint16_t(int(h) + d);
      if ((other & 0x7c00) == 0x7c00) continue;  // past the largest finite half
      if ((h & 0x7fff) == 0 && d < 0) continue;
      ASSERT_LE(err, std::fabs(FromHalf(other) - f)) << f;
    }
  }
}

// The bulk conversion (F16C where the CPU has it) writes the same bits as the portable ToHalf,
// for floats across the whole range: subnormal halves, overflow to infinity, signed zeros,
// infinities and NaNs; and reads every half back as FromHalf does.
TEST(Half, TheBulkConversionMatchesThePortableOne) {
  std::vector<float> floats = {0.f,
                               -0.f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               65504.f,
                               65520.f,
                               -1e9f};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> exponent(-30.f, 17.f);
  for (int i = 0; i < 100000; ++i)
    floats.push_back((i % 2 ? -1.f : 1.f) * std::exp2(exponent(rng)));
  std::string wire;
  EncodeFloats(floats.data(), floats.size(), {true, false}, &wire);
  ASSERT_EQ(wire.size(), floats.size() * 2);
  for (size_t i = 0; i < floats.size(); ++i) {
    uint16_t h = 0;
    std::memcpy(&h, wire.data() + 2 * i, 2);
    ASSERT_EQ(h, ToHalf(floats[i])) << floats[i];
  }
  std::vector<uint16_t> halves(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) halves[h] = uint16_t(h);
  std::vector<float> back(halves.size());
  ASSERT_TRUE(DecodeFloats(std::string_view(reinterpret_cast<const char*>(halves.data()), 0x20000),
                           {true, false}, halves.size(), back.data())
                  .ok());
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float want = FromHalf(uint16_t(h));
    ASSERT_EQ(std::bit_cast<uint32_t>(back[h]), std::bit_cast<uint32_t>(want)) << std::hex << h;
  }
}

TEST(Codec, EveryFormatReadsBackWhatWasWritten) {
  std::mt19937 rng(5);
  std::normal_distribution<float> w(0.f, 0.05f);
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(4099)}) {
    std::vector<float> values(n);
    for (auto& v : values) v = w(rng);
    for (WireFormat f : {WireFormat{false, false}, WireFormat{true, false}, WireFormat{false, true},
                         WireFormat{true, true}}) {
      std::string wire;
      EncodeFloats(values.data(), n, f, &wire);
      if (!f.zstd) {
        EXPECT_EQ(wire.size(), n * f.value_bytes());
      }
      StatusOr<size_t> count = FloatCount(wire, f, n);
      ASSERT_TRUE(count.ok()) << count.status().ToString();
      ASSERT_EQ(*count, n);
      std::vector<float> out(n, -1.f);
      ASSERT_TRUE(DecodeFloats(wire, f, n, out.data()).ok());
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(out[i], f.float16 ? RoundToHalf(values[i]) : values[i]) << i;
    }
  }
  std::vector<uint32_t> idx = {0, 3, 17, 4096, 70000};
  for (bool zstd : {false, true}) {
    std::string wire;
    EncodeIndices(idx.data(), idx.size(), zstd, &wire);
    StatusOr<size_t> count = IndexCount(wire, zstd, 100);
    ASSERT_TRUE(count.ok());
    ASSERT_EQ(*count, idx.size());
    std::vector<uint32_t> out(idx.size());
    ASSERT_TRUE(DecodeIndices(wire, zstd, idx.size(), out.data()).ok());
    EXPECT_EQ(out, idx);
  }
}

TEST(Codec, ZstdShrinksWhatRepeats) {
  std::vector<float> zeros(10000, 0.f);
  std::string wire;
  EncodeFloats(zeros.data(), zeros.size(), {false, true}, &wire);
  EXPECT_LT(wire.size(), 200u);
}

TEST(Codec, BadBytesAreRefusedNamingWhy) {
  const WireFormat half{true, false}, packed{false, true};
  EXPECT_THAT(FloatCount(std::string(7, 'x'), {}, 100).status().message(),
              HasSubstr("7 bytes of values are not a whole number of 4-byte values"));
  EXPECT_THAT(FloatCount(std::string(5, 'x'), half, 100).status().message(),
              HasSubstr("not a whole number of 2-byte values"));
  EXPECT_THAT(FloatCount(std::string(404, 'x'), {}, 100).status().message(),
              HasSubstr("values: 101 values, more than the 100 allowed"));
  EXPECT_THAT(FloatCount("garbage!", packed, 100).status().message(),
              HasSubstr("not a zstd frame that states its size (first byte 0x67)"));
  // A frame claiming more than allowed is refused before anything is decompressed.
  std::vector<float> many(1000, 1.f);
  std::string wire;
  EncodeFloats(many.data(), many.size(), packed, &wire);
  EXPECT_THAT(FloatCount(wire, packed, 999).status().message(),
              HasSubstr("zstd frame holds 1000 values, more than the 999 allowed"));
  // A frame cut short, or with its payload corrupted, fails to decode.
  std::vector<float> out(1000);
  std::string cut = wire.substr(0, wire.size() - 2);
  ASSERT_TRUE(FloatCount(cut, packed, 1000).ok());  // the header still says 1000
  EXPECT_FALSE(DecodeFloats(cut, packed, 1000, out.data()).ok());
  // A frame of another count than the one asked for.
  EXPECT_THAT(DecodeFloats(wire, packed, 999, out.data()).message(), HasSubstr("values: zstd"));
  EXPECT_TRUE(DecodeFloats(wire, packed, 1000, out.data()).ok());
  // Raw bytes of the wrong length for the count asked for.
  EXPECT_THAT(DecodeFloats(std::string(8, 'x'), {}, 3, out.data()).message(),
              HasSubstr("8 bytes where 12 were expected"));
  EXPECT_THAT(IndexCount(std::string(6, 'x'), false, 10).status().message(),
              HasSubstr("6 bytes of indices"));
}

// pending after + sent == pending before, entry by entry; small entries wait until their sum
// is large enough; rounding to half precision is carried forward, not lost.
TEST(Filter, SendsOnlySignificantEntriesAndLosesNothing) {
  std::mt19937 rng(9);
  std::normal_distribution<float> change(0.f, 1e-3f);
  const int64_t n = 5000;
  for (bool float16 : {false, true}) {
    std::vector<float> pending(n, 0.f), sent(n), total_sent(n, 0.f);
    std::vector<double> total_change(n, 0.0);
    int64_t held_at_first = 0;
    for (int push = 0; push < 50; ++push) {
      for (int64_t i = 0; i < n; ++i) {
        const float c = change(rng);
        pending[size_t(i)] += c;
        total_change[size_t(i)] += c;
      }
      const std::vector<float> before = pending;
      const Taken t = TakeSignificant(pending.data(), sent.data(), n, 2e-3f, float16);
      if (push == 0) held_at_first = t.held;
      int64_t nonzero = 0;
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = size_t(i);
        ASSERT_EQ(pending[k] + sent[k], before[k]) << i;  // exact: the difference is exact
        if (sent[k] != 0.f) {
          ++nonzero;
          EXPECT_GE(std::fabs(before[k]), 2e-3f);
          if (float16) {
            EXPECT_EQ(sent[k], RoundToHalf(sent[k]));  // travels exactly as half
          }
        } else {
          EXPECT_EQ(pending[k], before[k]);
        }
        total_sent[k] += sent[k];
      }
      EXPECT_EQ(t.sent, nonzero);
    }
    EXPECT_GT(held_at_first, n / 2);  // most single changes are below the threshold
    // What was sent plus what still waits is the whole change, to float rounding.
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(double(total_sent[size_t(i)]) + pending[size_t(i)], total_change[size_t(i)], 1e-5)
          << i;
  }
  // Threshold 0 sends every nonzero entry.
  std::vector<float> pending = {0.f, 1e-9f, -3.f}, sent(3);
  const Taken t = TakeSignificant(pending.data(), sent.data(), 3, 0.f, false);
  EXPECT_EQ(t.sent, 2);
  EXPECT_EQ(t.held, 0);
  EXPECT_EQ(sent, (std::vector<float>{0.f, 1e-9f, -3.f}));
  // In half precision 1e-9 rounds to 0: it is not sent but kept.
  pending = {0.f, 1e-9f, -3.f};
  const Taken h = TakeSignificant(pending.data(), sent.data(), 3, 0.f, true);
  EXPECT_EQ(h.sent, 1);
  EXPECT_EQ(h.held, 1);
  EXPECT_EQ(pending[1], 1e-9f);
}

}  // namespace
}  // namespace adam::update
