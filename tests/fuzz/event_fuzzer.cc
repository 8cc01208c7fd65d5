// libFuzzer target: a child's output line -> the launcher's event parser and the typed events.
// Traps when a line parses to something other than an object, or when a typed event does not
// come back from its own JSON as it was (compared as written, so a NaN equals a NaN).
#include <cstdint>
#include <string>

#include "core/event.h"
#include "core/role_events.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto ev = adam::ParseEvent(std::string(adam::kEventPrefix) + text);
  if (ev && !ev->is_object()) __builtin_trap();
  if (ev) {
    if (auto typed = adam::events::FromJson(*ev)) {
      const std::string once = adam::FiniteJson(adam::events::ToJson(*typed)).dump();
      auto again = adam::events::FromJson(adam::events::ToJson(*typed));
      if (!again || adam::FiniteJson(adam::events::ToJson(*again)).dump() != once) __builtin_trap();
    }
  }
  adam::events::ParseLine(text);
  return 0;
}
