// Clock: where code that keeps time (leases, heartbeats, timeouts, backoffs) reads the time and
// waits for it, so that tests drive time by hand with FakeClock instead of sleeping.
//
// Clock::Real() is the process's steady clock (and, for WallNow, the system clock); it is
// thread-safe and lives for the whole process. A FakeClock moves only when Advance is called; it is
// thread-safe. Code given a Clock* does not own it.
//
// core/ is where the process reads the time (here, and core/mutex.h's real-time waits): code
// elsewhere asks a Clock. The one exception is net/grpc.cc, which turns a timeout into gRPC's own
// system-clock deadline; `make format-check` names any other read.
#pragma once

#include <chrono>
#include <condition_variable>
#include <utility>
#include <vector>

#include "core/mutex.h"

namespace adam {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;
  using WallTime = std::chrono::system_clock::time_point;

  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
  // The calendar time: what is written down for others to read (a Lease's renewTime, a
  // certificate's validity, a checkpoint's or an event's timestamp). It may jump; intervals are
  // measured with Now().
  virtual WallTime WallNow() const = 0;
  // Seconds from `since` (a Now() of this clock) to now: a figure such as "restored in 0.4 s".
  double SecondsSince(TimePoint since) const {
    return std::chrono::duration<double>(Now() - since).count();
  }
  // Waits on `cv` with `lock`'s mutex released, until notified or this clock reaches `deadline`.
  // Returns false when the deadline passed (spurious wake-ups return true: callers loop on their
  // condition, as with std::condition_variable).
  virtual bool WaitUntil(MutexLock& lock, std::condition_variable& cv, TimePoint deadline) = 0;

  // Waits until pred() holds or this clock reaches `deadline` (as MutexLock::AwaitUntil does on
  // the steady clock); returns pred() at the end. pred() runs with `lock` held, which the
  // analysis cannot see through the reference (as with std::condition_variable's own waits).
  template <class Pred>
  bool AwaitUntil(MutexLock& lock, std::condition_variable& cv, TimePoint deadline,
                  Pred pred) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    while (!pred())
      if (!WaitUntil(lock, cv, deadline)) return pred();
    return true;
  }
  template <class Pred>
  bool AwaitFor(MutexLock& lock, std::condition_variable& cv, Duration timeout,
                Pred pred) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return AwaitUntil(lock, cv, Now() + timeout, std::move(pred));
  }
  // Returns once this clock has reached `deadline` (a backoff's pause).
  void SleepUntil(TimePoint deadline);
  void SleepFor(Duration d) { SleepUntil(Now() + d); }

  // std::chrono::steady_clock.
  static Clock* Real();
};

// Time that moves only when told. Advance wakes every thread waiting on this clock (taking each
// one's mutex first, so no wake-up is lost between a waiter's check of the time and its wait); a
// wait returns only once no Advance still holds its mutex, so the waiter may then destroy it.
class FakeClock final : public Clock {
 public:
  // Starts an hour after the epoch, so `Now() - something` stays positive in tests; its WallNow
  // starts at kWallStart and moves with Now.
  FakeClock() : now_(TimePoint() + kStart) {}
  static constexpr Duration kStart = std::chrono::hours(1);
  static constexpr std::chrono::seconds kWallStart{1767225600};  // 2026-01-01T00:00:00Z

  TimePoint Now() const override;
  WallTime WallNow() const override;
  bool WaitUntil(MutexLock& lock, std::condition_variable& cv, TimePoint deadline) override;
  void Advance(Duration d);
  // Threads waiting on this clock now: a test advances once the thread it drives is waiting.
  int waiters() const;
  // Waits on this clock that have returned so far: with waiters(), a test knows that a thread it
  // woke has done what it does before it waits again.
  int64_t wakeups() const;
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
  int notifying_ ABSL_GUARDED_BY(mu_) = 0;  // Advances still waking the waiters they copied
  int64_t wakeups_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace adam
