// Event lines on stdout.
#include "core/event.h"

#include <unistd.h>

#include <cmath>
#include <limits>

namespace adam {

nlohmann::json FiniteJson(const nlohmann::json& value) {
  if (value.is_number_float()) {
    const double v = value.get<double>();
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    return value;
  }
  if (value.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto it = value.begin(); it != value.end(); ++it) out[it.key()] = FiniteJson(it.value());
    return out;
  }
  if (value.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : value) out.push_back(FiniteJson(v));
    return out;
  }
  return value;
}

void EmitEvent(const nlohmann::json& event) {
  std::string line = kEventPrefix + FiniteJson(event).dump() + "\n";
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

std::optional<double> EventNumberIf(const nlohmann::json& event, const char* key) {
  if (!event.is_object()) return std::nullopt;
  auto it = event.find(key);
  if (it == event.end()) return std::nullopt;
  if (it->is_number()) return it->get<double>();
  if (it->is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  return std::nullopt;
}

double EventNumber(const nlohmann::json& event, const char* key, double fallback) {
  return EventNumberIf(event, key).value_or(fallback);
}

int64_t EventInt(const nlohmann::json& event, const char* key, int64_t fallback) {
  const double v = EventNumber(event, key, double(fallback));
  if (!std::isfinite(v) || v > 9.2e18 || v < -9.2e18) return fallback;
  if (event.is_object() && event.contains(key) && event[key].is_number_integer())
    return event[key].get<int64_t>();  // exact beyond 2^53
  return int64_t(v);
}

std::string EventString(const nlohmann::json& event, const char* key, const std::string& fallback) {
  if (!event.is_object()) return fallback;
  auto it = event.find(key);
  return it != event.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace adam
