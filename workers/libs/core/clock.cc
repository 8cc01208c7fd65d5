// Clock::Real and FakeClock.
#include "core/clock.h"

#include <algorithm>

namespace adam {
namespace {

class RealClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  bool WaitUntil(MutexLock& lock, std::condition_variable& cv, TimePoint deadline) override {
    return lock.WaitUntil(cv, deadline);
  }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();  // never destroyed: used until exit
  return clock;
}

Clock::TimePoint FakeClock::Now() const {
  MutexLock l(mu_);
  return now_;
}

bool FakeClock::WaitUntil(MutexLock& lock, std::condition_variable& cv, TimePoint deadline) {
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
  MutexLock l(mu_);
  auto it = std::find_if(waiters_.begin(), waiters_.end(),
                         [&](const Waiter& w) { return w.mu == self.mu && w.cv == self.cv; });
  if (it != waiters_.end()) waiters_.erase(it);
  changed_.notify_all();
  return now_ < deadline;
}

void FakeClock::Advance(Duration d) {
  std::vector<Waiter> waiting;
  {
    MutexLock l(mu_);
    now_ += d;
    waiting = waiters_;
  }
  for (const Waiter& w : waiting) {
    MutexLock l(*w.mu);
    w.cv->notify_all();
  }
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
