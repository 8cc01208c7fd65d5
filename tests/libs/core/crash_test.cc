// A fatal signal names its thread and stack on stderr, then ends the process as the signal would
// have.
#include "core/crash.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "testing/sanitizer.h"

namespace adam {

// Exported from the test binary (ENABLE_EXPORTS), so the stack names it.
__attribute__((noinline)) void CrashTestWritesThrough(volatile int* p) { *p = 1; }
__attribute__((noinline)) void CrashTestRaises(int sig) {
  raise(sig);
  asm volatile("" ::: "memory");  // not a tail call: this function stays on the stack
}

namespace {

TEST(Crash, AFatalSignalNamesItsThreadAndStackThenEndsTheProcessAsItWould) {
  if (testing::kSanitizerBuild) GTEST_SKIP() << "the sanitizer reports fatal signals itself";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ReportCrashes();  // a second call changes nothing
  EXPECT_EXIT(
      CrashTestWritesThrough(nullptr), ::testing::KilledBySignal(SIGSEGV),
      "fatal signal 11 \\(SIGSEGV\\) in thread [0-9]+ at address 0x0;"
      "(.|\n)*CrashTestWritesThrough(.|\n)*"
      "fatal signal 11 \\(SIGSEGV\\) in thread [0-9]+ at address 0x0 \\(its stack above\\)");
  EXPECT_EXIT(CrashTestRaises(SIGABRT), ::testing::KilledBySignal(SIGABRT),
              "fatal signal 6 \\(SIGABRT\\) in thread [0-9]+;(.|\n)*CrashTestRaises");
}

}  // namespace
}  // namespace adam
