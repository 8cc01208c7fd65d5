#include "kube/rate_limiter.h"

#include <algorithm>

namespace adam::kube {
namespace {

Clock::Duration Interval(double qps) {
  if (qps <= 0) return {};
  // At most an hour: 1 / qps of a tiny qps would overflow the clock's nanoseconds.
  return std::chrono::ceil<Clock::Duration>(
      std::chrono::duration<double>(std::min(1.0 / qps, 3600.0)));
}

}  // namespace

RateLimiter::RateLimiter(double qps, int burst, Clock* clock)
    : interval_(Interval(qps)),
      tolerance_(interval_ * (std::max(1, burst) - 1)),
      clock_(clock),
      full_at_(clock->Now()) {}

std::chrono::duration<double> RateLimiter::Acquire() {
  if (interval_ == Clock::Duration::zero()) return {};
  MutexLock lock(mu_);
  const auto start = clock_->Now();
  while (true) {
    const auto now = clock_->Now();
    const auto may_go = full_at_ - tolerance_;
    if (now >= may_go) {
      full_at_ = std::max(full_at_, now) + interval_;
      return now - start;
    }
    clock_->WaitUntil(lock, cv_, may_go);
  }
}

}  // namespace adam::kube
