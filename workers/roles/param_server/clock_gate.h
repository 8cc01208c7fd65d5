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
// thread whose push releases it. A pull parked with an expiry (its caller's deadline) that is
// still held back then is answered by the gate's own timer thread with the trainers it waited
// for, so a trainer that died is named instead of a bare deadline; expiries are on the gate's
// Clock (tests: a FakeClock). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/mutex.h"
#include "spec/adamjob.h"

namespace adam::ps {

// "epoch E push P" for a trainer's clock.
std::string ClockText(uint64_t clock);

class ClockGate {
 public:
  // `clock` (not owned) times the expiries.
  ClockGate(int trainers, spec::Consistency mode, int max_staleness, Clock* clock = Clock::Real());
  ~ClockGate();
  ClockGate(const ClockGate&) = delete;
  ClockGate& operator=(const ClockGate&) = delete;

  // Whether trainer `t` may push: below the trainer count; in async mode below kMaxTrainers,
  // since a trainer added to a running job may reach a server before the job's new manifest
  // does (async pulls wait for no one, so an unknown trainer holds nothing back).
  bool Admits(int t) const;
  static constexpr int kMaxTrainers = 4096;  // spec.roles.trainer.replicas' bound

  // Records trainer `t`'s clock (kept monotone) or its leaving, then runs every parked pull this
  // allows. `t` must be admitted (Admits); one beyond the count joins as SetTrainers adds one.
  void Advance(int t, uint64_t clock, bool leave);

  // The job's trainers from now on (scaled on a cluster). A trainer added joins at the clock the
  // active ones have reached, so no pull waits for what it never pushed; one removed leaves.
  // Trainers removed and added again rejoin the same way. Runs the pulls this allows.
  void SetTrainers(int n);

  // Runs `fn(true)` now when a pull at `clock` is allowed, otherwise parks it until it is. On
  // Close, parked continuations run with `fn(false)`.
  void WhenAllowed(uint64_t clock, std::function<void(bool)> fn);
  // The same, but a pull still parked at `expires` is removed and `on_expired` runs instead of
  // `fn`, with what it waited for (WaitingFor).
  void WhenAllowed(uint64_t clock, std::function<void(bool)> fn, Clock::TimePoint expires,
                   std::function<void(const std::string&)> on_expired);
  // The active trainers a pull at `clock` waits for, clocks as (epoch << 32) | pushes:
  // "trainer 1 (at epoch 2 push 57; epoch 2 push 60 needed)".
  std::string WaitingFor(uint64_t clock) const;

  // Releases every parked pull with fn(false); later pulls run at once (fn(true)).
  void Close();

  // The clock every active trainer has reached (UINT64_MAX when none is active).
  uint64_t MinClock() const;
  // The largest clock minus the smallest, over active trainers: how far apart they are.
  uint64_t Spread() const;
  uint64_t Needed(uint64_t clock) const;
  size_t parked() const;
  int trainers() const;
  // The clock expiries are on: a pull's caller times its wait on it too.
  Clock* clock() const { return time_; }

 private:
  struct Parked {
    uint64_t clock = 0;
    std::function<void(bool)> fn;
    Clock::TimePoint expires = Clock::TimePoint::max();
    std::function<void(const std::string&)> on_expired;
  };
  uint64_t MinClockLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string WaitingForLocked(uint64_t clock) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLoop();
  spec::Consistency mode_;
  uint64_t staleness_;
  Clock* const time_;  // (clock_ is the trainers' clocks)
  // The job's trainers (clock_ and left_ may be longer). Written under mu_; read without it on
  // every push (Admits): relaxed is enough, as it orders nothing else, and a push admitted just
  // before a change is one that came before it (Advance takes mu_ and sizes clock_ itself).
  std::atomic<int> trainers_;
  mutable Mutex mu_;
  std::vector<uint64_t> clock_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> left_ ABSL_GUARDED_BY(mu_);
  std::multimap<uint64_t, Parked> parked_ ABSL_GUARDED_BY(mu_);  // needed clock -> continuation
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // the destructor runs
  std::condition_variable expiry_cv_;           // a pull with an expiry parked, or stopping_
  std::thread expirer_ ABSL_GUARDED_BY(mu_);    // started with the first pull parked with an expiry
};

}  // namespace adam::ps
