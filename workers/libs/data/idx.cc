// IDX parsing, gzip handling with zlib, and dataset loading.
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace adam::data {
namespace {

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The size a complete IDX header declares (header and data), once `bytes` holds the header;
// nullopt before that or when the header is not IDX (ParseIdx names the fault later).
std::optional<size_t> IdxDeclaredSize(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 4 || p[0] != 0 || p[1] != 0 || p[3] < 1 || p[3] > 4) return std::nullopt;
  const size_t header = 4 + 4 * size_t(p[3]);
  if (bytes.size() < header) return std::nullopt;
  uint64_t total = 1;
  for (int i = 0; i < p[3]; ++i)
    total = std::min<uint64_t>(total * BigEndian32(p + 4 + 4 * ptrdiff_t(i)), uint64_t{1} << 40);
  return size_t(header + total);
}

// Inflates gzip `in`. Once the output holds an IDX header, anything past the size it declares
// is refused at once: a stream that decompresses to gigabytes (a gzip bomb) costs no more memory
// than the file honestly needs.
std::string Inflate(const std::string& in, const std::string& path, size_t max_bytes,
                    Status* status) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    *status = InternalError(path + ": zlib init failed");
    return {};
  }
  std::string out;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  char buf[1 << 16];
  int rc = Z_OK;
  std::optional<size_t> declared;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      const size_t at = in.size() - zs.avail_in;
      std::string why =
          rc == Z_BUF_ERROR ? "truncated gzip stream" : (zs.msg ? zs.msg : "corrupt gzip stream");
      *status = DataLossError(path + ": byte " + std::to_string(at) + " of the gzip file: " + why);
      inflateEnd(&zs);
      return {};
    }
    out.append(buf, sizeof(buf) - zs.avail_out);
    if (!declared) declared = IdxDeclaredSize(out);
    if (declared && out.size() > *declared) {
      *status = DataLossError(path + ": byte " + std::to_string(*declared) +
                              " of the decompressed data: "
                              "the stream goes on past the " +
                              std::to_string(*declared) +
                              " bytes its IDX header declares; refusing (corrupt, or a gzip bomb)");
      inflateEnd(&zs);
      return {};
    }
    if (out.size() > max_bytes) {
      *status = DataLossError(path + ": decompresses to more than " + std::to_string(max_bytes) +
                              " bytes; refusing");
      inflateEnd(&zs);
      return {};
    }
  }
  inflateEnd(&zs);
  return out;
}

}  // namespace

StatusOr<std::string> ReadMaybeGzip(const std::string& path, size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return InvalidArgumentError(path + ": is a directory, not a data file");
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFoundError(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  return DecodeMaybeGzip(ss.str(), path, max_bytes);
}

StatusOr<std::string> DecodeMaybeGzip(std::string raw, const std::string& path, size_t max_bytes) {
  if (raw.size() >= 2 && static_cast<unsigned char>(raw[0]) == 0x1f &&
      static_cast<unsigned char>(raw[1]) == 0x8b) {
    Status st;
    std::string out = Inflate(raw, path, max_bytes, &st);
    if (!st.ok()) return st;
    return out;
  }
  if (raw.size() > max_bytes)
    return DataLossError(path + ": larger than " + std::to_string(max_bytes) + " bytes; refusing");
  return raw;
}

StatusOr<IdxArray> ParseIdx(std::string_view bytes, const std::string& name) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 4)
    return DataLossError(name + ": byte 0: file is " + std::to_string(bytes.size()) +
                         " bytes, shorter than the 4-byte IDX magic");
  if (p[0] != 0 || p[1] != 0)
    return DataLossError(name + ": byte 0: bad IDX magic (expected 00 00, got " +
                         std::to_string(p[0]) + " " + std::to_string(p[1]) + ")");
  if (p[2] != 0x08)
    return DataLossError(name + ": byte 2: IDX type " + std::to_string(p[2]) +
                         " is not supported (only 8 = unsigned byte)");
  const int ndims = p[3];
  if (ndims < 1 || ndims > 4)
    return DataLossError(name + ": byte 3: " + std::to_string(ndims) +
                         " dimensions; expected 1 to 4");
  const size_t header = 4 + 4 * size_t(ndims);
  if (bytes.size() < header)
    return DataLossError(name + ": byte " + std::to_string(bytes.size()) + ": header needs " +
                         std::to_string(header) + " bytes, file has " +
                         std::to_string(bytes.size()));
  IdxArray arr;
  uint64_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    uint32_t d = BigEndian32(p + 4 + 4 * ptrdiff_t(i));
    if (d == 0)
      return DataLossError(name + ": byte " + std::to_string(4 + 4 * i) + ": dimension " +
                           std::to_string(i) + " is 0");
    total *= d;
    if (total > (uint64_t{1} << 32))
      return DataLossError(name + ": byte " + std::to_string(4 + 4 * i) +
                           ": dimensions describe more than 4 GiB of data");
    arr.dims.push_back(d);
  }
  const uint64_t have = bytes.size() - header;
  if (have != total)
    return DataLossError(name + ": byte " + std::to_string(header) + ": expected " +
                         std::to_string(total) + " data bytes, file has " + std::to_string(have) +
                         (have < total ? " (truncated)" : " (trailing data)"));
  arr.data.assign(p + header, p + header + total);
  return arr;
}

StatusOr<IdxArray> ReadIdx(const std::string& path) {
  ADAM_ASSIGN_OR_RETURN(std::string bytes, ReadMaybeGzip(path));
  return ParseIdx(bytes, path);
}

Status WriteIdx(const std::string& path, const std::vector<uint32_t>& dims,
                const std::vector<uint8_t>& data, bool gzip) {
  std::string buf = {0, 0, 0x08, static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    char b[4] = {char(d >> 24), char(d >> 16), char(d >> 8), char(d)};
    buf.append(b, 4);
  }
  buf.append(reinterpret_cast<const char*>(data.data()), data.size());
  if (gzip) {
    gzFile gz = gzopen(path.c_str(), "wb");
    if (!gz) return UnavailableError(path + ": cannot create");
    int n = gzwrite(gz, buf.data(), static_cast<unsigned>(buf.size()));
    if (gzclose(gz) != Z_OK || n != static_cast<int>(buf.size()))
      return UnavailableError(path + ": write failed");
    return OkStatus();
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  if (!f) return UnavailableError(path + ": write failed");
  return OkStatus();
}

StatusOr<Dataset> LoadIdxDataset(const std::string& images_path, const std::string& labels_path,
                                 int classes, int channels, int height, int width) {
  ADAM_ASSIGN_OR_RETURN(IdxArray images, ReadIdx(images_path));
  ADAM_ASSIGN_OR_RETURN(IdxArray labels, ReadIdx(labels_path));
  Dataset ds;
  if (images.dims.size() == 3) {
    ds.channels = 1;
    ds.height = static_cast<int>(images.dims[1]);
    ds.width = static_cast<int>(images.dims[2]);
  } else if (images.dims.size() == 4) {
    ds.channels = static_cast<int>(images.dims[1]);
    ds.height = static_cast<int>(images.dims[2]);
    ds.width = static_cast<int>(images.dims[3]);
  } else {
    return DataLossError(images_path + ": byte 3: an images file needs 3 or 4 dimensions, got " +
                         std::to_string(images.dims.size()));
  }
  if (labels.dims.size() != 1)
    return DataLossError(labels_path + ": byte 3: a labels file needs 1 dimension, got " +
                         std::to_string(labels.dims.size()));
  if (images.dims[0] != labels.dims[0])
    return DataLossError(labels_path + ": byte 4: " + std::to_string(labels.dims[0]) +
                         " labels, but " + images_path + " has " + std::to_string(images.dims[0]) +
                         " images");
  if ((channels > 0 && channels != ds.channels) || (height > 0 && height != ds.height) ||
      (width > 0 && width != ds.width))
    return InvalidArgumentError(images_path + ": images are " + std::to_string(ds.channels) + "x" +
                                std::to_string(ds.height) + "x" + std::to_string(ds.width) +
                                " but spec.model.input is " + std::to_string(channels) + "x" +
                                std::to_string(height) + "x" + std::to_string(width));
  ds.count = static_cast<int>(images.dims[0]);
  const size_t header = 4 + 4 * labels.dims.size();
  for (size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] >= classes)
      return DataLossError(labels_path + ": byte " + std::to_string(header + i) + ": label " +
                           std::to_string(labels.data[i]) + " is not below the model's " +
                           std::to_string(classes) + " classes");
  ds.pixels = std::move(images.data);
  ds.labels = std::move(labels.data);
  return ds;
}

}  // namespace adam::data
