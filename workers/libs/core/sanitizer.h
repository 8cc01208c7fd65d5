// Whether this build runs under a sanitizer (ASan or TSan): what reports fatal signals itself
// (core/crash.h), and what makes training several times slower (tests size their jobs by it).
#pragma once

// GCC defines __SANITIZE_ADDRESS__; clang 14 answers __has_feature only.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ADAM_SANITIZER_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ADAM_SANITIZER_BUILD 1
#endif
#endif

namespace adam {

#ifdef ADAM_SANITIZER_BUILD
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif

}  // namespace adam
