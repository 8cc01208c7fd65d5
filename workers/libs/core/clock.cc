// Clock::Real and FakeClock.
#include "core/clock.h"

#include <algorithm>

namespace adam {
namespace {

class RealClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  WallTime WallNow() const override { return std::chrono::system_clock::now(); }
  bool WaitUntil(MutexLock& lock, std::condition_variable& cv, TimePoint deadline) override {
    return lock.WaitUntil(cv, deadline);
  }
};

}  // namespace

void Clock::SleepUntil(TimePoint deadline) {
  Mutex mu;
  std::condition_variable cv;  // never notified: only the deadline ends the wait
  MutexLock lock(mu);
  while (WaitUntil(lock, cv, deadline)) {
  }
}

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();  // never destroyed: used until exit
  return clock;
}

Clock::TimePoint FakeClock::Now() const {
  MutexLock l(mu_);
  return now_;
}

Clock::WallTime FakeClock::WallNow() const {
  MutexLock l(mu_);
  return WallTime(kWallStart) +
         std::chrono::duration_cast<WallTime::duration>(now_ - (TimePoint() + kStart));
}

// The caller holds `lock` (Clock's contract); the analysis cannot see a reference's state, hence
// no analysis here.
bool FakeClock::WaitUntil(MutexLock& lock, std::condition_variable& cv,
                          TimePoint deadline) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const Waiter self{&lock.mutex(), &cv};
  {
    MutexLock l(mu_);
    if (now_ >= deadline) return false;
    waiters_.push_back(self);
    changed_.notify_all();
  }
  // Still holding the caller's mutex: an Advance from here on takes it before notifying, so it
  // finds this thread inside the wait.
  lock.Wait(cv);
  // Let go of the caller's mutex (an Advance may be about to take it), leave the list, and wait
  // until no Advance still holds a copy of it: once this returns, the caller may destroy its
  // mutex and condition variable.
  lock.Unlock();
  bool before = false;
  {
    MutexLock l(mu_);
    auto it = std::find_if(waiters_.begin(), waiters_.end(),
                           [&](const Waiter& w) { return w.mu == self.mu && w.cv == self.cv; });
    if (it != waiters_.end()) waiters_.erase(it);
    changed_.notify_all();
    l.Await(changed_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return notifying_ == 0; });
    before = now_ < deadline;
    ++wakeups_;
  }
  lock.Lock();
  return before;
}

void FakeClock::Advance(Duration d) {
  std::vector<Waiter> waiting;
  {
    MutexLock l(mu_);
    now_ += d;
    waiting = waiters_;
    ++notifying_;
  }
  for (const Waiter& w : waiting) {
    MutexLock l(*w.mu);
    w.cv->notify_all();
  }
  MutexLock l(mu_);
  --notifying_;
  changed_.notify_all();
}

int64_t FakeClock::wakeups() const {
  MutexLock l(mu_);
  return wakeups_;
}

int FakeClock::waiters() const {
  MutexLock l(mu_);
  return int(waiters_.size());
}

bool FakeClock::AwaitWaiters(int n, std::chrono::milliseconds timeout) const {
  MutexLock l(mu_);
  return l.AwaitFor(changed_, timeout,
                    [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return int(waiters_.size()) >= n; });
}

}  // namespace adam
