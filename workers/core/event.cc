// Event lines on stdout.
#include "core/event.h"

#include <unistd.h>

namespace adam {

void EmitEvent(const nlohmann::json& event) {
  std::string line = kEventPrefix + event.dump() + "\n";
  // One write(2) keeps lines from concurrent threads whole (pipes: atomic up to PIPE_BUF).
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDOUT_FILENO, p, left);
    if (n <= 0) return;
    p += n;
    left -= size_t(n);
  }
}

std::optional<nlohmann::json> ParseEvent(const std::string& line) {
  if (line.rfind(kEventPrefix, 0) != 0) return std::nullopt;
  auto j = nlohmann::json::parse(line.substr(sizeof(kEventPrefix) - 1), nullptr,
                                 /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

}  // namespace adam
