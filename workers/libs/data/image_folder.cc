// Image folders: listing, decoding (libpng, TurboJPEG), fitting (stb_image_resize), splitting.
#include "data/image_folder.h"

#include <png.h>
#include <stb/stb_image_resize.h>
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "core/file.h"

namespace adam::data {
namespace {

namespace fs = std::filesystem;

struct Pixels {
  int width = 0, height = 0;
  std::vector<uint8_t> hwc;  // height x width x channels
};

StatusOr<Pixels> DecodePng(std::string_view bytes, int channels) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()))
    return DataLossError(std::string("not a PNG libpng can read: ") + image.message);
  if (image.width > uint32_t(kMaxImageSide) || image.height > uint32_t(kMaxImageSide) ||
      int64_t{image.width} * image.height > kMaxImagePixels) {
    png_image_free(&image);
    return DataLossError("PNG of " + std::to_string(image.width) + "x" +
                         std::to_string(image.height) + " pixels: larger than Adam reads");
  }
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  Pixels p{int(image.width), int(image.height), std::vector<uint8_t>(PNG_IMAGE_SIZE(image))};
  if (!png_image_finish_read(&image, nullptr, p.hwc.data(), 0, nullptr))
    return DataLossError(std::string("PNG: ") + image.message);
  return p;
}

StatusOr<Pixels> DecodeJpeg(std::string_view bytes, int channels) {
  tjhandle tj = tjInitDecompress();
  if (tj == nullptr) return InternalError("TurboJPEG: cannot start a decompressor");
  auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const unsigned long size = static_cast<unsigned long>(bytes.size());
  int w = 0, h = 0, subsampling = 0, colorspace = 0;
  Pixels p;
  Status st;
  if (tjDecompressHeader3(tj, data, size, &w, &h, &subsampling, &colorspace) != 0) {
    st = DataLossError(std::string("not a JPEG libjpeg-turbo can read: ") + tjGetErrorStr2(tj));
  } else if (w <= 0 || h <= 0) {
    st = DataLossError("JPEG header without a frame (a truncated file?)");
  } else if (w > kMaxImageSide || h > kMaxImageSide || int64_t{w} * h > kMaxImagePixels) {
    st = DataLossError("JPEG of " + std::to_string(w) + "x" + std::to_string(h) +
                       " pixels: larger than Adam reads");
  } else {
    p = {w, h, std::vector<uint8_t>(size_t(w) * size_t(h) * size_t(channels))};
    // A truncated or damaged stream is a warning to libjpeg-turbo (it fills in grey): refused.
    if (tjDecompress2(tj, data, size, p.hwc.data(), w, 0, h, channels == 1 ? TJPF_GRAY : TJPF_RGB,
                      TJFLAG_STOPONWARNING) != 0)
      st = DataLossError(std::string("JPEG: ") + tjGetErrorStr2(tj));
  }
  tjDestroy(tj);
  if (!st.ok()) return st;
  return p;
}

bool HasImageExtension(const fs::path& p) {
  std::string ext = p.extension().string();
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

}  // namespace

StatusOr<std::vector<uint8_t>> DecodeImage(std::string_view bytes, const FolderOptions& o) {
  if (o.channels != 1 && o.channels != 3)
    return InvalidArgumentError("images can be read as 1 (grey) or 3 (RGB) channels, not " +
                                std::to_string(o.channels));
  static constexpr unsigned char kPng[] = {0x89, 'P', 'N', 'G'};
  static constexpr unsigned char kJpeg[] = {0xff, 0xd8, 0xff};
  auto starts = [&bytes](const unsigned char* magic, size_t n) {
    return bytes.size() >= n &&
           std::equal(magic, magic + n, reinterpret_cast<const unsigned char*>(bytes.data()));
  };
  StatusOr<Pixels> decoded = starts(kPng, sizeof kPng) ? DecodePng(bytes, o.channels)
                             : starts(kJpeg, sizeof kJpeg)
                                 ? DecodeJpeg(bytes, o.channels)
                                 : DataLossError("neither a PNG nor a JPEG (byte 0)");
  if (!decoded.ok()) return decoded.status();
  const Pixels& in = *decoded;
  // The region that is scaled to height x width: all of it, or the centred part of the target's
  // aspect ratio (so the result covers the target with nothing stretched).
  int x0 = 0, y0 = 0, cw = in.width, ch = in.height;
  if (o.fit == Fit::kCrop) {
    if (int64_t{in.width} * o.height > int64_t{in.height} * o.width) {
      cw = std::max(1, int(std::lround(double(in.height) * o.width / o.height)));
      x0 = (in.width - cw) / 2;
    } else {
      ch = std::max(1, int(std::lround(double(in.width) * o.height / o.width)));
      y0 = (in.height - ch) / 2;
    }
  }
  const int c = o.channels;
  std::vector<uint8_t> hwc(size_t(o.height) * size_t(o.width) * size_t(c));
  const size_t stride = size_t(in.width) * size_t(c);
  const uint8_t* from = in.hwc.data() + size_t(y0) * stride + size_t(x0) * size_t(c);
  if (cw == o.width && ch == o.height) {
    for (int y = 0; y < ch; ++y)
      std::copy(from + size_t(y) * stride, from + size_t(y) * stride + size_t(cw) * size_t(c),
                hwc.begin() + ptrdiff_t(size_t(y) * size_t(o.width) * size_t(c)));
  } else if (!stbir_resize_uint8(from, cw, ch, int(stride), hwc.data(), o.width, o.height, 0, c)) {
    return InternalError("stb_image_resize could not scale the image");
  }
  std::vector<uint8_t> chw(hwc.size());
  const size_t plane = size_t(o.height) * size_t(o.width);
  for (size_t p = 0; p < plane; ++p)
    for (int k = 0; k < c; ++k) chw[size_t(k) * plane + p] = hwc[p * size_t(c) + size_t(k)];
  return chw;
}

namespace {

struct ImageFile {
  fs::path path;
  uint8_t label;
};

// The class folders of `dir` (sorted; their names into `out->classes`) and the image files under
// each, labelled by folder; other files are counted in `out->other_files`.
StatusOr<std::vector<ImageFile>> ListImages(const std::string& dir, FolderSet* out) {
  std::error_code ec;
  std::vector<fs::path> class_dirs;
  for (const auto& de : fs::directory_iterator(dir, ec))
    if (de.is_directory(ec) && de.path().filename().string()[0] != '.')
      class_dirs.push_back(de.path());
  if (ec) return UnavailableError(dir + ": cannot list it: " + ec.message());
  std::sort(class_dirs.begin(), class_dirs.end());
  if (class_dirs.empty())
    return InvalidArgumentError(dir +
                                ": holds no class folder (DIR/CLASS/IMAGE.png is the layout)");
  if (class_dirs.size() > 256)
    return InvalidArgumentError(dir + ": " + std::to_string(class_dirs.size()) +
                                " class folders; Adam's labels go up to 256");
  std::vector<ImageFile> files;
  for (size_t k = 0; k < class_dirs.size(); ++k) {
    out->classes.push_back(class_dirs[k].filename().string());
    std::vector<fs::path> in_class;
    for (const auto& de : fs::recursive_directory_iterator(class_dirs[k], ec)) {
      if (!de.is_regular_file(ec)) continue;
      if (HasImageExtension(de.path()))
        in_class.push_back(de.path());
      else
        ++out->other_files;
    }
    if (ec) return UnavailableError(class_dirs[k].string() + ": cannot list it: " + ec.message());
    std::sort(in_class.begin(), in_class.end());
    for (auto& p : in_class) files.push_back({std::move(p), uint8_t(k)});
  }
  if (files.empty()) return InvalidArgumentError(dir + ": holds no .png, .jpg or .jpeg file");
  return files;
}

// Every file decoded in parallel into its own slot of `pixels` (`image` bytes each); `ok` marks
// the decoded ones, `failed` says why the others were not.
void DecodeAll(const std::vector<ImageFile>& files, const FolderOptions& o, size_t image,
               std::vector<uint8_t>* pixels, std::vector<char>* ok,
               std::vector<std::string>* failed) {
  const size_t n = files.size();
  pixels->resize(n * image);
  ok->assign(n, 0);
  failed->assign(n, "");
  // The next file to take (fetch_add hands each out once) and a progress count; the decoded
  // slots are read after the threads are joined, which orders them.
  std::atomic<size_t> next{0}, done{0};
  const int threads = std::max(
      1, std::min<int>(o.threads > 0 ? o.threads : int(std::thread::hardware_concurrency()),
                       int(std::min<size_t>(n, 64))));
  std::vector<std::thread> pool;
  pool.reserve(size_t(threads));
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) {
        const std::string path = files[i].path.string();
        auto bytes = ReadWholeFile(path);
        StatusOr<std::vector<uint8_t>> px =
            bytes ? DecodeImage(*bytes, o)
                  : StatusOr<std::vector<uint8_t>>(UnavailableError("cannot read it"));
        if (px.ok()) {
          std::copy(px->begin(), px->end(), pixels->begin() + ptrdiff_t(i * image));
          (*ok)[i] = 1;
        } else {
          (*failed)[i] = path + ": " + px.status().message();
        }
        done.fetch_add(1, std::memory_order_release);
      }
    });
  while (done.load(std::memory_order_acquire) < n) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (o.progress) o.progress(int64_t(done.load(std::memory_order_relaxed)), int64_t(n));
  }
  for (auto& t : pool) t.join();
  if (o.progress) o.progress(int64_t(n), int64_t(n));
}

}  // namespace

StatusOr<FolderSet> LoadImageFolder(const std::string& dir, const FolderOptions& o) {
  if (o.height <= 0 || o.width <= 0) return InvalidArgumentError("image folder: no target size");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFoundError(dir + ": not a folder");
  FolderSet out;
  ADAM_ASSIGN_OR_RETURN(const std::vector<ImageFile> files, ListImages(dir, &out));
  const size_t n = files.size();
  const size_t image = size_t(o.channels) * size_t(o.height) * size_t(o.width);
  std::vector<uint8_t> pixels;
  std::vector<std::string> failed;
  std::vector<char> ok;
  DecodeAll(files, o, image, &pixels, &ok, &failed);

  // The decoded images closed up in place, in file order.
  Dataset& d = out.data;
  d.channels = o.channels;
  d.height = o.height;
  d.width = o.width;
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!ok[i]) {
      out.skipped.push_back(std::move(failed[i]));
      continue;
    }
    if (kept != i)
      std::copy(pixels.begin() + ptrdiff_t(i * image), pixels.begin() + ptrdiff_t((i + 1) * image),
                pixels.begin() + ptrdiff_t(kept * image));
    d.labels.push_back(files[i].label);
    ++kept;
  }
  pixels.resize(kept * image);
  d.pixels = std::move(pixels);
  d.count = int(kept);
  if (int(out.skipped.size()) > o.max_corrupt) {
    std::string first;
    for (size_t i = 0; i < out.skipped.size() && i < 3; ++i) first += "; " + out.skipped[i];
    return DataLossError(dir + ": " + std::to_string(out.skipped.size()) + " of " +
                         std::to_string(n) +
                         " images could not be decoded, more than maxCorrupt (" +
                         std::to_string(o.max_corrupt) + ")" + first);
  }
  if (d.count == 0) return DataLossError(dir + ": no image could be decoded; " + out.skipped[0]);
  return out;
}

Dataset SplitHeldOut(Dataset* train, double fraction, uint64_t seed) {
  std::map<uint8_t, std::vector<int>> by_class;
  for (int i = 0; i < train->count; ++i) by_class[train->labels[size_t(i)]].push_back(i);
  std::vector<char> held(size_t(train->count), 0);
  std::mt19937_64 rng(seed ^ 0x6865'6c64'6f75'74ULL);
  for (auto& [label, idx] : by_class) {
    std::shuffle(idx.begin(), idx.end(), rng);
    size_t k = size_t(std::lround(fraction * double(idx.size())));
    if (idx.size() >= 2)
      k = std::clamp<size_t>(k, 1, idx.size() - 1);
    else
      k = 0;
    for (size_t j = 0; j < k; ++j) held[size_t(idx[j])] = 1;
  }
  Dataset test, kept;
  for (Dataset* d : {&test, &kept}) {
    d->channels = train->channels;
    d->height = train->height;
    d->width = train->width;
  }
  const size_t image = size_t(train->image_bytes());
  for (int i = 0; i < train->count; ++i) {
    Dataset& to = held[size_t(i)] ? test : kept;
    to.pixels.insert(to.pixels.end(), train->pixels.begin() + ptrdiff_t(size_t(i) * image),
                     train->pixels.begin() + ptrdiff_t(size_t(i + 1) * image));
    to.labels.push_back(train->labels[size_t(i)]);
  }
  test.count = int(test.labels.size());
  kept.count = int(kept.labels.size());
  *train = std::move(kept);
  return test;
}

}  // namespace adam::data
