// libFuzzer target: bytes -> checkpoint file parsing (magic, CRC, entries, zstd frames).
#include <cstdint>
#include <string_view>

#include "param_server/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = adam::ps::ParseCheckpoint(std::string_view(reinterpret_cast<const char*>(data), size),
                                     int64_t{1} << 16);
  if (f.ok())
    for (const auto& e : f->entries) {
      const bool here = e.source == f->generation;
      if (here && int64_t(e.values.size()) != e.count) __builtin_trap();  // the parser's contract
      if (!here && !e.values.empty()) __builtin_trap();
    }
  return 0;
}
