// libFuzzer target: bytes from the API server's watch stream, as the operator reads them: cut into
// lines by LineCutter from pieces of the sizes the first byte picks (as a connection delivers
// them), each line -> WatchDecoder, a decoded ERROR event -> its Status. Never a crash; the lines
// are exactly those of the whole input split at '\n' (a '\r' before it dropped), whatever the
// pieces; a decoded event always has a known type.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kube/line_stream.h"
#include "kube/watch.h"

namespace {

std::vector<std::string> SplitWhole(std::string_view text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  for (size_t nl; (nl = text.find('\n', pos)) != std::string_view::npos; pos = nl + 1) {
    std::string_view line = text.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.emplace_back(line);
  }
  std::string_view rest = text.substr(pos);
  if (!rest.empty() && rest.back() == '\r') rest.remove_suffix(1);
  if (!rest.empty()) lines.emplace_back(rest);
  return lines;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 64;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  adam::kube::LineCutter cutter(size_t{1} << 20);
  std::vector<std::string> lines;
  auto keep = [&](std::string_view line) {
    lines.emplace_back(line);
    return true;
  };
  for (size_t at = 0; at < text.size(); at += piece)
    if (cutter.Append(text.substr(at, piece), keep) != adam::kube::LineCutter::Cut::kMore)
      __builtin_trap();
  if (!cutter.rest().empty()) lines.emplace_back(cutter.rest());
  if (lines != SplitWhole(text)) __builtin_trap();

  adam::kube::WatchDecoder decoder;
  for (const std::string& line : lines) {
    auto ev = decoder.Decode(line);
    if (ev.ok()) {
      if (ev->type.empty() || !ev->object.is_object()) __builtin_trap();
      if (ev->type == "ERROR" && adam::kube::WatchErrorStatus(ev->object).ok()) __builtin_trap();
    }
  }
  return 0;
}
