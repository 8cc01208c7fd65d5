// Reading a pod's Prometheus metrics: how the operator learns a job's epoch, test accuracy and
// throughput for its status. The text-format parser takes network input: bad text is an error
// naming the line, never a crash (fuzzed by tests/fuzz/prometheus_text). Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>

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

}  // namespace adam::kube
