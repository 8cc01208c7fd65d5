// Test helper: PNG and JPEG files made here (libpng's simplified API, TurboJPEG), and a folder of
// class folders of them from the synthetic set (testing/synthetic.h).
#pragma once

#include <gtest/gtest.h>
#include <png.h>
#include <turbojpeg.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/idx.h"

namespace adam::testing {

// `channels` (1 or 3) x height x width interleaved (HWC) bytes as a PNG file.
inline void WritePng(const std::string& path, int width, int height, int channels,
                     const std::vector<uint8_t>& hwc) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = uint32_t(width);
  image.height = uint32_t(height);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  ASSERT_TRUE(png_image_write_to_file(&image, path.c_str(), 0, hwc.data(), 0, nullptr))
      << image.message;
}

// The same as a JPEG of `quality` (1-100), without chroma subsampling.
inline void WriteJpeg(const std::string& path, int width, int height, int channels,
                      const std::vector<uint8_t>& hwc, int quality = 95) {
  tjhandle tj = tjInitCompress();
  ASSERT_NE(tj, nullptr);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(tj, hwc.data(), width, 0, height, channels == 1 ? TJPF_GRAY : TJPF_RGB,
                             &out, &size, channels == 1 ? TJSAMP_GRAY : TJSAMP_444, quality, 0);
  ASSERT_EQ(rc, 0) << tjGetErrorStr2(tj);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(out), std::streamsize(size));
  tjFree(out);
  tjDestroy(tj);
}

// The synthetic IDX set PREFIX-images.gz / PREFIX-labels as DIR/class-L/NNNNN.{png,jpg}: every
// third image a JPEG, the rest PNG files.
inline void WriteFolderFromIdx(const std::string& prefix, const std::string& dir) {
  auto images = data::ReadIdx(prefix + "-images.gz");
  auto labels = data::ReadIdx(prefix + "-labels");
  ASSERT_TRUE(images.ok() && labels.ok());
  const int h = int(images->dims[1]), w = int(images->dims[2]);
  for (size_t i = 0; i < labels->data.size(); ++i) {
    const std::string cls = dir + "/class-" + std::to_string(labels->data[i]);
    std::filesystem::create_directories(cls);
    const std::vector<uint8_t> px(images->data.begin() + ptrdiff_t(i * size_t(h * w)),
                                  images->data.begin() + ptrdiff_t((i + 1) * size_t(h * w)));
    char name[32];
    std::snprintf(name, sizeof name, "/%05zu", i);
    if (i % 3 == 2)
      WriteJpeg(cls + name + ".jpg", w, h, 1, px);
    else
      WritePng(cls + name + ".png", w, h, 1, px);
  }
}

}  // namespace adam::testing
