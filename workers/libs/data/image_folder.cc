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
#include "data/augment.h"

namespace adam::data {
namespace {

namespace fs = std::filesystem;

using Pixels = DecodedImage;

// Alpha composited on white (in sRGB values, as browsers and image viewers show a transparent
// image on a white page): `with_alpha` has channels + 1 bytes per pixel; returns channels.
std::vector<uint8_t> OnWhite(const std::vector<uint8_t>& with_alpha, int channels) {
  const size_t step = size_t(channels) + 1, n = with_alpha.size() / step;
  std::vector<uint8_t> out(n * size_t(channels));
  for (size_t p = 0; p < n; ++p) {
    const unsigned a = with_alpha[p * step + size_t(channels)];
    for (int c = 0; c < channels; ++c)
      out[p * size_t(channels) + size_t(c)] =
          uint8_t((with_alpha[p * step + size_t(c)] * a + 255 * (255 - a) + 127) / 255);
  }
  return out;
}

// ITU-R BT.601 luma, the Y a JPEG stores, so a colour PNG and a colour JPEG turn grey alike (and
// three equal channels give that value back).
std::vector<uint8_t> Luma(const std::vector<uint8_t>& rgb) {
  std::vector<uint8_t> grey(rgb.size() / 3);
  for (size_t p = 0; p < grey.size(); ++p)
    grey[p] =
        uint8_t((299 * rgb[3 * p] + 587 * rgb[3 * p + 1] + 114 * rgb[3 * p + 2] + 500) / 1000);
  return grey;
}

std::vector<uint8_t> GreyToRgb(const std::vector<uint8_t>& grey) {
  std::vector<uint8_t> rgb(grey.size() * 3);
  for (size_t p = 0; p < grey.size(); ++p) rgb[3 * p] = rgb[3 * p + 1] = rgb[3 * p + 2] = grey[p];
  return rgb;
}

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
  // Read in the file's own kind (grey or colour, with alpha where it has any: a palette with
  // transparency included), 8 bits per channel; 16-bit samples without gamma information are
  // taken as sRGB, as every viewer takes them, not as linear light.
  const bool colour = (image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  const bool alpha = (image.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  const int file_channels = colour ? 3 : 1;
  image.format = colour ? (alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB)
                        : (alpha ? PNG_FORMAT_GA : PNG_FORMAT_GRAY);
  image.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
  std::vector<uint8_t> px(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, px.data(), 0, nullptr))
    return DataLossError(std::string("PNG: ") + image.message);
  if (alpha) px = OnWhite(px, file_channels);
  if (file_channels != channels) px = channels == 1 ? Luma(px) : GreyToRgb(px);
  return Pixels{int(image.width), int(image.height), channels, std::move(px)};
}

// What a JPEG's markers before its scan say beyond TurboJPEG's header: whether Adobe's APP14
// marker is there (Adobe writes CMYK inverted: 0 is full ink) and the EXIF orientation (1-8;
// 1 when absent or unreadable: a broken EXIF block does not make the image unreadable).
struct JpegMarkers {
  bool adobe = false;
  int orientation = 1;
};

// EXIF's TIFF structure: byte order, 42, the offset of IFD0; IFD0's entries are 12 bytes each
// (tag, type, count, value); Orientation is tag 0x0112, a SHORT.
int TiffOrientation(std::string_view tiff) {
  if (tiff.size() < 8) return 1;
  const bool le = tiff[0] == 'I' && tiff[1] == 'I';
  if (!le && !(tiff[0] == 'M' && tiff[1] == 'M')) return 1;
  auto u16 = [&](size_t at) -> uint32_t {
    const auto* b = reinterpret_cast<const uint8_t*>(tiff.data() + at);
    return le ? uint32_t(b[0] | b[1] << 8) : uint32_t(b[0] << 8 | b[1]);
  };
  auto u32 = [&](size_t at) {
    return le ? u16(at) | u16(at + 2) << 16 : u16(at) << 16 | u16(at + 2);
  };
  if (u16(2) != 42) return 1;
  const size_t ifd = u32(4);
  if (ifd > tiff.size() || tiff.size() - ifd < 2) return 1;
  const size_t entries = u16(ifd);
  for (size_t k = 0; k < entries; ++k) {
    const size_t e = ifd + 2 + 12 * k;
    if (e + 12 > tiff.size()) return 1;
    if (u16(e) != 0x0112) continue;
    const uint32_t value = u16(e + 8);
    return u16(e + 2) == 3 && value >= 1 && value <= 8 ? int(value) : 1;
  }
  return 1;
}

// A JPEG's APP1 EXIF block: "Exif\0\0", then the TIFF structure.
int ExifOrientation(std::string_view app1) {
  if (app1.size() < 6 || app1.substr(0, 6) != std::string_view("Exif\0\0", 6)) return 1;
  return TiffOrientation(app1.substr(6));
}

// A PNG's eXIf chunk (the TIFF structure itself), wherever it is before IEND; 1 without one.
int PngOrientation(std::string_view png) {
  // The 8-byte signature, then chunks: a 4-byte big-endian length, the type, the data, a CRC.
  for (size_t at = 8; at + 8 <= png.size();) {
    const auto* b = reinterpret_cast<const uint8_t*>(png.data() + at);
    const size_t length = size_t(b[0]) << 24 | size_t(b[1]) << 16 | size_t(b[2]) << 8 | b[3];
    const std::string_view type = png.substr(at + 4, 4);
    if (type == "IEND" || length > png.size() - at - 8) break;
    if (type == "eXIf") return TiffOrientation(png.substr(at + 8, length));
    at += 12 + length;
  }
  return 1;
}

JpegMarkers ReadJpegMarkers(std::string_view jpeg) {
  JpegMarkers m;
  // SOI, then segments FF <marker> <2-byte big-endian length, itself included> until the scan.
  for (size_t at = 2; at + 4 <= jpeg.size();) {
    const auto* b = reinterpret_cast<const uint8_t*>(jpeg.data() + at);
    if (b[0] != 0xff) break;
    if (b[1] == 0xff) {  // fill bytes before a marker
      ++at;
      continue;
    }
    if (b[1] == 0xda || b[1] == 0xd9) break;  // start of scan, end of image
    const size_t length = size_t(b[2]) << 8 | b[3];
    if (length < 2 || at + 2 + length > jpeg.size()) break;
    const std::string_view payload = jpeg.substr(at + 4, length - 2);
    if (b[1] == 0xee && payload.substr(0, 5) == "Adobe") m.adobe = true;
    if (b[1] == 0xe1 && m.orientation == 1) m.orientation = ExifOrientation(payload);
    at += 2 + length;
  }
  return m;
}

// CMYK as TurboJPEG gives it (a YCCK file converted to CMYK already) to RGB: each of red, green
// and blue is what its ink and the black leave, (255 - C)(255 - K) / 255; Adobe's files store
// 255 - ink.
std::vector<uint8_t> CmykToRgb(const std::vector<uint8_t>& cmyk, bool inverted) {
  std::vector<uint8_t> rgb(cmyk.size() / 4 * 3);
  for (size_t p = 0; p < cmyk.size() / 4; ++p) {
    auto left = [&](int c) -> unsigned {
      const unsigned v = cmyk[4 * p + size_t(c)];
      return inverted ? v : 255 - v;
    };
    for (int c = 0; c < 3; ++c) rgb[3 * p + size_t(c)] = uint8_t((left(c) * left(3) + 127) / 255);
  }
  return rgb;
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
    // CMYK and YCCK (print and Adobe tools write them) come as CMYK and are turned to RGB here;
    // libjpeg-turbo cannot convert them to RGB or grey itself. A colour file is read as RGB
    // even for a grey model, and turned grey below as a PNG is.
    const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
    const bool grey = colorspace == TJCS_GRAY;
    const int as = cmyk ? 4 : grey ? 1 : 3;
    p = {w, h, channels, std::vector<uint8_t>(size_t(w) * size_t(h) * size_t(as))};
    // A truncated or damaged stream is a warning to libjpeg-turbo (it fills in grey): refused.
    if (tjDecompress2(tj, data, size, p.hwc.data(), w, 0, h,
                      cmyk   ? TJPF_CMYK
                      : grey ? TJPF_GRAY
                             : TJPF_RGB,
                      TJFLAG_STOPONWARNING) != 0) {
      st = DataLossError(std::string("JPEG: ") + tjGetErrorStr2(tj));
    } else {
      if (cmyk) p.hwc = CmykToRgb(p.hwc, ReadJpegMarkers(bytes).adobe);
      if (grey && channels == 3) p.hwc = GreyToRgb(p.hwc);
      if (!grey && channels == 1) p.hwc = Luma(p.hwc);
    }
  }
  tjDestroy(tj);
  if (!st.ok()) return st;
  return p;
}

// The image as EXIF orientation 1-8 says to show it (2: mirrored, 3: turned 180 degrees, 6: turned
// 90 degrees clockwise, ...; 5-8 swap width and height).
Pixels Oriented(Pixels in, int orientation) {
  if (orientation <= 1 || orientation > 8) return in;
  const int w = in.width, h = in.height, c = in.channels;
  const bool swap = orientation >= 5;
  Pixels out{swap ? h : w, swap ? w : h, c, std::vector<uint8_t>(in.hwc.size())};
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;
      switch (orientation) {
        case 2:
          sx = w - 1 - x;
          break;
        case 3:
          sx = w - 1 - x;
          sy = h - 1 - y;
          break;
        case 4:
          sy = h - 1 - y;
          break;
        case 5:
          sx = y;
          sy = x;
          break;
        case 6:
          sx = y;
          sy = h - 1 - x;
          break;
        case 7:
          sx = w - 1 - y;
          sy = h - 1 - x;
          break;
        case 8:
          sx = w - 1 - y;
          sy = x;
          break;
      }
      std::copy_n(
          in.hwc.begin() + ptrdiff_t((size_t(sy) * size_t(w) + size_t(sx)) * size_t(c)), c,
          out.hwc.begin() + ptrdiff_t((size_t(y) * size_t(out.width) + size_t(x)) * size_t(c)));
    }
  return out;
}

bool HasImageExtension(const fs::path& p) {
  std::string ext = p.extension().string();
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

}  // namespace

StatusOr<DecodedImage> DecodeImagePixels(std::string_view bytes, int channels) {
  if (channels != 1 && channels != 3)
    return InvalidArgumentError("images can be read as 1 (grey) or 3 (RGB) channels, not " +
                                std::to_string(channels));
  static constexpr unsigned char kPng[] = {0x89, 'P', 'N', 'G'};
  static constexpr unsigned char kJpeg[] = {0xff, 0xd8, 0xff};
  auto starts = [&bytes](const unsigned char* magic, size_t n) {
    return bytes.size() >= n &&
           std::equal(magic, magic + n, reinterpret_cast<const unsigned char*>(bytes.data()));
  };
  if (starts(kPng, sizeof kPng)) {
    ADAM_ASSIGN_OR_RETURN(Pixels p, DecodePng(bytes, channels));
    return Oriented(std::move(p), PngOrientation(bytes));
  }
  if (!starts(kJpeg, sizeof kJpeg)) return DataLossError("neither a PNG nor a JPEG (byte 0)");
  ADAM_ASSIGN_OR_RETURN(Pixels p, DecodeJpeg(bytes, channels));
  return Oriented(std::move(p), ReadJpegMarkers(bytes).orientation);
}

StatusOr<std::vector<uint8_t>> DecodeImage(std::string_view bytes, const FolderOptions& o) {
  ADAM_ASSIGN_OR_RETURN(const Pixels in, DecodeImagePixels(bytes, o.channels));
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
    ADAM_ASSIGN_OR_RETURN(std::vector<std::string> in_class,
                          ListImageFiles(class_dirs[k].string(), &out->other_files));
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

StatusOr<std::vector<std::string>> ListImageFiles(const std::string& dir, int* other_files) {
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& de : fs::recursive_directory_iterator(dir, ec)) {
    if (!de.is_regular_file(ec)) continue;
    if (HasImageExtension(de.path()))
      files.push_back(de.path().string());
    else
      ++*other_files;
  }
  if (ec) return UnavailableError(dir + ": cannot list it: " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

FolderOptions InputFit::Enlarged() const {
  FolderOptions o;
  o.channels = channels;
  o.height = height + 2 * margin;
  o.width = width + 2 * margin;
  o.fit = fit;
  return o;
}

StatusOr<std::vector<uint8_t>> DecodeTestImage(std::string_view bytes, const InputFit& f) {
  Dataset one;
  ADAM_ASSIGN_OR_RETURN(one.pixels, DecodeImage(bytes, f.Enlarged()));
  one.count = 1;
  one.channels = f.channels;
  one.height = f.height + 2 * f.margin;
  one.width = f.width + 2 * f.margin;
  one.labels = {0};
  return CentreCrop(one, f.margin).pixels;
}

StatusOr<FolderSet> LoadTestFolder(const std::string& dir, const InputFit& f, FolderOptions o) {
  const FolderOptions size = f.Enlarged();
  o.channels = size.channels;
  o.height = size.height;
  o.width = size.width;
  o.fit = size.fit;
  ADAM_ASSIGN_OR_RETURN(FolderSet set, LoadImageFolder(dir, o));
  set.data = CentreCrop(set.data, f.margin);
  return set;
}

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
