// ClockGate: per-trainer clocks and parked pulls.
#include "param_server/clock_gate.h"

#include <algorithm>
#include <limits>

#include "core/status.h"

namespace adam::ps {

ClockGate::ClockGate(int trainers, spec::Consistency mode, int max_staleness)
    : mode_(mode),
      staleness_(uint64_t(std::max(0, max_staleness))),
      clock_(size_t(std::max(1, trainers)), 0),
      left_(size_t(std::max(1, trainers)), false) {}

uint64_t ClockGate::Needed(uint64_t clock) const {
  switch (mode_) {
    case spec::Consistency::kAsync: return 0;
    case spec::Consistency::kSync: return clock;
    case spec::Consistency::kBounded: return clock > staleness_ ? clock - staleness_ : 0;
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
  std::lock_guard<std::mutex> lock(mu_);
  return MinClockLocked();
}

uint64_t ClockGate::Spread() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t lo = std::numeric_limits<uint64_t>::max(), hi = 0;
  for (size_t t = 0; t < clock_.size(); ++t)
    if (!left_[t]) lo = std::min(lo, clock_[t]), hi = std::max(hi, clock_[t]);
  return hi >= lo ? hi - lo : 0;
}

size_t ClockGate::parked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return parked_.size();
}

void ClockGate::Advance(int t, uint64_t clock, bool leave) {
  ADAM_CHECK(t >= 0 && size_t(t) < clock_.size());
  std::vector<std::function<void(bool)>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    clock_[size_t(t)] = std::max(clock_[size_t(t)], clock);
    if (leave) left_[size_t(t)] = true;
    const uint64_t min = MinClockLocked();
    auto end = parked_.upper_bound(min);
    for (auto it = parked_.begin(); it != end; ++it) ready.push_back(std::move(it->second));
    parked_.erase(parked_.begin(), end);
  }
  for (auto& fn : ready) fn(true);
}

void ClockGate::WhenAllowed(uint64_t clock, std::function<void(bool)> fn) {
  const uint64_t needed = Needed(clock);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_ && needed > MinClockLocked()) {
      parked_.emplace(needed, std::move(fn));
      return;
    }
  }
  fn(true);
}

void ClockGate::Close() {
  std::multimap<uint64_t, std::function<void(bool)>> parked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    parked.swap(parked_);
  }
  for (auto& [_, fn] : parked) fn(false);
}

}  // namespace adam::ps
