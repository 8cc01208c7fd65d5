// Downward-API annotations and Multus network-status.
#include "net/network_status.h"

#include <algorithm>
#include <condition_variable>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/file.h"
#include "core/mutex.h"

namespace adam::net {
namespace {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The character a one-letter escape stands for (\" \\ \n \t \r \a \b \f \v), or 0.
char SimpleEscape(char e) {
  switch (e) {
    case '"':
      return '"';
    case '\\':
      return '\\';
    case 'n':
      return '\n';
    case 't':
      return '\t';
    case 'r':
      return '\r';
    case 'a':
      return '\a';
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'v':
      return '\v';
    default:
      return 0;
  }
}

// What is wrong in a line, and the byte of the line it is at.
struct LineError {
  size_t at;
  std::string what;
};

// The quoted value whose text starts at line[*i] (just after the opening quote), unescaped into
// `value`; *i ends just after the closing quote.
std::optional<LineError> Unquote(const std::string& line, size_t* i, std::string* value) {
  while (*i < line.size()) {
    const char c = line[*i];
    if (c == '"') {
      ++*i;
      return std::nullopt;
    }
    if (c != '\\') {
      value->push_back(c);
      ++*i;
      continue;
    }
    if (*i + 1 >= line.size()) return LineError{*i, "a backslash ends the line"};
    const char e = line[*i + 1];
    *i += 2;
    if (const char simple = SimpleEscape(e)) {
      value->push_back(simple);
      continue;
    }
    if (e != 'x' && e != 'u' && e != 'U')
      return LineError{*i - 1, std::string("unknown escape \\") + e};
    const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
    if (*i + n > line.size()) return LineError{*i, std::string("short \\") + e + " escape"};
    uint32_t cp = 0;
    for (size_t k = 0; k < n; ++k) {
      const int h = Hex(line[*i + k]);
      if (h < 0) return LineError{*i + k, "not a hex digit"};
      cp = cp * 16 + uint32_t(h);
    }
    *i += n;
    if (e == 'x')
      value->push_back(char(cp));
    else if (cp > 0x10FFFF)
      return LineError{*i - n, "code point out of range"};
    else
      AppendUtf8(cp, value);
  }
  return LineError{line.size(), "unterminated quoted value"};
}

}  // namespace

StatusOr<std::map<std::string, std::string>> ParseAnnotationsFile(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    const size_t line_start = pos;
    pos = end + 1;
    ++line_no;
    if (line.empty()) continue;
    auto bad = [&](size_t at, const std::string& what) {
      return DataLossError("annotations line " + std::to_string(line_no) + ", byte " +
                           std::to_string(line_start + at) + ": " + what);
    };
    const size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) return bad(0, "expected key=\"value\"");
    if (eq + 1 >= line.size() || line[eq + 1] != '"')
      return bad(eq + 1, "the value must be quoted");
    std::string value;
    size_t i = eq + 2;
    if (auto error = Unquote(line, &i, &value)) return bad(error->at, error->what);
    if (i != line.size()) return bad(i, "text after the closing quote");
    out[line.substr(0, eq)] = value;
  }
  return out;
}

StatusOr<std::string> NetworkAddress(const std::string& json_text, const std::string& network) {
  nlohmann::json list;
  try {
    list = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    return DataLossError(std::string(kNetworkStatusAnnotation) + ": not JSON at byte " +
                         std::to_string(e.byte));
  } catch (const nlohmann::json::exception& e) {  // found by fuzzing: a number out of range
    return DataLossError(std::string(kNetworkStatusAnnotation) + ": " + e.what());
  }
  if (!list.is_array())
    return DataLossError(std::string(kNetworkStatusAnnotation) + ": not a list");
  std::string names;
  for (const auto& a : list) {
    if (!a.is_object() || !a.contains("name") || !a["name"].is_string()) continue;
    const std::string name = a["name"].get<std::string>();
    names += (names.empty() ? "" : ", ") + name;
    const bool match = name == network || (name.size() > network.size() &&
                                           name.compare(name.size() - network.size() - 1,
                                                        std::string::npos, "/" + network) == 0);
    if (!match) continue;
    auto ips = a.find("ips");
    if (ips == a.end() || !ips->is_array() || ips->empty() || !(*ips)[0].is_string())
      return DataLossError(std::string(kNetworkStatusAnnotation) + ": attachment '" + name +
                           "' has no ips");
    return (*ips)[0].get<std::string>();
  }
  return NotFoundError(std::string(kNetworkStatusAnnotation) + ": no attachment named '" + network +
                       "' (present: " + (names.empty() ? "none" : names) + ")");
}

StatusOr<std::string> PodNetworkAddress(const std::string& path, const std::string& network) {
  const auto text = ReadWholeFile(path);
  if (!text) return NotFoundError(path + ": cannot read the pod's annotations");
  auto annotations = ParseAnnotationsFile(*text);
  if (!annotations.ok()) return annotations.status().Annotate(path);
  auto it = annotations->find(kNetworkStatusAnnotation);
  if (it == annotations->end())
    return NotFoundError(path + ": no " + std::string(kNetworkStatusAnnotation) +
                         " annotation (is Multus installed and the network attached?)");
  auto addr = NetworkAddress(it->second, network);
  if (!addr.ok()) return addr.status().Annotate(path);
  return addr;
}

StatusOr<std::string> WaitForPodNetworkAddress(const std::string& path, const std::string& network,
                                               std::chrono::milliseconds timeout,
                                               std::chrono::milliseconds poll, Clock* clock) {
  const auto deadline = clock->Now() + timeout;
  Mutex mu;
  std::condition_variable cv;  // nothing notifies it: the waits end at their deadlines
  while (true) {
    auto addr = PodNetworkAddress(path, network);
    if (addr.ok() || addr.status().code() != StatusCode::kNotFound) return addr;
    const auto now = clock->Now();
    if (now >= deadline)
      return NotFoundError(path + ": no address for network '" + network + "' after waiting " +
                           std::to_string(timeout.count() / 1000.0).substr(0, 5) + " s (" +
                           addr.status().message() + ")");
    const auto next = std::min<Clock::TimePoint>(now + poll, deadline);
    MutexLock lock(mu);
    while (clock->Now() < next) clock->WaitUntil(lock, cv, next);
  }
}

}  // namespace adam::net
