// Adam's version: `adam --version`, and the producer of the models it exports.
#pragma once

namespace adam {
inline constexpr const char* kAdamVersion = "0.1.0";
}  // namespace adam
