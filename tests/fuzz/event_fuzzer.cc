// libFuzzer target: a child's output line -> the launcher's event parser.
#include <cstdint>
#include <string>

#include "core/event.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string line =
      std::string(adam::kEventPrefix) + std::string(reinterpret_cast<const char*>(data), size);
  auto ev = adam::ParseEvent(line);
  if (ev && !ev->is_object()) __builtin_trap();
  adam::ParseEvent(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
