// The IDX reader on good, truncated and corrupted files, raw and gzip, and augmentation.
#include "data/idx.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <set>
#include <vector>

#include "data/augment.h"
#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam::data {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> Pixels(int n, int h, int w) {
  std::vector<uint8_t> p(size_t(n * h * w));
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t(i * 7 + 3);
  return p;
}

TEST(Idx, RoundTripsRawAndGzip) {
  testing::TmpDir dir;
  const auto px = Pixels(3, 4, 5);
  for (bool gz : {false, true}) {
    const std::string path = dir.File(gz ? "a.gz" : "a.idx");
    ASSERT_TRUE(WriteIdx(path, {3, 4, 5}, px, gz).ok());
    auto arr = ReadIdx(path);
    ASSERT_TRUE(arr.ok()) << arr.status().ToString();
    EXPECT_EQ(arr->dims, (std::vector<uint32_t>{3, 4, 5}));
    EXPECT_EQ(arr->data, px);
  }
}

TEST(Idx, LoadsDatasetAndChecksShape) {
  testing::TmpDir dir;
  ASSERT_TRUE(WriteIdx(dir.File("i"), {3, 4, 5}, Pixels(3, 4, 5), true).ok());
  ASSERT_TRUE(WriteIdx(dir.File("l"), {3}, {0, 2, 1}, false).ok());
  auto ds = LoadIdxDataset(dir.File("i"), dir.File("l"), 3, 1, 4, 5);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->count, 3);
  EXPECT_EQ(ds->height, 4);
  EXPECT_EQ(ds->labels, (std::vector<uint8_t>{0, 2, 1}));
  auto wrong = LoadIdxDataset(dir.File("i"), dir.File("l"), 3, 1, 28, 28);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.status().message(), HasSubstr("spec.model.input is 1x28x28"));
}

TEST(Idx, TruncatedDataNamesFileAndOffset) {
  testing::TmpDir dir;
  ASSERT_TRUE(WriteIdx(dir.File("a"), {10, 4, 4}, Pixels(10, 4, 4), false).ok());
  std::string bytes = testing::ReadText(dir.File("a"));
  testing::WriteText(dir.File("t"), bytes.substr(0, bytes.size() - 30));
  auto arr = ReadIdx(dir.File("t"));
  ASSERT_FALSE(arr.ok());
  EXPECT_EQ(arr.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(
      arr.status().message(),
      HasSubstr(dir.File("t") + ": byte 16: expected 160 data bytes, file has 130 (truncated)"));
}

TEST(Idx, TrailingDataIsRejected) {
  testing::TmpDir dir;
  ASSERT_TRUE(WriteIdx(dir.File("a"), {2, 2}, {1, 2, 3, 4}, false).ok());
  testing::WriteText(dir.File("b"), testing::ReadText(dir.File("a")) + "xx");
  auto arr = ReadIdx(dir.File("b"));
  ASSERT_FALSE(arr.ok());
  EXPECT_THAT(arr.status().message(), HasSubstr("(trailing data)"));
}

TEST(Idx, BadHeadersNameTheByte) {
  auto err = [](const std::string& bytes) { return ParseIdx(bytes, "f").status().message(); };
  EXPECT_THAT(err(""), HasSubstr("f: byte 0: file is 0 bytes"));
  EXPECT_THAT(err(std::string("\x01\x00\x08\x01", 4)), HasSubstr("byte 0: bad IDX magic"));
  EXPECT_THAT(err(std::string("\x00\x00\x0d\x01", 4)),
              HasSubstr("byte 2: IDX type 13 is not supported"));
  EXPECT_THAT(err(std::string("\x00\x00\x08\x00", 4)), HasSubstr("byte 3: 0 dimensions"));
  EXPECT_THAT(err(std::string("\x00\x00\x08\x02\x00\x00\x00\x01", 8)),
              HasSubstr("header needs 12 bytes"));
  EXPECT_THAT(err(std::string("\x00\x00\x08\x01\x00\x00\x00\x00", 8)),
              HasSubstr("byte 4: dimension 0 is 0"));
  EXPECT_THAT(
      err(std::string("\x00\x00\x08\x03\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x02", 16)),
      HasSubstr("more than 4 GiB"));
}

TEST(Idx, CorruptGzipNamesTheOffset) {
  testing::TmpDir dir;
  ASSERT_TRUE(WriteIdx(dir.File("a.gz"), {50, 8, 8}, Pixels(50, 8, 8), true).ok());
  std::string bytes = testing::ReadText(dir.File("a.gz"));
  std::string corrupt = bytes;
  for (size_t i = 20; i < 40 && i < corrupt.size(); ++i) corrupt[i] = char(~corrupt[i]);
  testing::WriteText(dir.File("c.gz"), corrupt);
  auto c = ReadIdx(dir.File("c.gz"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(), HasSubstr("of the gzip file"));
  testing::WriteText(dir.File("t.gz"), bytes.substr(0, bytes.size() / 2));
  auto t = ReadIdx(dir.File("t.gz"));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("truncated gzip stream"));
}

TEST(Idx, MissingFileIsNotFound) {
  auto arr = ReadIdx("/nonexistent/x.idx");
  ASSERT_FALSE(arr.ok());
  EXPECT_EQ(arr.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(arr.status().message(), HasSubstr("/nonexistent/x.idx"));
}

// A gzip stream that promises 100 bytes and decompresses to 64 MB is refused as soon as it passes
// what its IDX header declares, not after the whole bomb is in memory.
TEST(Idx, AGzipBombIsRefusedAtTheDeclaredSize) {
  testing::TmpDir dir;
  const std::string path = dir.File("bomb.gz");
  gzFile gz = gzopen(path.c_str(), "wb9");
  ASSERT_NE(gz, nullptr);
  const unsigned char header[] = {0, 0, 8, 2, 0, 0, 0, 10, 0, 0, 0, 10};  // 10 x 10 bytes declared
  gzwrite(gz, header, sizeof header);
  std::vector<char> zeros(1 << 20, 0);
  for (int i = 0; i < 64; ++i) gzwrite(gz, zeros.data(), unsigned(zeros.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
  auto r = data::ReadIdx(path);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(
      r.status().message(),
      ::testing::HasSubstr(
          path +
          ": byte 112 of the decompressed data: the stream goes on past the 112 bytes its IDX "
          "header declares"));
}

TEST(Idx, ADirectoryIsNamedAsOne) {
  testing::TmpDir dir;
  auto r = data::ReadIdx(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              ::testing::HasSubstr(dir.path() + ": is a directory, not a data file"));
}

TEST(Idx, LabelMismatchesAreNamed) {
  testing::TmpDir dir;
  ASSERT_TRUE(WriteIdx(dir.File("i"), {3, 2, 2}, Pixels(3, 2, 2), false).ok());
  ASSERT_TRUE(WriteIdx(dir.File("l2"), {2}, {0, 1}, false).ok());
  ASSERT_TRUE(WriteIdx(dir.File("l9"), {3}, {0, 9, 1}, false).ok());
  auto count = LoadIdxDataset(dir.File("i"), dir.File("l2"), 10);
  ASSERT_FALSE(count.ok());
  EXPECT_THAT(count.status().message(), HasSubstr("2 labels, but"));
  auto range = LoadIdxDataset(dir.File("i"), dir.File("l9"), 5);
  ASSERT_FALSE(range.ok());
  EXPECT_THAT(range.status().message(),
              HasSubstr(dir.File("l9") + ": byte 9: label 9 is not below the model's 5 classes"));
}

TEST(Augment, ShiftsAndFlips) {
  // 1 channel, 3x3: values 1..9 row-major.
  const uint8_t src[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  uint8_t dst[9];
  AugmentImage(src, dst, 1, 3, 3, 0, 0, false);
  EXPECT_EQ(std::vector<uint8_t>(dst, dst + 9), std::vector<uint8_t>(src, src + 9));
  AugmentImage(src, dst, 1, 3, 3, 1, 0, false);  // right by one, zero fill on the left
  EXPECT_EQ(std::vector<uint8_t>(dst, dst + 9), (std::vector<uint8_t>{0, 1, 2, 0, 4, 5, 0, 7, 8}));
  AugmentImage(src, dst, 1, 3, 3, 0, -1, false);  // up by one
  EXPECT_EQ(std::vector<uint8_t>(dst, dst + 9), (std::vector<uint8_t>{4, 5, 6, 7, 8, 9, 0, 0, 0}));
  AugmentImage(src, dst, 1, 3, 3, 0, 0, true);  // mirrored
  EXPECT_EQ(std::vector<uint8_t>(dst, dst + 9), (std::vector<uint8_t>{3, 2, 1, 6, 5, 4, 9, 8, 7}));
}

TEST(Augment, CacheKeepsOriginalAsVariantZeroAndIsDeterministic) {
  Dataset ds;
  ds.count = 20;
  ds.height = ds.width = 6;
  ds.pixels = Pixels(20, 6, 6);
  ds.labels.assign(20, 0);
  spec::AugmentSpec a;
  a.shift = 2;
  a.hflip = true;
  a.variants = 3;
  AugmentedCache c1(ds, a, 5), c2(ds, a, 5);
  EXPECT_EQ(c1.variants(), 3);
  for (int i = 0; i < ds.count; ++i)
    EXPECT_EQ(0, std::memcmp(c1.Image(0, i), ds.pixels.data() + i * 36, 36));
  int differ = 0;
  for (int v = 1; v < 3; ++v)
    for (int i = 0; i < ds.count; ++i) {
      EXPECT_EQ(0, std::memcmp(c1.Image(v, i), c2.Image(v, i), 36));
      differ += std::memcmp(c1.Image(v, i), c1.Image(0, i), 36) != 0;
    }
  EXPECT_GT(differ, 20);  // most augmented copies differ from the original
}

// augment.crop: images 2c larger each way; variant 0 is the centre window, every other a window
// somewhere inside (each pixel value says where it came from), and the test set's CentreCrop is
// variant 0's window.
TEST(Augment, RandomCropsAreWindowsOfTheLargerImage) {
  Dataset ds;
  ds.count = 10;
  ds.height = ds.width = 8;  // windows of 4x4 with crop 2
  for (int i = 0; i < ds.count; ++i)
    for (int p = 0; p < 64; ++p) ds.pixels.push_back(uint8_t(p));
  ds.labels.assign(10, 0);
  spec::AugmentSpec a;
  a.crop = 2;
  a.variants = 4;
  AugmentedCache c(ds, a, 9);
  ASSERT_EQ(c.image_bytes(), 16);
  const Dataset centre = CentreCrop(ds, 2);
  EXPECT_EQ(centre.height, 4);
  EXPECT_EQ(centre.width, 4);
  std::set<int> origins;
  for (int i = 0; i < ds.count; ++i) {
    EXPECT_EQ(0, std::memcmp(c.Image(0, i), centre.pixels.data() + i * 16, 16));
    EXPECT_EQ(c.Image(0, i)[0], 2 * 8 + 2);  // (2, 2)
    for (int v = 1; v < 4; ++v) {
      const uint8_t* w = c.Image(v, i);
      const int y0 = w[0] / 8, x0 = w[0] % 8;
      EXPECT_LE(y0, 4);
      EXPECT_LE(x0, 4);
      origins.insert(w[0]);
      for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 4; ++x) ASSERT_EQ(w[y * 4 + x], (y0 + y) * 8 + x0 + x);
    }
  }
  EXPECT_GT(origins.size(), 5u);  // windows from many places
}

}  // namespace
}  // namespace adam::data
