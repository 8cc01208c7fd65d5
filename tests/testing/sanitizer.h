// Whether this test binary runs under a sanitizer (ASan or TSan), which makes training several
// times slower: tests that must train for a while size their jobs by it (core/sanitizer.h).
#pragma once

#include "core/sanitizer.h"

namespace adam::testing {

using adam::kSanitizerBuild;

}  // namespace adam::testing
