// The parameter server process.
#include "param_server/main.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
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
#include "topology/topology.h"
#include "update/update_plan.h"

namespace adam::ps {

int Main(const spec::AdamJob& job, const MainOptions& options) {
  BlockTerminationSignals();
  const auto& role = job.roles.parameter_server;
  if (options.index < 0 || options.index >= role.replicas) {
    spdlog::error("--index {} is not below spec.roles.parameterServer.replicas ({})",
                  options.index, role.replicas);
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
  const update::UpdatePlan& plan = derived->plan;
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
  Restored restored;
  if (!options.restore_from.empty() && !options.state_dir.empty()) {
    bool have = false;
    std::error_code ec;
    for (const auto& de : std::filesystem::directory_iterator(options.state_dir, ec))
      have |= de.path().extension() == ".adam";
    if (!have) {
      auto n = FetchCheckpoint(options.restore_from, uint32_t(options.index), options.state_dir);
      if (!n.ok()) {
        spdlog::error("copying the checkpoint of {}: {}", options.restore_from, n.status().message());
        return 1;
      }
      spdlog::info("copied {} checkpoint files from {}", *n, options.restore_from);
    }
  }
  if (!options.state_dir.empty()) {
    std::map<uint32_t, int64_t> held;
    for (const auto& s : store_map.shards())
      if (s.server == options.index) held[s.id] = s.count;
    spdlog::info("looking for checkpoints of {} shards in {}", held.size(), options.state_dir);
    const auto restore_start = std::chrono::steady_clock::now();
    auto r = RestoreCheckpoint(copt, held);
    if (!r.ok()) {
      spdlog::error("{}", r.status().message());
      return 1;
    }
    restored = std::move(*r);
    for (const auto& [id, s] : restored.shards) {
      const auto& sh = map.shards()[id];
      std::copy(s.values.begin(), s.values.end(), initial.begin() + sh.offset);
    }
    if (restored.generation > 0) {
      spdlog::info("restored {} shards from checkpoint {} ({} epochs finished) in {:.2f} s",
                   restored.shards.size(), restored.file, restored.epochs,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - restore_start).count());
      EmitEvent({{"event", "restored"}, {"generation", restored.generation}, {"file", restored.file},
                 {"shards", restored.shards.size()}, {"epochs", restored.epochs}});
    }
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
  for (auto& [id, s] : restored.shards) {
    store.RestoreVersion(id, s.version);
    s.values = {};
  }
  store.RaiseEpochs(restored.epochs);
  initial = {};
  spdlog::info("holding {} of {} shards ({} of {} parameters); {}", store.shard_ids().size(),
               map.shards().size(), store.total_floats(), layout.num_params(), store.placement());
  if (!plan.dense().empty()) {
    std::string layers;
    for (const auto& d : plan.dense()) layers += (layers.empty() ? "" : ", ") + std::to_string(d.layer);
    spdlog::info("dense layers {} send activations and errors", layers);
  }

  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  auto metrics = metrics::MetricsServer::Start(host, options.metrics_port);
  if (!metrics.ok()) {
    spdlog::error("{}", metrics.status().message());
    return 1;
  }
  auto& reg = **metrics;
  reg.Gauge("adam_ps_shards", "Shards held by this parameter server").Set(double(store.shard_ids().size()));
  reg.Gauge("adam_cpu_pinned", "1 when this role's threads are pinned to cores of its own, else 0")
      .Set(so.bind ? 1 : 0);
  reg.Gauge("adam_ps_parameters", "Parameters held by this parameter server").Set(double(store.total_floats()));
  auto& queue_depth = reg.Gauge("adam_ps_queue_depth", "Updates and reads queued to the shard workers");
  auto& applied = reg.Counter("adam_ps_applied_bytes_total",
                               "Update payload bytes applied by the shard workers");
  auto& parked = reg.Gauge("adam_ps_parked_pulls", "Pulls held back by the consistency model");
  auto& spread = reg.Gauge("adam_ps_clock_spread", "Pushes between the fastest and slowest trainer");
  ParamServiceMetrics pm{&reg.Counter("adam_ps_pushes_total", "Push requests applied"),
                         &reg.Counter("adam_ps_push_bytes_total", "Weight-delta bytes applied"),
                         &reg.Counter("adam_ps_dense_update_bytes_total",
                                      "Activation and error bytes received for dense layers"),
                         &reg.Counter("adam_ps_pull_bytes_total", "Parameter bytes served"),
                         &reg.Histogram("adam_ps_pull_wait_seconds",
                                        "Time pulls waited for the consistency model",
                                        {0.001, 0.01, 0.1, 1, 10})};
  ClockGate gate(job.roles.trainer.replicas, job.training.consistency, job.training.max_staleness);
  BufferPool pool;
  std::optional<Checkpointer> checkpointer;
  if (!options.state_dir.empty()) {
    CheckpointMetrics cm{&reg.Counter("adam_ps_checkpoint_flushes_total", "Checkpoints written"),
                         &reg.Counter("adam_ps_checkpoint_bytes_total", "Checkpoint bytes written"),
                         &reg.Histogram("adam_ps_checkpoint_flush_seconds", "Checkpoint flush duration",
                                        {0.01, 0.1, 1, 10, 60}),
                         &reg.Gauge("adam_ps_checkpoint_last_success_timestamp_seconds",
                                    "Unix time of the last complete checkpoint"),
                         &reg.Gauge("adam_ps_checkpoint_generation", "Generation of the newest checkpoint")};
    if (!options.checkpoint_peer.empty()) {
      auto& copied = reg.Counter("adam_ps_checkpoint_peer_files_total",
                                 "Checkpoint files copied to the peer over the replication address");
      copt.after_flush = [&, sender = std::make_shared<PeerSender>(options.checkpoint_peer,
                                                                  uint32_t(options.index))] {
        auto n = sender->Send(*checkpointer);
        if (!n.ok()) {
          spdlog::warn("{}", n.status().message());
          return;
        }
        copied.Increment(double(*n));
        EmitEvent({{"event", "checkpoint_copied"}, {"peer", options.checkpoint_peer},
                   {"generation", checkpointer->generation()}, {"files", *n}});
      };
    }
    checkpointer.emplace(&store, &pool, copt, restored, cm);
    checkpointer->Start();
  }
  ParamService service(&store, &gate, &plan, options.index, &pool, pm);
  ReplicaService replica(checkpointer ? &*checkpointer : nullptr, uint32_t(options.index),
                         options.state_dir.empty() ? "" : options.state_dir + "/peers");
  std::vector<net::ExtraListener> extra;
  if (!options.replication_listen.empty())
    extra.push_back({"replication_port", options.replication_listen, {&replica}});
  Routing routing(uint32_t(options.index));
  std::optional<ControllerLink> link;
  std::optional<Forwarder> forwarder;
  std::function<void(int, const std::vector<int>&)> on_ready;
  if (ha) {
    replica.AcceptForwards(&store, &routing);
    service.RequirePrimary(&routing);
    link.emplace(uint32_t(options.index), options.controller, &routing, &store);
    forwarder.emplace(uint32_t(options.index), &routing, &store, options.forward_interval);
    if (job.roles.parameter_server.acknowledge == spec::Acknowledge::kQuorum)
      service.RequireQuorum(&*forwarder);
    on_ready = [&](int port, const std::vector<int>& extra_ports) {
      // The machine label for anti-affinity: the Kubernetes node (downward API), when given.
      // Locally every server shares one machine, and copies only avoid sharing a server.
      const char* node = std::getenv("ADAM_NODE_NAME");
      const std::string repl = options.replication_listen;
      link->SetAddresses({host + ":" + std::to_string(port),
                          repl.substr(0, repl.rfind(':')) + ":" + std::to_string(extra_ports.at(0)),
                          node ? node : ""});
    };
    spdlog::info("copies: {} per shard; failover by the controller at {} members",
                 job.roles.parameter_server.copies, options.controller.size());
  }

  auto& map_version = reg.Gauge("adam_ps_shard_map_version",
                                "Version of the controller's shard map this server acts on");
  auto& primaries = reg.Gauge("adam_ps_primary_shards", "Shards this server is the primary of");
  auto& forwarded = reg.Counter("adam_ps_forwarded_bytes_total",
                                "Shard bytes forwarded to the shards' other copies");
  auto& heartbeats = reg.Counter("adam_ps_controller_heartbeats_total",
                                 "Heartbeats the controller leader accepted");
  auto& lag = reg.Gauge("adam_ps_replication_lag_seconds",
                        "0 when every copy of this server's primary shards got the last forward "
                        "round's versions, else seconds since a round last left them all current");
  // Sampled gauges: now, then once a second.
  uint64_t applied_seen = 0, forwarded_seen = 0, heartbeats_seen = 0;  // the sampler's
  const auto sample = [&] {
    queue_depth.Set(double(store.queue_depth()));
    const uint64_t now = store.applied_bytes();
    applied.Increment(double(now - applied_seen));
    applied_seen = now;
    parked.Set(double(gate.parked()));
    spread.Set(double(gate.Spread()));
    if (link) {
      map_version.Set(double(routing.version()));
      primaries.Set(routing.primaries());
      forwarded.Increment(double(forwarder->forwarded_bytes() - forwarded_seen));
      forwarded_seen = forwarder->forwarded_bytes();
      lag.Set(forwarder->lag_seconds());
      heartbeats.Increment(double(link->heartbeats() - heartbeats_seen));
      heartbeats_seen = link->heartbeats();
    }
  };
  sample();
  Periodic sampler(std::chrono::seconds(1), sample);
  // Pushes waiting for a quorum are answered (UNAVAILABLE) before the server shuts down.
  const int rc = net::Serve(
      options.listen, {&service}, reg.port(),
      [&] {
        gate.Close();
        if (forwarder) forwarder->Stop();
      },
      extra, on_ready);
  if (link) link->Stop();
  if (forwarder) forwarder->Stop();
  sampler.Stop();
  if (checkpointer) {
    checkpointer->Stop();            // no background flush (or peer copy) from here on
    auto g = checkpointer->Flush();  // the last updates, before the process goes
    if (!g.ok()) {
      spdlog::error("final checkpoint failed: {}", g.status().message());
      return 1;
    }
    if (*g > 0 && copt.after_flush) copt.after_flush();
  }
  return rc;
}

}  // namespace adam::ps
