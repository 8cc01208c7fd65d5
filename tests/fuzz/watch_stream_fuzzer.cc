// libFuzzer target: bytes from the API server's watch stream -> WatchDecoder, line by line, and a
// decoded ERROR event -> its Status. Never a crash; a decoded event always has a known type.
#include <cstdint>
#include <string>

#include "kube/watch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  adam::kube::WatchDecoder decoder;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    auto ev = decoder.Decode(text.substr(pos, end - pos));
    if (ev.ok()) {
      if (ev->type.empty() || !ev->object.is_object()) __builtin_trap();
      if (ev->type == "ERROR" && adam::kube::WatchErrorStatus(ev->object).ok()) __builtin_trap();
    }
    pos = end + 1;
  }
  return 0;
}
