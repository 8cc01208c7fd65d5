// The parameter server process.
#include "param_server/main.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include "core/exit_codes.h"
#include "core/role.h"
#include "core/role_events.h"
#include "core/signals.h"
#include "metrics/metrics.h"
#include "model/layout.h"
#include "net/grpc.h"
#include "net/network_status.h"
#include "param_server/checkpoint.h"
#include "param_server/clock_gate.h"
#include "param_server/param_service.h"
#include "param_server/replica_service.h"
#include "param_server/routing.h"
#include "param_server/server.h"
#include "spec/manifest_watch.h"
#include "topology/topology.h"
#include "update/update_plan.h"

namespace adam::ps {

namespace {

// Fills `initial` from this server's checkpoint, copying it first from `restore_from` when the
// state directory has none. Without a state directory: nothing restored.
StatusOr<Restored> RestoreState(const spec::ParamServerOptions& options, const RoleProcess& process,
                                const CheckpointOptions& copt, const shard::ShardMap& store_map,
                                const shard::ShardMap& map, std::vector<float>* initial) {
  if (options.state_dir.empty()) return Restored{};
  if (!options.restore_from.empty()) {
    bool have = false;
    std::error_code ec;
    for (const auto& de : std::filesystem::directory_iterator(options.state_dir, ec))
      have |= de.path().extension() == ".adam";
    if (!have) {
      auto n = FetchCheckpoint(*process.transport, options.restore_from, uint32_t(options.index),
                               options.state_dir);
      if (!n.ok())
        return Status(n.status().code(), "copying the checkpoint of " + options.restore_from +
                                             ": " + n.status().message());
      spdlog::info("copied {} checkpoint files from {}", *n, options.restore_from);
    }
  }
  std::map<uint32_t, int64_t> held;
  for (const auto& s : store_map.shards())
    if (s.server == options.index) held[s.id] = s.count;
  spdlog::info("looking for checkpoints of {} shards in {}", held.size(), options.state_dir);
  const auto restore_start = copt.clock->Now();
  ADAM_ASSIGN_OR_RETURN(Restored restored, RestoreCheckpoint(copt, held));
  for (const auto& [id, s] : restored.shards) {
    const auto& sh = map.shards()[id];
    std::copy(s.values.begin(), s.values.end(), initial->begin() + sh.offset);
  }
  if (restored.generation > 0) {
    spdlog::info("restored {} shards from checkpoint {} ({} epochs finished) in {:.2f} s",
                 restored.shards.size(), restored.file, restored.epochs,
                 copt.clock->SecondsSince(restore_start));
    events::Emit(events::Restored{.generation = restored.generation,
                                  .file = restored.file,
                                  .shards = int64_t(restored.shards.size()),
                                  .epochs = int(restored.epochs)});
  }
  return restored;
}

// What this server holds, and which dense layers' updates reach it as activations and errors.
void LogHolding(const update::JobLayout& derived, const ParamStore& store) {
  spdlog::info("holding {} of {} shards ({} of {} parameters); {}", store.shard_ids().size(),
               derived.map.shards().size(), store.total_floats(), derived.layout.num_params(),
               store.placement());
  if (!derived.plan.dense().empty()) {
    std::string layers;
    for (const auto& d : derived.plan.dense())
      layers += (layers.empty() ? "" : ", ") + std::to_string(d.layer);
    spdlog::info("dense layers {} send activations and errors", layers);
  }
}

// --replication-network: the second NIC's address (from Multus, through the downward API) with
// --replication-listen's port (7071 when it names none) becomes the replication address.
Status ResolveReplicationNetwork(spec::ParamServerOptions* options, Clock* clock) {
  if (options->replication_network.empty()) return OkStatus();
  auto addr = net::WaitForPodNetworkAddress(options->pod_annotations, options->replication_network,
                                            std::chrono::milliseconds(options->network_wait_ms),
                                            std::chrono::milliseconds(200), clock);
  if (!addr.ok())
    return Status(addr.status().code(), "--replication-network " + options->replication_network +
                                            ": " + addr.status().message());
  const std::string& listen = options->replication_listen;
  const size_t colon = listen.rfind(':');
  options->replication_listen =
      *addr + ":" + (colon == std::string::npos ? "7071" : listen.substr(colon + 1));
  spdlog::info("replication traffic on {} ({})", options->replication_listen,
               options->replication_network);
  return OkStatus();
}

// What the job asks of this server's flags: an index below the job's server count, --controller
// exactly when a controller owns the shards, and then a replication address for the copies.
Status CheckOptions(const spec::AdamJob& job, const spec::ParamServerOptions& options) {
  const int replicas = job.roles.parameter_server.replicas;
  if (options.index < 0 || options.index >= replicas)
    return InvalidArgumentError("--index " + std::to_string(options.index) +
                                " is not below spec.roles.parameterServer.replicas (" +
                                std::to_string(replicas) + ")");
  ADAM_RETURN_IF_ERROR(spec::CheckControllerFlag(job, !options.controller.empty()));
  if (spec::ControllerOwnsShards(job) && options.replication_listen.empty())
    return InvalidArgumentError("--controller needs --replication-listen: copies travel over it");
  return OkStatus();
}

// The shards this server allocates: its own in `map`, or, with a controller
// (spec::ControllerOwnsShards), every shard, since shards move between servers and any of them
// may become a copy here.
StatusOr<shard::ShardMap> StoreMap(const spec::AdamJob& job, const shard::ShardMap& map,
                                   int index) {
  if (!spec::ControllerOwnsShards(job)) return map;
  return map.WithServers(std::vector<int>(map.shards().size(), index));
}

// Shard worker threads, pinned to cores where asked and this machine allows it (the reason is
// logged when it does not).
StoreOptions StoreOptionsOf(const spec::ParamServerOptions& options) {
  StoreOptions so;
  so.threads = options.threads;
  so.bind = !options.no_bind;
  if (so.bind) {
    if (const auto pin = topology::DecidePinningHere(); !pin.pin) {
      spdlog::warn("shard workers not pinned: {}", pin.why);
      so.bind = false;
    }
  }
  return so;
}

}  // namespace

int Main(const spec::AdamJob& job, spec::ParamServerOptions options, const RoleProcess& process) {
  BlockTerminationSignals();
  if (Status st = ResolveReplicationNetwork(&options, process.clock); !st.ok()) {
    spdlog::error("{}", st.message());
    return 1;
  }
  if (Status st = CheckOptions(job, options); !st.ok()) {
    spdlog::error("{}", st.message());
    return kExitInvalid;
  }
  auto derived = update::DeriveJobLayout(job);
  if (!derived.ok()) {
    spdlog::error("{}", derived.status().message());
    return 1;
  }
  const model::ModelLayout& layout = derived->layout;
  const shard::ShardMap& map = derived->map;
  auto store_map = StoreMap(job, map, options.index);
  if (!store_map.ok()) {
    spdlog::error("{}", store_map.status().message());
    return 1;
  }
  // Every server derives the same initial vector from the job's seed and keeps its shards; a
  // checkpoint, when there is one, overrides them.
  std::vector<float> initial(size_t(layout.num_params()));
  layout.InitParams(job.training.seed, initial.data());
  const auto& role = job.roles.parameter_server;
  CheckpointOptions copt;
  copt.dir = options.state_dir;
  copt.server = uint32_t(options.index);
  copt.num_params = layout.num_params();
  copt.interval = std::chrono::milliseconds(role.persistence.interval_ms);
  copt.debug_pause_mid_flush = std::chrono::milliseconds(options.debug_flush_pause_ms);
  copt.clock = process.clock;
  auto restored = RestoreState(options, process, copt, *store_map, map, &initial);
  if (!restored.ok()) {
    spdlog::error("{}", restored.status().message());
    return 1;
  }
  const StoreOptions so = StoreOptionsOf(options);
  ParamStore store(*store_map, options.index, initial.data(), so);
  for (auto& [id, s] : restored->shards) {
    store.RestoreVersion(id, s.version);
    s.values = {};
  }
  store.RaiseEpochs(restored->epochs);
  initial = {};
  ParamServer server(job, std::move(options), process, *derived, std::move(copt),
                     std::move(*restored), &store, so.bind);
  LogHolding(*derived, store);
  const int rc = ServeUntilSignalled(server);
  if (Status st = server.LastCheckpoint(); !st.ok()) {
    spdlog::error("{}", st.message());
    return 1;
  }
  return rc;
}

}  // namespace adam::ps
