// NameThisThread: the name is the kernel's (what /proc and top show), cut at Linux's 15 bytes,
// and only the calling thread's.
#include "core/thread_name.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace adam {
namespace {

// The calling thread's name as /proc shows it (what top and ps read).
std::string ThisThreadName() {
  std::ifstream in("/proc/self/task/" + std::to_string(syscall(SYS_gettid)) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

TEST(ThreadName, IsWhatProcShowsForThatThreadOnly) {
  const std::string main_before = ThisThreadName();
  std::string seen;
  std::thread t([&] {
    NameThisThread("sync");
    seen = ThisThreadName();
  });
  t.join();
  EXPECT_EQ(seen, "sync");
  EXPECT_EQ(ThisThreadName(), main_before);
}

TEST(ThreadName, ALongNameIsCutAtFifteenBytes) {
  std::string seen;
  std::thread t([&] {
    NameThisThread("worker-0123456789abcdef");
    seen = ThisThreadName();
  });
  t.join();
  EXPECT_EQ(seen, "worker-01234567");
}

TEST(ThreadName, ANamedThreadHasItsNameBeforeItsFunctionRuns) {
  std::string seen;
  std::thread t = NamedThread("prefetch", [&] { seen = ThisThreadName(); });
  t.join();
  EXPECT_EQ(seen, "prefetch");
}

}  // namespace
}  // namespace adam
