// libFuzzer target: bytes -> gzip detection and inflation -> IDX parsing -> dataset checks.
#include <cstdint>
#include <string>

#include "data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = adam::data::DecodeMaybeGzip(std::string(reinterpret_cast<const char*>(data), size),
                                           "fuzz", size_t{64} << 20);
  if (!bytes.ok()) return 0;
  auto arr = adam::data::ParseIdx(*bytes, "fuzz");
  if (arr.ok()) {
    uint64_t n = 1;
    for (uint32_t d : arr->dims) n *= d;
    if (n != arr->data.size()) __builtin_trap();  // the parser's contract
  }
  return 0;
}
