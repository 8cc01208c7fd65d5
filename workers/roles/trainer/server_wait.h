// ServerWait: how a trainer's client waits for a server it cannot reach (a parameter server
// without copies, or the data server, restarting under its old address): asked again every
// 100 ms, a log line each second, a gauge (1 while waiting) and a counter of seconds waited, and
// a bound after which the caller fails naming the server, all measured on a Clock (the real one
// unless given). One per call; not thread-safe.
#pragma once

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <string>

#include "core/clock.h"

namespace adam::trainer {

class ServerWait {
 public:
  // The tries are `pause` apart. `clock` is not owned.
  ServerWait(std::chrono::milliseconds bound, prometheus::Counter* waits,
             prometheus::Gauge* waiting, Clock* clock = Clock::Real(),
             std::chrono::milliseconds pause = std::chrono::milliseconds(100))
      : bound_(bound),
        pause_(pause),
        waits_(waits),
        waiting_(waiting),
        clock_(clock),
        began_(clock->Now()),
        next_note_(began_) {}

  bool waited() const { return waited_; }

  // The call reached `server` after waiting for it (callers check waited() first, so a call that
  // never waited builds no name).
  void Reached(const std::string& server) {
    if (waiting_) waiting_->Set(0);
    spdlog::info("{} is back after {:.1f} s", server, Seconds());
  }

  // `server` could not be reached (`why`): false once the bound has passed (the caller fails,
  // with Expired() in its message); otherwise notes the wait and pauses before the next try.
  bool Again(const std::string& server, const std::string& why) {
    const auto now = clock_->Now();
    if (now - began_ >= bound_) {
      if (waiting_) waiting_->Set(0);
      return false;
    }
    if (now >= next_note_) {
      if (waiting_) waiting_->Set(1);
      spdlog::warn("waiting for {} ({:.0f} s of {:g} s): {}", server, Seconds(),
                   double(bound_.count()) / 1000, why);
      next_note_ = now + std::chrono::seconds(1);
    }
    clock_->SleepFor(pause_);
    waited_ = true;
    if (waits_) waits_->Increment(std::chrono::duration<double>(pause_).count());
    return true;
  }

  std::string Expired() const {
    return fmt::format("not back within {:g} s", double(bound_.count()) / 1000);
  }

 private:
  double Seconds() const { return clock_->SecondsSince(began_); }

  const std::chrono::milliseconds bound_;
  const std::chrono::milliseconds pause_;
  prometheus::Counter* const waits_;
  prometheus::Gauge* const waiting_;
  Clock* const clock_;
  const Clock::TimePoint began_;
  Clock::TimePoint next_note_;
  bool waited_ = false;
};

}  // namespace adam::trainer
