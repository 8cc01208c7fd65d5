// Events: one-line JSON records a role writes to stdout for its supervisor (the local launcher),
// e.g. `@adam {"event":"ready","port":40123}`. Log lines go to stderr; stdout carries only events.
// Emit is thread-safe (one write per line).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace adam {

inline constexpr const char kEventPrefix[] = "@adam ";

// Writes `@adam <json>` and a newline to stdout and flushes. NaN and infinities, which JSON
// cannot hold (nlohmann writes them as null), go as the strings "NaN", "Infinity", "-Infinity".
void EmitEvent(const nlohmann::json& event);

// `value` with every non-finite number replaced by its string, as EmitEvent writes it (for any
// JSON a person or a program reads: summaries, reports).
nlohmann::json FiniteJson(const nlohmann::json& value);

// Parses a line written by EmitEvent; nullopt for any other line or malformed JSON.
std::optional<nlohmann::json> ParseEvent(const std::string& line);

// A number field of an event: a number as it is; "NaN", "Infinity", "-Infinity" (and null, an
// older writer's NaN) as those values; `fallback` when absent or of another type. Never throws.
double EventNumber(const nlohmann::json& event, const char* key, double fallback);
// The same, nullopt where EventNumber gives its fallback.
std::optional<double> EventNumberIf(const nlohmann::json& event, const char* key);
// An integer field: `fallback` when absent, not a number, or not finite. Never throws.
int64_t EventInt(const nlohmann::json& event, const char* key, int64_t fallback);
// A string field: `fallback` when absent or not a string. Never throws.
std::string EventString(const nlohmann::json& event, const char* key,
                        const std::string& fallback = "");

}  // namespace adam
