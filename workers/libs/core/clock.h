// Clock: where code that keeps time (leases, heartbeats, timeouts, backoffs) reads the time and
// waits for it, so that tests drive time by hand with FakeClock instead of sleeping.
//
// Clock::Real() is the process's steady clock; it is thread-safe and lives for the whole process.
// A FakeClock moves only when Advance is called; it is thread-safe. Code given a Clock* does not
// own it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <vector>

#include "core/mutex.h"

namespace adam {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
  // Waits on `cv` with `lock`'s mutex released, until notified or this clock reaches `deadline`.
  // Returns false when the deadline passed (spurious wake-ups return true: callers loop on their
  // condition, as with std::condition_variable).
  virtual bool WaitUntil(MutexLock& lock, std::condition_variable& cv, TimePoint deadline) = 0;

  // std::chrono::steady_clock.
  static Clock* Real();
};

// Time that moves only when told. Advance wakes every thread waiting on this clock (taking each
// one's mutex first, so no wake-up is lost between a waiter's check of the time and its wait);
// it must not race with the destruction of an object a thread waits in.
class FakeClock final : public Clock {
 public:
  // Starts an hour after the epoch, so `Now() - something` stays positive in tests.
  FakeClock() : now_(TimePoint() + std::chrono::hours(1)) {}

  TimePoint Now() const override;
  bool WaitUntil(MutexLock& lock, std::condition_variable& cv, TimePoint deadline) override;
  void Advance(Duration d);
  // Threads waiting on this clock now: a test advances once the thread it drives is waiting.
  int waiters() const;
  // Blocks (in real time, up to `timeout`) until at least `n` threads wait on this clock; returns
  // whether they do.
  bool AwaitWaiters(int n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

 private:
  struct Waiter {
    Mutex* mu;
    std::condition_variable* cv;
  };
  mutable Mutex mu_;
  mutable std::condition_variable changed_;  // the waiters changed
  TimePoint now_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace adam
