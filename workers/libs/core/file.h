// Whole-file reads. Thread-safe.
#pragma once

#include <optional>
#include <string>

namespace adam {

// The file's bytes, or nullopt when it cannot be opened (the caller names what it is).
std::optional<std::string> ReadWholeFile(const std::string& path);

}  // namespace adam
