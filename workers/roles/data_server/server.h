// The data server as a role: serves a DataSource (DataService) on --listen with its metrics, and
// follows the job's manifest for the trainer count (trainers scaled on a cluster).
#pragma once

#include <memory>
#include <optional>

#include "core/periodic.h"
#include "core/role.h"
#include "data_server/data_service.h"
#include "data_server/data_source.h"
#include "data_server/main.h"
#include "metrics/metrics.h"
#include "net/grpc.h"
#include "net/role_process.h"
#include "spec/manifest_watch.h"
#include "spec/role_options.h"

namespace adam::data_server {

class DataServer final : public Role {
 public:
  DataServer(std::unique_ptr<DataSource> source, int classes, spec::DataServerOptions options,
             RoleProcess process = {});
  ~DataServer() override { Stop(); }
  DataServer(const DataServer&) = delete;
  DataServer& operator=(const DataServer&) = delete;

  Status Start() override;
  void Stop() override;
  events::Ready ReadyEvent() const override;
  int port() const { return listeners_ ? listeners_->port() : 0; }

 private:
  // The series sampled from the source once a second.
  void Sample();

  const std::unique_ptr<DataSource> source_;
  const int classes_;
  const spec::DataServerOptions options_;
  const RoleProcess process_;
  std::unique_ptr<metrics::MetricsServer> metrics_;
  std::unique_ptr<DataService> service_;
  prometheus::Counter* hits_ = nullptr;
  prometheus::Counter* misses_ = nullptr;
  prometheus::Gauge* depth_ = nullptr;
  prometheus::Gauge* trainers_ = nullptr;
  uint64_t hits_seen_ = 0, misses_seen_ = 0;  // sampler thread only
  std::optional<Periodic> sampler_;
  std::unique_ptr<spec::ManifestWatcher> follower_;
  std::optional<net::Listeners> listeners_;
};

}  // namespace adam::data_server
