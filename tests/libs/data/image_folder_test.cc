// Image folders: decoding PNG and JPEG, grey and colour, fitting to the model's size by crop or
// stretch, skipping what cannot be decoded up to a limit, and the held-out split.
#include "data/image_folder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/file.h"
#include "testing/images.h"
#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam::data {
namespace {

using ::testing::HasSubstr;

std::string Bytes(const std::string& path) { return *ReadWholeFile(path); }

FolderOptions Target(int channels, int height, int width, Fit fit = Fit::kCrop) {
  FolderOptions o;
  o.channels = channels;
  o.height = height;
  o.width = width;
  o.fit = fit;
  return o;
}

// A 6x4 (width x height) grey image: the centre 4x4 at 200, a column of 0 on each side.
std::vector<uint8_t> Framed() {
  std::vector<uint8_t> px(24, 200);
  for (int y = 0; y < 4; ++y) px[size_t(y * 6)] = px[size_t(y * 6 + 5)] = 0;
  return px;
}

TEST(DecodeImage, APngOfTheTargetSizeIsItsPixels) {
  testing::TmpDir dir;
  std::vector<uint8_t> px(12);
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 20);
  testing::WritePng(dir.File("a.png"), 4, 3, 1, px);
  auto out = DecodeImage(Bytes(dir.File("a.png")), Target(1, 3, 4));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, px);
}

TEST(DecodeImage, ColourComesAsPlanesAndGreyAsLuminance) {
  testing::TmpDir dir;
  // 2x1 RGB: a red pixel and a blue one.
  const std::vector<uint8_t> rgb = {255, 0, 0, 0, 0, 255};
  testing::WritePng(dir.File("c.png"), 2, 1, 3, rgb);
  auto planes = DecodeImage(Bytes(dir.File("c.png")), Target(3, 1, 2));
  ASSERT_TRUE(planes.ok());
  EXPECT_EQ(*planes, (std::vector<uint8_t>{255, 0, 0, 0, 0, 255}));  // R plane, G plane, B plane
  auto grey = DecodeImage(Bytes(dir.File("c.png")), Target(1, 1, 2));
  ASSERT_TRUE(grey.ok());
  EXPECT_GT((*grey)[0], (*grey)[1]);  // red is brighter than blue to the eye
  EXPECT_GT((*grey)[1], 0);
}

TEST(DecodeImage, CropKeepsTheCentreAndStretchKeepsEverything) {
  testing::TmpDir dir;
  testing::WritePng(dir.File("f.png"), 6, 4, 1, Framed());
  auto crop = DecodeImage(Bytes(dir.File("f.png")), Target(1, 4, 4, Fit::kCrop));
  ASSERT_TRUE(crop.ok());
  EXPECT_EQ(*crop, std::vector<uint8_t>(16, 200));  // the dark frame cut away
  auto stretch = DecodeImage(Bytes(dir.File("f.png")), Target(1, 4, 4, Fit::kStretch));
  ASSERT_TRUE(stretch.ok());
  EXPECT_LT((*stretch)[0], 150);  // the frame squeezed in at the edges
  EXPECT_GT((*stretch)[5], 150);
  // Scaled down: a flat image stays flat.
  testing::WritePng(dir.File("flat.png"), 40, 30, 1, std::vector<uint8_t>(1200, 77));
  auto small = DecodeImage(Bytes(dir.File("flat.png")), Target(1, 7, 5, Fit::kCrop));
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(*small, std::vector<uint8_t>(35, 77));
}

TEST(DecodeImage, JpegGreyAndColour) {
  testing::TmpDir dir;
  testing::WriteJpeg(dir.File("g.jpg"), 8, 8, 1, std::vector<uint8_t>(64, 128), 100);
  auto g = DecodeImage(Bytes(dir.File("g.jpg")), Target(1, 8, 8));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (uint8_t v : *g) EXPECT_NEAR(v, 128, 2);
  std::vector<uint8_t> rgb;
  for (int i = 0; i < 64; ++i) rgb.insert(rgb.end(), {200, 40, 10});
  testing::WriteJpeg(dir.File("c.jpeg"), 8, 8, 3, rgb, 100);
  auto c = DecodeImage(Bytes(dir.File("c.jpeg")), Target(3, 4, 4));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NEAR((*c)[0], 200, 3);  // R plane
  EXPECT_NEAR((*c)[16], 40, 3);  // G plane
  EXPECT_NEAR((*c)[32], 10, 3);  // B plane
}

TEST(DecodeImage, BadBytesAreNamedNotDecoded) {
  testing::TmpDir dir;
  EXPECT_THAT(DecodeImage("GIF89a....", Target(1, 4, 4)).status().message(),
              HasSubstr("neither a PNG nor a JPEG"));
  testing::WritePng(dir.File("a.png"), 16, 16, 1, std::vector<uint8_t>(256, 9));
  const std::string png = Bytes(dir.File("a.png"));
  EXPECT_THAT(DecodeImage(png.substr(0, png.size() / 2), Target(1, 4, 4)).status().message(),
              HasSubstr("PNG"));
  testing::WriteJpeg(dir.File("a.jpg"), 16, 16, 1, std::vector<uint8_t>(256, 9));
  const std::string jpg = Bytes(dir.File("a.jpg"));
  EXPECT_FALSE(DecodeImage(jpg.substr(0, jpg.size() / 2), Target(1, 4, 4)).ok());
  EXPECT_THAT(DecodeImage(png, Target(2, 4, 4)).status().message(),
              HasSubstr("1 (grey) or 3 (RGB)"));
  // A PNG header claiming 20000 x 20000 pixels (IHDR patched, its CRC fixed): refused unread.
  std::string big = png;
  const unsigned char side[4] = {0x00, 0x00, 0x4e, 0x20};
  std::memcpy(big.data() + 16, side, 4);
  std::memcpy(big.data() + 20, side, 4);
  const uint32_t crc = uint32_t(crc32(0, reinterpret_cast<const Bytef*>(big.data() + 12), 17));
  const unsigned char be[4] = {uint8_t(crc >> 24), uint8_t(crc >> 16), uint8_t(crc >> 8),
                               uint8_t(crc)};
  std::memcpy(big.data() + 29, be, 4);
  EXPECT_THAT(DecodeImage(big, Target(1, 4, 4)).status().message(),
              HasSubstr("larger than Adam reads"));
}

// The largest and the mean absolute difference of two images' bytes.
std::pair<int, double> Difference(const std::vector<uint8_t>& a, const std::string& b) {
  int most = 0;
  double sum = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const int d = std::abs(int(a[i]) - int(uint8_t(b[i])));
    most = std::max(most, d);
    sum += d;
  }
  return {most, a.empty() ? 0 : sum / double(a.size())};
}

// Every kind of file tests/libs/data/image_kinds.py makes with Pillow (PNG of 1-16 bits, grey,
// colour, palette, transparency; JPEG baseline, progressive, grey, CMYK with and without Adobe's
// marker, the eight EXIF orientations, one in a PNG's eXIf chunk), and a YCCK JPEG made here with
// TurboJPEG, decodes as Pillow shows it (image_kinds.py reference): the same size, each byte within
// 2 of Pillow's, as RGB and as grey.
TEST(DecodeImage, EveryKindOfFileDecodesAsAnIndependentDecoderShowsIt) {
  testing::TmpDir dir;
  const std::string script = "/usr/bin/python3 " ADAM_SOURCE_DIR "/tests/libs/data/image_kinds.py ";
  ASSERT_EQ(std::system((script + "make " + dir.File("kinds")).c_str()), 0);
  // YCCK: TurboJPEG compresses CMYK pixels (here cyan, magenta, yellow gradients, black bars) so.
  std::vector<uint8_t> cmyk;
  for (int y = 0; y < 20; ++y)
    for (int x = 0; x < 30; ++x)
      cmyk.insert(cmyk.end(), {uint8_t(x * 8), uint8_t(y * 12), uint8_t((x + y) * 5),
                               uint8_t(x % 10 < 3 ? 180 : 0)});
  {
    tjhandle tj = tjInitCompress();
    unsigned char* out = nullptr;
    unsigned long size = 0;
    ASSERT_EQ(tjCompress2(tj, cmyk.data(), 30, 0, 20, TJPF_CMYK, &out, &size, TJSAMP_444, 95, 0),
              0);
    const std::string jpeg(reinterpret_cast<const char*>(out), size);
    tjFree(out);
    tjDestroy(tj);
    tj = tjInitDecompress();
    int w, h, sub, cs = -1;
    ASSERT_EQ(tjDecompressHeader3(tj, reinterpret_cast<const unsigned char*>(jpeg.data()), size, &w,
                                  &h, &sub, &cs),
              0);
    tjDestroy(tj);
    EXPECT_EQ(cs, TJCS_YCCK);
    std::ofstream(dir.File("kinds/ycck.jpg"), std::ios::binary) << jpeg;
  }
  ASSERT_EQ(
      std::system((script + "reference " + dir.File("kinds") + " " + dir.File("ref")).c_str()), 0);
  const auto index = nlohmann::json::parse(testing::ReadText(dir.File("ref/index.json")));
  EXPECT_EQ(index.size(), 27u) << index.dump();
  std::map<std::string, std::vector<uint8_t>> rgb;
  for (const auto& [name, size] : index.items()) {
    const std::string bytes = Bytes(dir.File("kinds/" + name));
    for (int channels : {3, 1}) {
      auto px = DecodeImagePixels(bytes, channels);
      ASSERT_TRUE(px.ok()) << name << ": " << px.status().ToString();
      EXPECT_EQ(px->width, size[0].get<int>()) << name;
      EXPECT_EQ(px->height, size[1].get<int>()) << name;
      EXPECT_EQ(px->channels, channels);
      const std::string ref = Bytes(dir.File("ref/" + name + (channels == 3 ? ".rgb" : ".grey")));
      ASSERT_EQ(px->hwc.size(), ref.size()) << name;
      const auto [most, mean] = Difference(px->hwc, ref);
      EXPECT_LE(most, 2) << name << " as " << channels << " channels (mean " << mean << ")";
      if (channels == 3) rgb[name] = px->hwc;
    }
  }
  // The same picture however it is stored: EXIF-turned files show what orientation 1 shows (up
  // to JPEG's losses), and the CMYK files (Pillow's naive conversion of picture.png) that
  // picture again, the Adobe one as it is and the plain one inverted.
  for (const std::string name : {"exif-2.jpg", "exif-3.jpg", "exif-4.jpg", "exif-5.jpg",
                                 "exif-6.jpg", "exif-7.jpg", "exif-8.jpg", "exif-8.png"}) {
    const std::string one(rgb["exif-1.jpg"].begin(), rgb["exif-1.jpg"].end());
    EXPECT_LT(Difference(rgb[name], one).second, 3) << name;
  }
  const std::string picture(rgb["picture.png"].begin(), rgb["picture.png"].end());
  EXPECT_LT(Difference(rgb["cmyk-adobe.jpg"], picture).second, 2);
  EXPECT_GT(Difference(rgb["cmyk-plain.jpg"], picture).second, 40);
}

// A test image is fitted larger by the margin and its centre kept, the same whether it comes one
// file at a time (adam predict) or as a folder (the data server, adam evaluate --folder); the
// folder's files are found in sub-folders and under upper-case extensions.
TEST(DecodeTestImage, OneFileIsFittedAsTheFolderFitsIt) {
  testing::TmpDir dir;
  std::vector<uint8_t> px(30 * 20);
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 7 % 251);
  std::filesystem::create_directories(dir.File("set/a/deeper"));
  testing::WritePng(dir.File("set/a/deeper/x.PNG"), 30, 20, 1, px);
  std::ofstream(dir.File("set/a/notes.txt")) << "not an image";
  int other = 0;
  auto files = ListImageFiles(dir.File("set"), &other);
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(*files, std::vector<std::string>{dir.File("set/a/deeper/x.PNG")});
  EXPECT_EQ(other, 1);
  for (Fit fit : {Fit::kCrop, Fit::kStretch}) {
    const InputFit f{1, 8, 10, fit, 2};
    auto one = DecodeTestImage(Bytes(dir.File("set/a/deeper/x.PNG")), f);
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    EXPECT_EQ(one->size(), 80u);
    auto set = LoadTestFolder(dir.File("set"), f, FolderOptions{});
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    EXPECT_EQ(set->data.height, 8);
    EXPECT_EQ(set->data.width, 10);
    EXPECT_EQ(set->data.pixels, *one);
    // The centre of the image fitted to 12 x 14: not the image fitted to 8 x 10.
    FolderOptions whole = Target(1, 8, 10, fit);
    EXPECT_NE(*DecodeImage(Bytes(dir.File("set/a/deeper/x.PNG")), whole), *one);
  }
}

TEST(LoadImageFolder, ClassesInNameOrderCorruptFilesSkippedAndNamedUpToTheLimit) {
  testing::TmpDir dir;
  const std::string root = dir.File("set");
  for (const char* cls : {"shirt", "boot"})
    for (int i = 0; i < 5; ++i) {
      std::filesystem::create_directories(root + "/" + cls);
      const std::vector<uint8_t> px(36, uint8_t(cls[0] == 'b' ? 10 : 240));
      if (i % 2)
        testing::WriteJpeg(root + "/" + cls + "/" + std::to_string(i) + ".JPG", 6, 6, 1, px);
      else
        testing::WritePng(root + "/" + cls + "/" + std::to_string(i) + ".png", 6, 6, 1, px);
    }
  std::ofstream(root + "/boot/broken.png") << "not a png";
  std::ofstream(root + "/shirt/notes.txt") << "ignored";
  FolderOptions o = Target(1, 3, 3);
  int64_t last = -1;
  o.progress = [&](int64_t done, int64_t total) {
    EXPECT_EQ(total, 11);
    last = done;
  };
  auto set = LoadImageFolder(root, o);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(last, 11);
  EXPECT_EQ(set->classes, (std::vector<std::string>{"boot", "shirt"}));
  EXPECT_EQ(set->data.count, 10);
  EXPECT_EQ(set->other_files, 1);
  ASSERT_EQ(set->skipped.size(), 1u);
  EXPECT_THAT(set->skipped[0], HasSubstr("boot/broken.png: neither a PNG nor a JPEG"));
  for (int i = 0; i < set->data.count; ++i) {
    const int label = set->data.labels[size_t(i)];
    const uint8_t px = set->data.pixels[size_t(i) * 9 + 4];
    EXPECT_NEAR(px, label == 0 ? 10 : 240, 3) << i;  // boot dark, shirt bright
  }
  o.max_corrupt = 0;
  EXPECT_THAT(LoadImageFolder(root, o).status().message(),
              HasSubstr("1 of 11 images could not be decoded, more than maxCorrupt (0); "));
  EXPECT_THAT(LoadImageFolder(dir.File("none"), o).status().message(), HasSubstr("not a folder"));
  std::filesystem::create_directories(dir.File("empty/a"));
  EXPECT_THAT(LoadImageFolder(dir.File("empty"), o).status().message(),
              HasSubstr("no .png, .jpg or .jpeg"));
}

TEST(SplitHeldOut, TakesTheFractionFromEveryClassAndLosesNothing) {
  Dataset d;
  d.height = d.width = 1;
  for (int i = 0; i < 100; ++i) {
    d.labels.push_back(uint8_t(i < 80 ? 0 : 1));
    d.pixels.push_back(uint8_t(i));
  }
  d.count = 100;
  Dataset test = SplitHeldOut(&d, 0.1, 7);
  EXPECT_EQ(test.count, 10);
  EXPECT_EQ(d.count, 90);
  std::map<int, int> per_class;
  for (uint8_t l : test.labels) ++per_class[l];
  EXPECT_EQ(per_class[0], 8);
  EXPECT_EQ(per_class[1], 2);
  std::vector<uint8_t> all = d.pixels;
  all.insert(all.end(), test.pixels.begin(), test.pixels.end());
  std::sort(all.begin(), all.end());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(all[size_t(i)], i);
  Dataset again;
  again.height = again.width = 1;
  again.labels = {0, 0, 1, 1};
  again.pixels = {0, 1, 2, 3};
  again.count = 4;
  EXPECT_EQ(SplitHeldOut(&again, 0.01, 7).count, 2);  // at least one of each class of two
}

}  // namespace
}  // namespace adam::data
