// Events: one-line JSON records a role writes to stdout for its supervisor (the local launcher),
// e.g. `@adam {"event":"ready","port":40123}`. Log lines go to stderr; stdout carries only events.
// Emit is thread-safe (one write per line).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace adam {

inline constexpr const char kEventPrefix[] = "@adam ";

// Writes `@adam <json>` and a newline to stdout and flushes.
void EmitEvent(const nlohmann::json& event);

// Parses a line written by EmitEvent; nullopt for any other line or malformed JSON.
std::optional<nlohmann::json> ParseEvent(const std::string& line);

}  // namespace adam
