// The parameter server process.
#include "param_server/main.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include "core/event.h"
#include "core/periodic.h"
#include "core/signals.h"
#include "metrics/metrics.h"
#include "model/layout.h"
#include "net/grpc.h"
#include "param_server/checkpoint.h"
#include "param_server/clock_gate.h"
#include "param_server/param_service.h"
#include "param_server/replica_service.h"
#include "param_server/routing.h"
#include "spec/manifest_watch.h"
#include "topology/topology.h"
#include "update/update_plan.h"

namespace adam::ps {

namespace {

// Fills `initial` from this server's checkpoint, copying it first from `restore_from` when the
// state directory has none. Without a state directory: nothing restored.
StatusOr<Restored> RestoreState(const MainOptions& options, const CheckpointOptions& copt,
                                const shard::ShardMap& store_map, const shard::ShardMap& map,
                                std::vector<float>* initial) {
  if (options.state_dir.empty()) return Restored{};
  if (!options.restore_from.empty()) {
    bool have = false;
    std::error_code ec;
    for (const auto& de : std::filesystem::directory_iterator(options.state_dir, ec))
      have |= de.path().extension() == ".adam";
    if (!have) {
      auto n = FetchCheckpoint(*options.transport, options.restore_from, uint32_t(options.index),
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
  const auto restore_start = std::chrono::steady_clock::now();
  ADAM_ASSIGN_OR_RETURN(Restored restored, RestoreCheckpoint(copt, held));
  for (const auto& [id, s] : restored.shards) {
    const auto& sh = map.shards()[id];
    std::copy(s.values.begin(), s.values.end(), initial->begin() + sh.offset);
  }
  if (restored.generation > 0) {
    spdlog::info(
        "restored {} shards from checkpoint {} ({} epochs finished) in {:.2f} s",
        restored.shards.size(), restored.file, restored.epochs,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - restore_start).count());
    EmitEvent({{"event", "restored"},
               {"generation", restored.generation},
               {"file", restored.file},
               {"shards", restored.shards.size()},
               {"epochs", restored.epochs}});
  }
  return restored;
}

CheckpointMetrics CheckpointMetricsIn(metrics::MetricsServer& reg) {
  return {&reg.Counter("adam_ps_checkpoint_flushes_total", "Checkpoints written"),
          &reg.Counter("adam_ps_checkpoint_bytes_total", "Checkpoint bytes written"),
          &reg.Histogram("adam_ps_checkpoint_flush_seconds", "Checkpoint flush duration",
                         {0.01, 0.1, 1, 10, 60}),
          &reg.Gauge("adam_ps_checkpoint_last_success_timestamp_seconds",
                     "Unix time of the last complete checkpoint"),
          &reg.Gauge("adam_ps_checkpoint_generation", "Generation of the newest checkpoint")};
}

ParamServiceMetrics ServiceMetricsIn(metrics::MetricsServer& reg) {
  return {&reg.Counter("adam_ps_pushes_total", "Push requests applied"),
          &reg.Counter("adam_ps_push_bytes_total", "Weight-delta bytes applied"),
          &reg.Counter("adam_ps_dense_update_bytes_total",
                       "Activation and error bytes received for dense layers"),
          &reg.Counter("adam_ps_pull_bytes_total", "Parameter bytes served"),
          &reg.Histogram("adam_ps_pull_wait_seconds", "Time pulls waited for the consistency model",
                         {0.001, 0.01, 0.1, 1, 10})};
}

// The gauges and counters read from the server's parts once a second (Sample).
class SampledMetrics {
 public:
  SampledMetrics(metrics::MetricsServer& reg, const ParamStore* store, const ClockGate* gate)
      : store_(store),
        gate_(gate),
        queue_depth_(
            reg.Gauge("adam_ps_queue_depth", "Updates and reads queued to the shard workers")),
        applied_(reg.Counter("adam_ps_applied_bytes_total",
                             "Update payload bytes applied by the shard workers")),
        parked_(reg.Gauge("adam_ps_parked_pulls", "Pulls held back by the consistency model")),
        spread_(
            reg.Gauge("adam_ps_clock_spread", "Pushes between the fastest and slowest trainer")),
        map_version_(reg.Gauge("adam_ps_shard_map_version",
                               "Version of the controller's shard map this server acts on")),
        primaries_(reg.Gauge("adam_ps_primary_shards", "Shards this server is the primary of")),
        forwarded_(reg.Counter("adam_ps_forwarded_bytes_total",
                               "Shard bytes forwarded to the shards' other copies")),
        heartbeats_(reg.Counter("adam_ps_controller_heartbeats_total",
                                "Heartbeats the controller leader accepted")),
        lag_(reg.Gauge("adam_ps_replication_lag_seconds",
                       "0 when every copy of this server's primary shards got the last forward "
                       "round's versions, else seconds since a round last left them all current")) {
  }

  // With copies: the routing, forwarding and controller-link series too.
  void AddCopies(const Routing* routing, const Forwarder* forwarder, const ControllerLink* link) {
    routing_ = routing;
    forwarder_ = forwarder;
    link_ = link;
  }

  // Called by one thread at a time (the caller, then the sampler).
  void Sample() {
    queue_depth_.Set(double(store_->queue_depth()));
    const uint64_t now = store_->applied_bytes();
    applied_.Increment(double(now - applied_seen_));
    applied_seen_ = now;
    parked_.Set(double(gate_->parked()));
    spread_.Set(double(gate_->Spread()));
    if (!link_) return;
    map_version_.Set(double(routing_->version()));
    primaries_.Set(routing_->primaries());
    forwarded_.Increment(double(forwarder_->forwarded_bytes() - forwarded_seen_));
    forwarded_seen_ = forwarder_->forwarded_bytes();
    lag_.Set(forwarder_->lag_seconds());
    heartbeats_.Increment(double(link_->heartbeats() - heartbeats_seen_));
    heartbeats_seen_ = link_->heartbeats();
  }

 private:
  const ParamStore* store_;
  const ClockGate* gate_;
  const Routing* routing_ = nullptr;
  const Forwarder* forwarder_ = nullptr;
  const ControllerLink* link_ = nullptr;
  prometheus::Gauge& queue_depth_;
  prometheus::Counter& applied_;
  prometheus::Gauge& parked_;
  prometheus::Gauge& spread_;
  prometheus::Gauge& map_version_;
  prometheus::Gauge& primaries_;
  prometheus::Counter& forwarded_;
  prometheus::Counter& heartbeats_;
  prometheus::Gauge& lag_;
  uint64_t applied_seen_ = 0, forwarded_seen_ = 0, heartbeats_seen_ = 0;
};

// Starts the checkpointer into `*checkpointer` (and its copies to --checkpoint-peer).
void StartCheckpointer(const MainOptions& options, metrics::MetricsServer& reg, ParamStore* store,
                       BufferPool* pool, CheckpointOptions* copt, const Restored& restored,
                       std::optional<Checkpointer>* checkpointer) {
  if (!options.checkpoint_peer.empty()) {
    auto& copied = reg.Counter("adam_ps_checkpoint_peer_files_total",
                               "Checkpoint files copied to the peer over the replication address");
    copt->after_flush = [&copied, checkpointer, peer = options.checkpoint_peer,
                         sender = std::make_shared<PeerSender>(*options.transport,
                                                               options.checkpoint_peer,
                                                               uint32_t(options.index))] {
      auto n = sender->Send(**checkpointer);
      if (!n.ok()) {
        spdlog::warn("{}", n.status().message());
        return;
      }
      copied.Increment(double(*n));
      EmitEvent({{"event", "checkpoint_copied"},
                 {"peer", peer},
                 {"generation", (*checkpointer)->generation()},
                 {"files", *n}});
    };
  }
  checkpointer->emplace(store, pool, *copt, restored, CheckpointMetricsIn(reg));
  (*checkpointer)->Start();
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

// The last checkpoint, once serving has stopped: no background flush (or peer copy) from here
// on, then the last updates before the process goes. Exit code 1 when it fails.
int FinalFlush(Checkpointer& checkpointer, const CheckpointOptions& copt) {
  checkpointer.Stop();
  auto g = checkpointer.Flush();
  if (!g.ok()) {
    spdlog::error("final checkpoint failed: {}", g.status().message());
    return 1;
  }
  if (*g > 0 && copt.after_flush) copt.after_flush();
  return 0;
}

// Serves the store until SIGINT/SIGTERM: the parameter service, the replication service on the
// second address, with copies the controller link and the forwarder, metrics, and a last
// checkpoint on the way out.
int Serve(const spec::AdamJob& job, const MainOptions& options, const update::JobLayout& derived,
          CheckpointOptions copt, const Restored& restored, ParamStore* store, bool pinned) {
  LogHolding(derived, *store);
  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  auto metrics = metrics::MetricsServer::Start(host, options.metrics_port);
  if (!metrics.ok()) {
    spdlog::error("{}", metrics.status().message());
    return 1;
  }
  auto& reg = **metrics;
  reg.Gauge("adam_ps_shards", "Shards held by this parameter server")
      .Set(double(store->shard_ids().size()));
  reg.Gauge("adam_cpu_pinned", "1 when this role's threads are pinned to cores of its own, else 0")
      .Set(pinned ? 1 : 0);
  reg.Gauge("adam_ps_parameters", "Parameters held by this parameter server")
      .Set(double(store->total_floats()));
  ClockGate gate(job.roles.trainer.replicas, job.training.consistency, job.training.max_staleness);
  // Trainers scaled on a cluster: the job's manifest (its ConfigMap) has the new count.
  const auto follower = spec::FollowTrainerCount(options.job_path, gate.trainers(),
                                                 [&gate](int n) { gate.SetTrainers(n); });
  BufferPool pool;
  std::optional<Checkpointer> checkpointer;
  if (!options.state_dir.empty())
    StartCheckpointer(options, reg, store, &pool, &copt, restored, &checkpointer);
  ParamService service(store, &gate, &derived.plan, options.index, &pool, ServiceMetricsIn(reg));
  ReplicaService replica(checkpointer ? &*checkpointer : nullptr, uint32_t(options.index),
                         options.state_dir.empty() ? "" : options.state_dir + "/peers");
  std::vector<net::ExtraListener> extra;
  if (!options.replication_listen.empty())
    extra.push_back({"replication_port", options.replication_listen, {&replica}});
  SampledMetrics sampled(reg, store, &gate);
  Routing routing(uint32_t(options.index));
  std::optional<ControllerLink> link;
  std::optional<Forwarder> forwarder;
  std::function<void(int, const std::vector<int>&)> on_ready;
  if (!options.controller.empty()) {
    replica.AcceptForwards(store, &routing);
    service.RequirePrimary(&routing);
    link.emplace(options.transport, uint32_t(options.index), options.controller, &routing, store);
    forwarder.emplace(options.transport, uint32_t(options.index), &routing, store,
                      options.forward_interval);
    if (job.roles.parameter_server.acknowledge == spec::Acknowledge::kQuorum)
      service.RequireQuorum(&*forwarder);
    sampled.AddCopies(&routing, &*forwarder, &*link);
    on_ready = [&](int port, const std::vector<int>& extra_ports) {
      // The machine label for anti-affinity: the Kubernetes node (downward API), when given.
      // Locally every server shares one machine, and copies only avoid sharing a server.
      const char* node = std::getenv("ADAM_NODE_NAME");
      const std::string& repl = options.replication_listen;
      link->SetAddresses({host + ":" + std::to_string(port),
                          repl.substr(0, repl.rfind(':')) + ":" + std::to_string(extra_ports.at(0)),
                          node ? node : ""});
    };
    spdlog::info("copies: {} per shard; failover by the controller at {} members",
                 job.roles.parameter_server.copies, options.controller.size());
  }
  // Sampled gauges: now, then once a second.
  sampled.Sample();
  Periodic sampler(std::chrono::seconds(1), [&] { sampled.Sample(); });
  // Pushes waiting for a quorum are answered (UNAVAILABLE) before the server shuts down.
  const int rc = net::Serve(
      *options.transport, options.listen, {&service}, reg.port(),
      [&] {
        gate.Close();
        if (forwarder) forwarder->Stop();
      },
      extra, on_ready);
  if (link) link->Stop();
  if (forwarder) forwarder->Stop();
  sampler.Stop();
  if (checkpointer && FinalFlush(*checkpointer, copt) != 0) return 1;
  return rc;
}

}  // namespace

int Main(const spec::AdamJob& job, const MainOptions& options) {
  BlockTerminationSignals();
  const auto& role = job.roles.parameter_server;
  if (options.index < 0 || options.index >= role.replicas) {
    spdlog::error("--index {} is not below spec.roles.parameterServer.replicas ({})", options.index,
                  role.replicas);
    return 2;
  }
  // With a controller, shards move between servers, so every dense layer travels as weight
  // deltas (routable per shard); every server allocates every shard, so it can take any copy.
  const bool ha = !options.controller.empty();
  if (ha && options.replication_listen.empty()) {
    spdlog::error("--controller needs --replication-listen: copies travel over it");
    return 2;
  }
  auto derived = update::DeriveJobLayout(job, /*routed=*/ha);
  if (!derived.ok()) {
    spdlog::error("{}", derived.status().message());
    return 1;
  }
  const model::ModelLayout& layout = derived->layout;
  const shard::ShardMap& map = derived->map;
  std::optional<shard::ShardMap> all_here;
  if (ha) {
    auto m = map.WithServers(std::vector<int>(map.shards().size(), options.index));
    if (!m.ok()) {
      spdlog::error("{}", m.status().message());
      return 1;
    }
    all_here.emplace(std::move(*m));
  }
  const shard::ShardMap& store_map = ha ? *all_here : map;
  // Every server derives the same initial vector from the job's seed and keeps its shards; a
  // checkpoint, when there is one, overrides them.
  std::vector<float> initial(size_t(layout.num_params()));
  layout.InitParams(job.training.seed, initial.data());
  CheckpointOptions copt;
  copt.dir = options.state_dir;
  copt.server = uint32_t(options.index);
  copt.num_params = layout.num_params();
  copt.interval = std::chrono::milliseconds(role.persistence.interval_ms);
  copt.debug_pause_mid_flush = options.debug_flush_pause;
  auto restored = RestoreState(options, copt, store_map, map, &initial);
  if (!restored.ok()) {
    spdlog::error("{}", restored.status().message());
    return 1;
  }
  StoreOptions so;
  so.threads = options.threads;
  so.bind = options.bind;
  if (so.bind) {
    if (const auto pin = topology::DecidePinningHere(); !pin.pin) {
      spdlog::warn("shard workers not pinned: {}", pin.why);
      so.bind = false;
    }
  }
  ParamStore store(store_map, options.index, initial.data(), so);
  for (auto& [id, s] : restored->shards) {
    store.RestoreVersion(id, s.version);
    s.values = {};
  }
  store.RaiseEpochs(restored->epochs);
  initial = {};
  return Serve(job, options, *derived, std::move(copt), *restored, &store, so.bind);
}

}  // namespace adam::ps
