// libFuzzer target: bytes as a push's or pull's values and indices in every wire format
// (update/codec.h), as a parameter server or trainer reads them off the network. The first byte
// picks the format. Whatever arrives: no crash, no read past the input, a count within the
// bound, and what decodes encodes back to the same values.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "update/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const adam::update::WireFormat format{(data[0] & 1) != 0, (data[0] & 2) != 0};
  const bool indices = (data[0] & 4) != 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  constexpr size_t kMax = 1 << 16;
  if (indices) {
    auto n = adam::update::IndexCount(bytes, format.zstd, kMax);
    if (!n.ok()) return 0;
    if (*n > kMax) __builtin_trap();
    std::vector<uint32_t> out(*n);
    if (!adam::update::DecodeIndices(bytes, format.zstd, *n, out.data()).ok()) {
      if (!format.zstd) __builtin_trap();  // a raw count that checked out always decodes
      return 0;
    }
    std::string again;
    adam::update::EncodeIndices(out.data(), out.size(), format.zstd, &again);
    std::vector<uint32_t> back(*n);
    if (!adam::update::DecodeIndices(again, format.zstd, *n, back.data()).ok() || back != out)
      __builtin_trap();
    return 0;
  }
  auto n = adam::update::FloatCount(bytes, format, kMax);
  if (!n.ok()) return 0;
  if (*n > kMax) __builtin_trap();
  std::vector<float> out(*n);
  if (!adam::update::DecodeFloats(bytes, format, *n, out.data()).ok()) {
    if (!format.zstd) __builtin_trap();
    return 0;
  }
  std::string again;
  adam::update::EncodeFloats(out.data(), out.size(), format, &again);
  std::vector<float> back(*n);
  if (!adam::update::DecodeFloats(again, format, *n, back.data()).ok()) __builtin_trap();
  // Bit for bit, NaNs included, except that half precision quiets a signalling NaN.
  for (size_t i = 0; i < out.size(); ++i)
    if (std::memcmp(&out[i], &back[i], 4) != 0 && !(out[i] != out[i] && back[i] != back[i]))
      __builtin_trap();
  return 0;
}
