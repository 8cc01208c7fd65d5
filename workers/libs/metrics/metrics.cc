// MetricsServer on prometheus-cpp's Exposer (CivetWeb).
#include "metrics/metrics.h"

#include <arpa/inet.h>
#include <prometheus/exposer.h>

namespace adam::metrics {

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host, int port) {
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  m->registry_ = std::make_shared<prometheus::Registry>();
  // CivetWeb binds numeric addresses only: a host name (a pod's DNS name in a cluster) serves
  // on every interface instead.
  in_addr ip{};
  const bool numeric = inet_pton(AF_INET, host.c_str(), &ip) == 1;
  const std::string address =
      (numeric ? host : std::string("0.0.0.0")) + ":" + std::to_string(port);
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/1);
  } catch (const std::exception& e) {
    return UnavailableError("cannot serve metrics on " + address + ": " + e.what());
  }
  m->exposer_->RegisterCollectable(m->registry_);
  auto ports = m->exposer_->GetListeningPorts();
  m->port_ = ports.empty() ? port : ports.front();
  return m;
}

MetricsServer::~MetricsServer() = default;

prometheus::Counter& MetricsServer::Counter(const std::string& name, const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(*registry_).Add({});
}

prometheus::Gauge& MetricsServer::Gauge(const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(*registry_).Add({});
}

prometheus::Histogram& MetricsServer::Histogram(const std::string& name, const std::string& help,
                                                const std::vector<double>& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(*registry_).Add({}, buckets);
}

}  // namespace adam::metrics
