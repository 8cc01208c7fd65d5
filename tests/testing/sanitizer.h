// Whether this test binary runs under a sanitizer (ASan or TSan), which makes training several
// times slower: tests that must train for a while size their jobs by it.
#pragma once

namespace adam::testing {

// GCC defines __SANITIZE_ADDRESS__; clang 14 answers __has_feature only.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ADAM_SANITIZER_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ADAM_SANITIZER_BUILD 1
#endif
#endif
#ifdef ADAM_SANITIZER_BUILD
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif

}  // namespace adam::testing
