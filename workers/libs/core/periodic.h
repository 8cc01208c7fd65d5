// A thread that runs a function every `interval` of a Clock (the real one unless given) until
// stopped. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <thread>

#include "core/clock.h"
#include "core/mutex.h"

namespace adam {

class Periodic {
 public:
  // Starts the thread; the first call comes one interval from now, each next one an interval
  // after the previous call ended. `clock` is not owned.
  Periodic(std::chrono::milliseconds interval, std::function<void()> fn,
           Clock* clock = Clock::Real())
      : interval_(interval), fn_(std::move(fn)), clock_(clock), thread_([this] { Run(); }) {}
  ~Periodic() { Stop(); }
  Periodic(const Periodic&) = delete;
  Periodic& operator=(const Periodic&) = delete;

  // Returns once the thread has ended (a call in progress finishes first). Idempotent.
  void Stop() {
    {
      MutexLock l(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    for (;;) {
      {
        MutexLock l(mu_);
        if (clock_->AwaitFor(l, cv_, interval_,
                             [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; }))
          return;
      }
      fn_();
    }
  }

  const std::chrono::milliseconds interval_;
  const std::function<void()> fn_;
  Clock* const clock_;
  Mutex mu_;
  std::condition_variable cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after everything it uses exists
};

}  // namespace adam
