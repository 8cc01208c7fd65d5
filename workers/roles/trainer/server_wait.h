// ServerWait: how a trainer's client waits for a server it cannot reach (a parameter server
// without copies, or the data server, restarting under its old address): asked again every
// 100 ms, a log line each second, a gauge (1 while waiting) and a counter of seconds waited, and
// a bound after which the caller fails naming the server. One per call; not thread-safe.
#pragma once

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <string>
#include <thread>

namespace adam::trainer {

class ServerWait {
 public:
  using Clock = std::chrono::steady_clock;

  ServerWait(std::chrono::milliseconds bound, prometheus::Counter* waits,
             prometheus::Gauge* waiting)
      : bound_(bound), waits_(waits), waiting_(waiting) {}

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
    const auto now = Clock::now();
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
    const auto pause = std::chrono::milliseconds(100);
    std::this_thread::sleep_for(pause);
    waited_ = true;
    if (waits_) waits_->Increment(std::chrono::duration<double>(pause).count());
    return true;
  }

  std::string Expired() const {
    return fmt::format("not back within {:g} s", double(bound_.count()) / 1000);
  }

 private:
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - began_).count(); }

  const std::chrono::milliseconds bound_;
  prometheus::Counter* const waits_;
  prometheus::Gauge* const waiting_;
  const Clock::time_point began_ = Clock::now();
  Clock::time_point next_note_ = began_;
  bool waited_ = false;
};

}  // namespace adam::trainer
