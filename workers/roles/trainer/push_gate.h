// PushGate: how far a trainer's workers run ahead of its sync thread. The workers count the
// images they train (Trained); the sync thread waits until a push is due (AwaitDue), pushes and
// pulls, then lets the images that push carried go (Synced). Before each slice of images a worker
// passes Admit, which holds it while the images since the last sync are at the gate's limit:
// pushEvery under sync consistency (no image past a push boundary until that push's pull is
// back), kMaxUnsyncedPushes pushes' worth otherwise (while a push waits out a failover, the
// workers wait too, instead of training thousands of images on weights the next pull replaces).
//
// Close ends the workers' waits for good (the run failed or was stopped); Stop ends the sync
// thread's. Thread-safe.
#pragma once

#include <prometheus/counter.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>

#include "core/clock.h"
#include "core/mutex.h"

namespace adam::trainer {

// Under async and bounded consistency a trainer's workers train on while its sync thread pushes
// and pulls, but never more than this many pushes' worth of images (pushEvery each) ahead of the
// last push: past it they wait for the push (a push held up by a failover holds them up too).
inline constexpr int kMaxUnsyncedPushes = 8;

class PushGate {
 public:
  // A push is due every `push_every` images; `lockstep` (consistency: sync) holds the workers at
  // each push boundary, otherwise at kMaxUnsyncedPushes pushes' worth. `drift_waits` (when given:
  // adam_trainer_drift_waits_total) counts each wait at that bound as it begins.
  PushGate(int64_t push_every, bool lockstep, prometheus::Counter* drift_waits = nullptr);

  // A worker, before its next slice: waits while the images since the last sync are at the limit,
  // until Synced lets enough of them go or Close. True when it was held by the drift limit (not
  // by lockstep): such waits are counted (drift_waits()).
  bool Admit();
  // A worker, after `n` images: counts them, and wakes the sync thread when they make a push due.
  void Trained(int64_t n);

  // The sync thread: waits on `clock` at most `timeout` until a push is due or Stop. True when a
  // push is due and the gate is not stopped.
  bool AwaitDue(Clock* clock, Clock::Duration timeout);
  // After a push and pull that carried the first `seen` images counted: they are let go and the
  // workers held by them wake.
  void Synced(int64_t seen);

  // Ends every worker's wait, now and from now on.
  void Close();
  // Ends the sync thread's wait, now and from now on.
  void Stop();
  bool stopped() const;

  // Images trained since the last sync (a hint: the workers keep counting while it is read).
  int64_t pending() const { return pending_.load(std::memory_order_relaxed); }
  // Times a worker waited at the drift limit.
  int64_t drift_waits() const { return drift_waits_.load(std::memory_order_relaxed); }

 private:
  const int64_t push_every_;
  const bool lockstep_;
  const int64_t limit_;
  prometheus::Counter* const drift_metric_;
  std::atomic<int64_t> pending_{0};      // relaxed: the workers' count, read as a hint
  std::atomic<int64_t> drift_waits_{0};  // relaxed: a count
  mutable Mutex mu_;
  std::condition_variable workers_cv_;  // Synced, Close
  std::condition_variable sync_cv_;     // Trained, Stop
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace adam::trainer
