// ClockGate: per-trainer clocks and parked pulls.
#include "param_server/clock_gate.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "core/status.h"
#include "core/thread_name.h"

namespace adam::ps {

ClockGate::ClockGate(int trainers, spec::Consistency mode, int max_staleness, Clock* clock)
    : mode_(mode),
      staleness_(uint64_t(std::max(0, max_staleness))),
      time_(clock),
      trainers_(std::max(1, trainers)),
      clock_(size_t(std::max(1, trainers)), 0),
      left_(size_t(std::max(1, trainers)), false) {}

ClockGate::~ClockGate() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  expiry_cv_.notify_all();
  if (expirer_.joinable()) expirer_.join();
}

uint64_t ClockGate::Needed(uint64_t clock) const {
  switch (mode_) {
    case spec::Consistency::kAsync:
      return 0;
    case spec::Consistency::kSync:
      return clock;
    case spec::Consistency::kBounded:
      return clock > staleness_ ? clock - staleness_ : 0;
  }
  return 0;
}

uint64_t ClockGate::MinClockLocked() const {
  uint64_t m = std::numeric_limits<uint64_t>::max();
  for (size_t t = 0; t < clock_.size(); ++t)
    if (!left_[t]) m = std::min(m, clock_[t]);
  return m;
}

uint64_t ClockGate::MinClock() const {
  MutexLock lock(mu_);
  return MinClockLocked();
}

uint64_t ClockGate::Spread() const {
  MutexLock lock(mu_);
  uint64_t lo = std::numeric_limits<uint64_t>::max(), hi = 0;
  for (size_t t = 0; t < clock_.size(); ++t)
    if (!left_[t]) lo = std::min(lo, clock_[t]), hi = std::max(hi, clock_[t]);
  return hi >= lo ? hi - lo : 0;
}

size_t ClockGate::parked() const {
  MutexLock lock(mu_);
  return parked_.size();
}

int ClockGate::trainers() const { return trainers_.load(std::memory_order_relaxed); }

void ClockGate::SetTrainers(int n) {
  n = std::max(1, n);
  std::vector<std::function<void(bool)>> ready;
  {
    MutexLock lock(mu_);
    const uint64_t min = MinClockLocked();
    const uint64_t join = min == std::numeric_limits<uint64_t>::max() ? 0 : min;
    if (clock_.size() < size_t(n)) {
      clock_.resize(size_t(n), join);
      left_.resize(size_t(n), false);
    }
    for (int t = 0; t < int(clock_.size()); ++t) {
      if (t >= n) {
        left_[size_t(t)] = true;
      } else if (t >= trainers_.load(std::memory_order_relaxed)) {  // added (again)
        left_[size_t(t)] = false;
        clock_[size_t(t)] = std::max(clock_[size_t(t)], join);
      }
    }
    trainers_.store(n, std::memory_order_relaxed);
    const uint64_t now_min = MinClockLocked();
    auto end = parked_.upper_bound(now_min);
    for (auto it = parked_.begin(); it != end; ++it) ready.push_back(std::move(it->second.fn));
    parked_.erase(parked_.begin(), end);
  }
  for (auto& fn : ready) fn(true);
}

bool ClockGate::Admits(int t) const {
  if (t < 0) return false;
  if (mode_ == spec::Consistency::kAsync) return t < kMaxTrainers;
  return t < trainers_.load(std::memory_order_relaxed);
}

void ClockGate::Advance(int t, uint64_t clock, bool leave) {
  std::vector<std::function<void(bool)>> ready;
  {
    MutexLock lock(mu_);
    ADAM_CHECK(t >= 0 && t < kMaxTrainers);
    if (size_t(t) >= clock_.size()) {  // an async trainer the manifest has not told of yet
      const uint64_t min = MinClockLocked();
      clock_.resize(size_t(t) + 1, min == std::numeric_limits<uint64_t>::max() ? 0 : min);
      left_.resize(size_t(t) + 1, false);
    }
    clock_[size_t(t)] = std::max(clock_[size_t(t)], clock);
    if (leave) left_[size_t(t)] = true;
    const uint64_t min = MinClockLocked();
    auto end = parked_.upper_bound(min);
    for (auto it = parked_.begin(); it != end; ++it) ready.push_back(std::move(it->second.fn));
    parked_.erase(parked_.begin(), end);
  }
  for (auto& fn : ready) fn(true);
}

void ClockGate::WhenAllowed(uint64_t clock, std::function<void(bool)> fn) {
  WhenAllowed(clock, std::move(fn), Clock::TimePoint::max(), {});
}

void ClockGate::WhenAllowed(uint64_t clock, std::function<void(bool)> fn, Clock::TimePoint expires,
                            std::function<void(const std::string&)> on_expired) {
  const uint64_t needed = Needed(clock);
  {
    MutexLock lock(mu_);
    if (!closed_ && needed > MinClockLocked()) {
      const bool expiring = on_expired && expires != Clock::TimePoint::max();
      parked_.emplace(needed,
                      Parked{clock, std::move(fn), expiring ? expires : Clock::TimePoint::max(),
                             std::move(on_expired)});
      if (expiring) {
        if (!expirer_.joinable()) expirer_ = NamedThread("clock-expiry", [this] { ExpireLoop(); });
        expiry_cv_.notify_all();
      }
      return;
    }
  }
  fn(true);
}

std::string ClockGate::WaitingFor(uint64_t clock) const {
  MutexLock lock(mu_);
  return WaitingForLocked(clock);
}

// Trainers' clocks are (epoch << 32) | pushes this epoch.
std::string ClockText(uint64_t clock) {
  return "epoch " + std::to_string(clock >> 32) + " push " + std::to_string(clock & 0xffffffffu);
}

std::string ClockGate::WaitingForLocked(uint64_t clock) const {
  const uint64_t needed = Needed(clock);
  std::string out;
  for (size_t t = 0; t < clock_.size(); ++t) {
    if (left_[t] || clock_[t] >= needed) continue;
    if (!out.empty()) out += ", ";
    out += "trainer " + std::to_string(t) + " (at " + ClockText(clock_[t]) + "; " +
           ClockText(needed) + " needed)";
  }
  return out.empty() ? "no trainer" : out;
}

// Answers parked pulls whose expiry has passed, with what they waited for.
void ClockGate::ExpireLoop() {
  MutexLock lock(mu_);
  while (!stopping_) {
    auto next = Clock::TimePoint::max();
    std::vector<std::pair<std::function<void(const std::string&)>, std::string>> due;
    const auto now = time_->Now();
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (it->second.expires <= now) {
        due.emplace_back(std::move(it->second.on_expired), WaitingForLocked(it->second.clock));
        it = parked_.erase(it);
      } else {
        next = std::min(next, it->second.expires);
        ++it;
      }
    }
    if (!due.empty()) {
      lock.Unlock();
      for (auto& [fn, why] : due) fn(why);
      lock.Lock();
      continue;
    }
    if (next == Clock::TimePoint::max())
      lock.Wait(expiry_cv_);
    else
      time_->WaitUntil(lock, expiry_cv_, next);
  }
}

void ClockGate::Close() {
  std::multimap<uint64_t, Parked> parked;
  {
    MutexLock lock(mu_);
    closed_ = true;
    parked.swap(parked_);
  }
  for (auto& [_, p] : parked) p.fn(false);
}

}  // namespace adam::ps
