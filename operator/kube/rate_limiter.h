// A token bucket of API requests, as client-go's: `qps` tokens a second, at most `burst` saved
// up; Acquire blocks until one is free. Time is read and waited on a Clock, so tests move it by
// hand. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>

#include "core/clock.h"
#include "core/mutex.h"

namespace adam::kube {

class RateLimiter {
 public:
  // qps <= 0: no limit; a qps below one an hour is one an hour. The bucket starts full. `clock`
  // must outlive the limiter.
  RateLimiter(double qps, int burst, Clock* clock = Clock::Real());

  // Takes a token, waiting (on the clock) until one is free; returns how long it waited.
  std::chrono::duration<double> Acquire();

 private:
  const Clock::Duration interval_;   // one token's worth of time, 1 / qps (whole ticks: exact);
                                     // zero: no limit
  const Clock::Duration tolerance_;  // (burst - 1) intervals: how far ahead requests may run
  Clock* const clock_;
  Mutex mu_;
  std::condition_variable cv_;  // never notified: a wait ends at its deadline
  // When the bucket is full again (GCRA's theoretical arrival time): each request moves it one
  // interval on, and a request may go once it is at most `tolerance_` ahead of now.
  Clock::TimePoint full_at_ ABSL_GUARDED_BY(mu_);
};

}  // namespace adam::kube
