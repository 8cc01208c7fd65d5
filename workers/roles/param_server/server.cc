#include "param_server/server.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include "core/role_events.h"

namespace adam::ps {

namespace {

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

}  // namespace

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

namespace {

// Starts the checkpointer into `*checkpointer` (and its copies to --checkpoint-peer).
void StartCheckpointer(const spec::ParamServerOptions& options, const net::Transport& transport,
                       metrics::MetricsServer& reg, ParamStore* store, BufferPool* pool,
                       CheckpointOptions* copt, const Restored& restored,
                       std::optional<Checkpointer>* checkpointer) {
  if (!options.checkpoint_peer.empty()) {
    auto& copied = reg.Counter("adam_ps_checkpoint_peer_files_total",
                               "Checkpoint files copied to the peer over the replication address");
    copt->after_flush = [&copied, checkpointer, peer = options.checkpoint_peer,
                         sender = std::make_shared<PeerSender>(transport, options.checkpoint_peer,
                                                               uint32_t(options.index))] {
      auto n = sender->Send(**checkpointer);
      if (!n.ok()) {
        spdlog::warn("{}", n.status().message());
        return;
      }
      copied.Increment(double(*n));
      events::Emit(events::CheckpointCopied{
          .peer = peer, .generation = (*checkpointer)->generation(), .files = int64_t(*n)});
    };
  }
  checkpointer->emplace(store, pool, *copt, restored, CheckpointMetricsIn(reg));
  (*checkpointer)->Start();
}

}  // namespace

ParamServer::ParamServer(const spec::AdamJob& job, spec::ParamServerOptions options,
                         RoleProcess process, const update::JobLayout& derived,
                         CheckpointOptions copt, Restored restored, ParamStore* store, bool pinned)
    : job_(job),
      options_(std::move(options)),
      process_(std::move(process)),
      derived_(derived),
      copt_(std::move(copt)),
      restored_(std::move(restored)),
      store_(store),
      pinned_(pinned),
      routing_(uint32_t(options_.index)) {}

ParamServer::~ParamServer() { Stop(); }

Status ParamServer::Start() {
  const std::string host = options_.listen.substr(0, options_.listen.rfind(':'));
  ADAM_ASSIGN_OR_RETURN(metrics_,
                        metrics::MetricsServer::Start(host, options_.common.metrics_port));
  auto& reg = *metrics_;
  reg.Gauge("adam_ps_shards", "Shards held by this parameter server")
      .Set(double(store_->shard_ids().size()));
  reg.Gauge("adam_cpu_pinned", "1 when this role's threads are pinned to cores of its own, else 0")
      .Set(pinned_ ? 1 : 0);
  reg.Gauge("adam_ps_parameters", "Parameters held by this parameter server")
      .Set(double(store_->total_floats()));
  gate_ = std::make_unique<ClockGate>(job_.roles.trainer.replicas, job_.training.consistency,
                                      job_.training.max_staleness, process_.clock);
  // Trainers scaled on a cluster: the job's manifest (its ConfigMap) has the new count.
  follower_ = spec::FollowTrainerCount(options_.common.job, gate_->trainers(),
                                       [gate = gate_.get()](int n) { gate->SetTrainers(n); });
  if (!options_.state_dir.empty())
    StartCheckpointer(options_, *process_.transport, reg, store_, &pool_, &copt_, restored_,
                      &checkpointer_);
  service_ = std::make_unique<ParamService>(store_, gate_.get(), &derived_.plan, options_.index,
                                            &pool_, ServiceMetricsIn(reg));
  replica_ = std::make_unique<ReplicaService>(
      checkpointer_ ? &*checkpointer_ : nullptr, uint32_t(options_.index),
      options_.state_dir.empty() ? "" : options_.state_dir + "/peers");
  sampled_ = std::make_unique<SampledMetrics>(reg, store_, gate_.get());
  if (spec::ControllerOwnsShards(job_)) StartCopies();
  // Sampled gauges: now, then once a second.
  sampled_->Sample();
  sampler_.emplace(std::chrono::seconds(1), [this] { sampled_->Sample(); });
  std::vector<net::ExtraListener> extra;
  if (!options_.replication_listen.empty())
    extra.push_back({"replication_port", options_.replication_listen, {replica_.get()}});
  ADAM_ASSIGN_OR_RETURN(listeners_, net::Listeners::Start(*process_.transport, options_.listen,
                                                          {service_.get()}, extra));
  if (link_) {
    // The machine label for anti-affinity: the Kubernetes node (downward API), when given.
    // Locally every server shares one machine, and copies only avoid sharing a server.
    const char* node = std::getenv("ADAM_NODE_NAME");
    const std::string& repl = options_.replication_listen;
    link_->SetAddresses(
        {host + ":" + std::to_string(listeners_->port()),
         repl.substr(0, repl.rfind(':')) + ":" + std::to_string(listeners_->extra_ports().at(0)),
         node ? node : ""});
  }
  return OkStatus();
}

void ParamServer::StartCopies() {
  replica_->AcceptForwards(store_, &routing_);
  service_->RequirePrimary(&routing_);
  link_.emplace(process_.transport, uint32_t(options_.index),
                spec::MemberAddresses(options_.controller), &routing_, store_);
  // Elastic servers: a server the job no longer wants exits (cleanly, exit code 0) once the
  // controller has moved its copies to the others.
  link_->SetServersWanted(job_.roles.parameter_server.replicas);
  link_->OnRetired([index = options_.index] {
    spdlog::info("the job no longer wants ps-{} and its copies have moved: retiring", index);
    events::Emit(events::Retired{.server = index});
    ::kill(::getpid(), SIGTERM);  // to the process: the main thread waits for it
  });
  ps_follower_ =
      spec::FollowParamServerCount(options_.common.job, job_.roles.parameter_server.replicas,
                                   [link = &*link_](int n) { link->SetServersWanted(n); });
  forwarder_.emplace(process_.transport, uint32_t(options_.index), &routing_, store_,
                     std::chrono::milliseconds(options_.forward_interval_ms));
  if (job_.roles.parameter_server.acknowledge == spec::Acknowledge::kQuorum)
    service_->RequireQuorum(&*forwarder_);
  sampled_->AddCopies(&routing_, &*forwarder_, &*link_);
  spdlog::info("copies: {} per shard; failover by the controller at {} members",
               job_.roles.parameter_server.copies, options_.controller.size());
}

void ParamServer::Stop() {
  if (gate_) gate_->Close();
  if (forwarder_) forwarder_->Stop();
  if (listeners_) listeners_->Shutdown();
  if (link_) link_->Stop();
  if (sampler_) sampler_->Stop();
}

events::Ready ParamServer::ReadyEvent() const {
  return listeners_->ReadyEvent(metrics_ ? metrics_->port() : 0);
}

Status ParamServer::LastCheckpoint() {
  if (!checkpointer_) return OkStatus();
  checkpointer_->Stop();
  auto g = checkpointer_->Flush();
  if (!g.ok()) return g.status().Annotate("final checkpoint failed");
  if (*g > 0 && copt_.after_flush) copt_.after_flush();
  return OkStatus();
}

}  // namespace adam::ps
