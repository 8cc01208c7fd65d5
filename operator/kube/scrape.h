// Reading a pod's Prometheus metrics: how the operator learns a job's epoch, test accuracy and
// throughput for its status. The text-format parser takes network input: bad text is an error
// naming the line, never a crash (fuzzed by tests/fuzz/prometheus_text). Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/mutex.h"
#include "core/status.h"

namespace adam::kube {

// Samples of the Prometheus text exposition format: "name" or "name{labels}" -> value. Comments
// and blank lines are skipped; timestamps are ignored.
StatusOr<std::map<std::string, double>> ParsePrometheusText(const std::string& text);

class MetricsSource {
 public:
  virtual ~MetricsSource() = default;
  // GET http://host:port/metrics, parsed; UNAVAILABLE when the pod does not answer in time.
  virtual StatusOr<std::map<std::string, double>> Scrape(const std::string& host, int port) = 0;
};

// Over HTTP with a 1 s timeout.
std::unique_ptr<MetricsSource> NewHttpMetricsSource();

// Many pods' /metrics, scraped in the background so that a caller never waits for a pod's
// answer (a pod whose address black-holes costs the source's timeout, on a scrape thread).
// Latest() returns what the last scrapes found and keeps the pod on the list: it is scraped
// every `period` until nobody asked for it for three periods. Thread-safe.
class MetricsCache {
 public:
  struct Sample {
    std::map<std::string, double> values;
    Clock::TimePoint at;  // when the answer came
  };

  // `source` and `clock` must outlive the cache; `threads` scrapes run at once. Periods, ages
  // and the samples' times are read on `clock`.
  static constexpr int kThreads = 4;
  MetricsCache(MetricsSource* source, std::chrono::milliseconds period, int threads = kThreads,
               Clock* clock = Clock::Real());
  ~MetricsCache();

  // The newest two samples of the pod `key` (a uid) at host:port, newest first; empty until the
  // first answer. A changed address starts the pod's history again.
  std::vector<Sample> Latest(const std::string& key, const std::string& host, int port);
  uint64_t scrapes() const;

 private:
  struct Target {
    std::string host;
    int port = 0;
    Clock::TimePoint asked, due;
    bool in_flight = false;
    std::deque<Sample> samples;  // newest first, at most two
  };
  void Run();

  MetricsSource* source_;
  Clock* clock_;
  const std::chrono::milliseconds period_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Target> targets_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t scrapes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

}  // namespace adam::kube
