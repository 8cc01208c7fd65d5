// The parameter server as a role: serves its store (ParamService) on --listen and the replication
// service on the second address; with copies it heartbeats the controller (ControllerLink) and
// forwards to its shards' copies (Forwarder); metrics, the write-back checkpointer, and the
// trainer-count follower.
#pragma once

#include <memory>
#include <optional>

#include "core/periodic.h"
#include "core/role.h"
#include "metrics/metrics.h"
#include "net/grpc.h"
#include "net/role_process.h"
#include "param_server/buffer_pool.h"
#include "param_server/checkpoint.h"
#include "param_server/clock_gate.h"
#include "param_server/controller_link.h"
#include "param_server/forwarder.h"
#include "param_server/param_service.h"
#include "param_server/param_store.h"
#include "param_server/replica_service.h"
#include "param_server/routing.h"
#include "spec/adamjob.h"
#include "spec/manifest_watch.h"
#include "spec/role_options.h"
#include "update/update_plan.h"

namespace adam::ps {

class SampledMetrics;

class ParamServer final : public Role {
 public:
  // `job`, `derived` and `store` are not owned and outlive the server; `restored` is what
  // `store` was restored from (the checkpointer's starting point); `pinned`: its shard workers
  // are pinned to cores (a gauge).
  ParamServer(const spec::AdamJob& job, spec::ParamServerOptions options, RoleProcess process,
              const update::JobLayout& derived, CheckpointOptions copt, Restored restored,
              ParamStore* store, bool pinned);
  ~ParamServer() override;
  ParamServer(const ParamServer&) = delete;
  ParamServer& operator=(const ParamServer&) = delete;

  Status Start() override;
  // Pushes waiting for a quorum are answered (UNAVAILABLE), then the services stop.
  void Stop() override;
  events::Ready ReadyEvent() const override;
  // The last checkpoint, once stopped: no background flush (or peer copy) from here on, then
  // the last updates. OK without a state directory.
  Status LastCheckpoint();

 private:
  // With copies: the controller link and the forwarder, the services told to route.
  void StartCopies();

  const spec::AdamJob& job_;
  const spec::ParamServerOptions options_;
  const RoleProcess process_;
  const update::JobLayout& derived_;
  CheckpointOptions copt_;
  const Restored restored_;
  ParamStore* const store_;
  const bool pinned_;
  std::unique_ptr<metrics::MetricsServer> metrics_;
  std::unique_ptr<ClockGate> gate_;
  std::unique_ptr<spec::ManifestWatcher> follower_;
  BufferPool pool_;
  std::optional<Checkpointer> checkpointer_;
  std::unique_ptr<ParamService> service_;
  std::unique_ptr<ReplicaService> replica_;
  std::unique_ptr<SampledMetrics> sampled_;
  Routing routing_;
  std::optional<ControllerLink> link_;
  std::unique_ptr<spec::ManifestWatcher> ps_follower_;  // the server count, told to link_
  std::optional<Forwarder> forwarder_;
  std::optional<Periodic> sampler_;
  std::optional<net::Listeners> listeners_;  // last: stops serving before the rest goes
};

}  // namespace adam::ps
