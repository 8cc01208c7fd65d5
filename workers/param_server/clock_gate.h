// ClockGate: the consistency model of one parameter server (Li et al.'s flexible consistency).
//
// Each push carries the trainer's clock (its pushes so far, that one included); a pull carries
// the clock the trainer has reached. A pull at clock c is allowed once every active trainer's
// clock is at least Needed(c):
//   async    0            (never waits; Adam's default)
//   sync     c            (every trainer's c-th push is in before anyone's pull after its c-th)
//   bounded  c - s        (a trainer runs at most s = maxStaleness pushes ahead of the slowest)
// A trainer that leaves (done, or its job share finished) no longer holds anyone back. Clocks are
// learned from pushes (the maximum seen), so a restarted server catches up with the first push of
// each trainer. A held-back pull is parked, not a blocked thread: its continuation runs on the
// thread whose push releases it. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "spec/adamjob.h"

namespace adam::ps {

class ClockGate {
 public:
  ClockGate(int trainers, spec::Consistency mode, int max_staleness);

  // Records trainer `t`'s clock (kept monotone) or its leaving, then runs every parked pull this
  // allows. `t` must be below the trainer count.
  void Advance(int t, uint64_t clock, bool leave);

  // Runs `fn(true)` now when a pull at `clock` is allowed, otherwise parks it until it is. On
  // Close, parked continuations run with `fn(false)`.
  void WhenAllowed(uint64_t clock, std::function<void(bool)> fn);

  // Releases every parked pull with fn(false); later pulls run at once (fn(true)).
  void Close();

  // The clock every active trainer has reached (UINT64_MAX when none is active).
  uint64_t MinClock() const;
  // The largest clock minus the smallest, over active trainers: how far apart they are.
  uint64_t Spread() const;
  uint64_t Needed(uint64_t clock) const;
  size_t parked() const;
  int trainers() const { return int(clock_.size()); }

 private:
  uint64_t MinClockLocked() const;
  spec::Consistency mode_;
  uint64_t staleness_;
  mutable std::mutex mu_;
  std::vector<uint64_t> clock_;   // guarded by mu_
  std::vector<bool> left_;        // guarded by mu_
  std::multimap<uint64_t, std::function<void(bool)>> parked_;  // needed clock -> continuation
  bool closed_ = false;           // guarded by mu_
};

}  // namespace adam::ps
