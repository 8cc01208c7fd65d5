// Each role's Prometheus endpoint: a prometheus-cpp registry served on host:port at /metrics.
// Families are created once at start-up from the role's thread; counters and gauges themselves
// are thread-safe to update.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace prometheus {
class Exposer;
}

namespace adam::metrics {

class MetricsServer {
 public:
  // Serves /metrics on `host:port` (port 0 = any free port); a host that is a name rather than an
  // IPv4 address serves on every interface. Fails naming the address.
  static StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port);
  ~MetricsServer();

  int port() const { return port_; }
  prometheus::Registry& registry() { return *registry_; }

  // A counter `name` with `help` and no labels, registered once.
  prometheus::Counter& Counter(const std::string& name, const std::string& help);
  prometheus::Gauge& Gauge(const std::string& name, const std::string& help);
  // A histogram with the given bucket upper bounds (base units, ascending).
  prometheus::Histogram& Histogram(const std::string& name, const std::string& help,
                                   const std::vector<double>& buckets);

 private:
  MetricsServer() = default;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace adam::metrics
