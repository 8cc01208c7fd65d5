// Fatal signal reports: only async-signal-safe calls in the handler (write, backtrace_symbols_fd,
// and backtrace, whose unwinder is loaded before any signal).
#include "core/crash.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "core/sanitizer.h"

namespace adam {
namespace {

void Say(const char* s) {
  for (size_t left = std::strlen(s); left > 0;) {
    const ssize_t n = write(STDERR_FILENO, s, left);
    if (n <= 0) return;
    s += n;
    left -= size_t(n);
  }
}

// `v` in `base` (10 or 16), without allocating.
void SayNumber(uint64_t v, unsigned base) {
  char buf[24];
  char* p = buf + sizeof buf;
  *--p = '\0';
  do {
    *--p = "0123456789abcdef"[v % base];
    v /= base;
  } while (v != 0);
  Say(p);
}

// "*** fatal signal 11 (SIGSEGV) in thread 123 at address 0x0".
void SaySignal(int sig, const siginfo_t* info) {
  Say("*** fatal signal ");
  SayNumber(uint64_t(sig), 10);
  const char* abbrev = sigabbrev_np(sig);
  Say(" (SIG");
  Say(abbrev ? abbrev : "?");
  Say(") in thread ");
  SayNumber(uint64_t(syscall(SYS_gettid)), 10);
  if ((sig == SIGSEGV || sig == SIGBUS) && info && info->si_code > 0) {  // > 0: the kernel's
    Say(" at address 0x");
    SayNumber(reinterpret_cast<uintptr_t>(info->si_addr), 16);
  }
}

void OnFatalSignal(int sig, siginfo_t* info, void* /*context*/) {
  Say("\n");
  SaySignal(sig, info);
  Say("; its stack (addr2line -e MODULE OFFSET names a line):\n");
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // Said again last: the last line of a log is what a pod's failure event quotes.
  SaySignal(sig, info);
  Say(" (its stack above)\n");
  // The handler was reset on entry (SA_RESETHAND): raised again, the signal ends the process when
  // this returns, as it would have without the report.
  raise(sig);
}

}  // namespace

void ReportCrashes() {
  if (kSanitizerBuild) return;
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc's unwinder now: never first inside a handler
  struct sigaction sa = {};
  sa.sa_sigaction = OnFatalSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

}  // namespace adam
