#include "trainer/push_gate.h"

namespace adam::trainer {

PushGate::PushGate(int64_t push_every, bool lockstep, prometheus::Counter* drift_waits)
    : push_every_(push_every),
      lockstep_(lockstep),
      limit_(lockstep ? push_every : kMaxUnsyncedPushes * push_every),
      drift_metric_(drift_waits) {}

bool PushGate::Admit() {
  if (!lockstep_ && pending() < limit_) return false;  // the common case: no lock
  MutexLock lock(mu_);
  const bool drift = !lockstep_;
  if (drift) {
    drift_waits_.fetch_add(1, std::memory_order_relaxed);
    if (drift_metric_) drift_metric_->Increment();
  }
  lock.Await(workers_cv_,
             [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_ || pending() < limit_; });
  return drift;
}

void PushGate::Trained(int64_t n) {
  const int64_t after = pending_.fetch_add(n, std::memory_order_relaxed) + n;
  if (after < push_every_ || after - n >= push_every_) return;
  // Once per push: the lock orders this after the sync thread's look at the count, so the wake-up
  // is not lost between that look and its wait (unlocked, one waited out AwaitDue's timeout).
  MutexLock lock(mu_);
  sync_cv_.notify_one();
}

bool PushGate::AwaitDue(Clock* clock, Clock::Duration timeout) {
  MutexLock lock(mu_);
  clock->AwaitFor(lock, sync_cv_, timeout, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopped_ || pending() >= push_every_;
  });
  return !stopped_ && pending() >= push_every_;
}

void PushGate::Synced(int64_t seen) {
  pending_.fetch_sub(seen, std::memory_order_relaxed);
  MutexLock lock(mu_);
  workers_cv_.notify_all();
}

void PushGate::Close() {
  MutexLock lock(mu_);
  closed_ = true;
  workers_cv_.notify_all();
}

void PushGate::Stop() {
  MutexLock lock(mu_);
  stopped_ = true;
  sync_cv_.notify_all();
}

bool PushGate::stopped() const {
  MutexLock lock(mu_);
  return stopped_;
}

}  // namespace adam::trainer
