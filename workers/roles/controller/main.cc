#include "controller/main.h"

#include <spdlog/spdlog.h>

#include "controller/controller.h"
#include "controller/shard_state.h"
#include "core/periodic.h"
#include "core/signals.h"
#include "metrics/metrics.h"
#include "model/layout.h"
#include "net/grpc.h"
#include "shard/shard_map.h"
#include "update/update_plan.h"

namespace adam::controller {

StatusOr<std::map<raft::NodeId, std::string>> ParseMembers(const std::string& members) {
  std::map<raft::NodeId, std::string> out;
  size_t at = 0;
  while (at <= members.size()) {
    const size_t comma = std::min(members.find(',', at), members.size());
    const std::string item = members.substr(at, comma - at);
    const size_t eq = item.find('=');
    char* end = nullptr;
    const unsigned long long id =
        eq == std::string::npos ? 0 : std::strtoull(item.c_str(), &end, 10);
    if (eq == std::string::npos || id == 0 || end != item.c_str() + eq || eq + 1 >= item.size())
      return InvalidArgumentError("--members: '" + item + "' is not ID=HOST:PORT with ID >= 1");
    if (!out.emplace(id, item.substr(eq + 1)).second)
      return InvalidArgumentError("--members: id " + std::to_string(id) + " appears twice");
    at = comma + 1;
  }
  return out;
}

namespace {

// The controller's series, read from its Raft driver and its state by Sample (every 200 ms).
class SampledMetrics {
 public:
  SampledMetrics(metrics::MetricsServer& reg, Controller* controller)
      : controller_(controller),
        term_(reg.Gauge("adam_controller_term", "Raft term of this member")),
        leader_(reg.Gauge("adam_controller_is_leader", "1 while this member is the Raft leader")),
        commit_(reg.Gauge("adam_controller_commit_index", "Raft commit index")),
        applied_(reg.Gauge("adam_controller_applied_index", "Raft entries applied")),
        log_bytes_(reg.Gauge("adam_controller_log_bytes", "Bytes in the Raft log file")),
        version_(reg.Gauge("adam_controller_map_version", "Version of the shard map")),
        alive_(reg.Gauge("adam_controller_servers_alive", "Parameter servers marked alive")),
        under_(
            reg.Gauge("adam_controller_shards_under_replicated",
                      "Shards with fewer in-sync copies than spec.roles.parameterServer.copies")),
        heartbeats_(
            reg.Counter("adam_controller_heartbeats_total", "Heartbeats accepted (leader)")),
        failovers_(reg.Counter("adam_controller_failovers_total",
                               "Failovers committed for dead parameter servers (leader)")),
        restarts_(reg.Counter("adam_controller_server_restarts_total",
                              "Parameter servers seen heartbeating as a new process (leader)")),
        rebuilt_(reg.Counter("adam_controller_copies_rebuilt_total",
                             "New shard copies committed in sync (every member)")),
        leader_changes_(reg.Counter("adam_controller_leader_changes_total",
                                    "Times this member saw a different leader take over")),
        failover_seconds_(reg.Histogram("adam_controller_failover_seconds",
                                        "From a dead parameter server's last heartbeat to the "
                                        "committed map without it (leader)",
                                        {0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10})) {}

  void Sample() {
    const raft::DriverInfo info = controller_->raft_info();
    if (info.leader != 0 && info.leader != last_leader_) {
      if (last_leader_ != 0) leader_changes_.Increment();
      last_leader_ = info.leader;
    }
    for (double sec : controller_->TakeFailoverSeconds()) failover_seconds_.Observe(sec);
    term_.Set(double(info.term));
    leader_.Set(info.role == raft::Role::kLeader ? 1 : 0);
    commit_.Set(double(info.commit));
    applied_.Set(double(info.applied));
    log_bytes_.Set(double(info.log_bytes));
    const v1::ControllerState s = controller_->state();
    version_.Set(double(s.version()));
    int n_alive = 0, n_under = 0;
    for (const auto& sv : s.servers()) n_alive += sv.alive();
    for (const auto& sh : s.shards()) n_under += sh.replicas_size() < int(s.copies());
    alive_.Set(n_alive);
    under_.Set(n_under);
    const ControllerCounters c = controller_->counters();
    heartbeats_.Increment(double(c.heartbeats - last_.heartbeats));
    failovers_.Increment(double(c.failovers - last_.failovers));
    rebuilt_.Increment(double(c.copies_done - last_.copies_done));
    restarts_.Increment(double(c.restarts - last_.restarts));
    last_ = c;
  }

 private:
  Controller* controller_;
  prometheus::Gauge &term_, &leader_, &commit_, &applied_, &log_bytes_, &version_, &alive_, &under_;
  prometheus::Counter &heartbeats_, &failovers_, &restarts_, &rebuilt_, &leader_changes_;
  prometheus::Histogram& failover_seconds_;
  ControllerCounters last_;  // at the last sample
  raft::NodeId last_leader_ = 0;
};

// The member's options: its Raft group from --members, its timings from the command line, the
// first shard map from the job's layout.
ControllerOptions OptionsOf(const spec::AdamJob& job, const MainOptions& options,
                            const std::map<raft::NodeId, std::string>& members,
                            const shard::ShardMap& map) {
  ControllerOptions co;
  co.raft.id = options.id;
  co.raft.peers = members;
  co.raft.dir = options.state_dir;
  co.raft.cluster_id =
      options.cluster_id.empty() ? job.name_space + "/" + job.name : options.cluster_id;
  co.raft.tick = std::chrono::milliseconds(options.tick_ms);
  co.raft.election_ticks = options.election_ticks;
  co.raft.heartbeat_ticks = std::max(1, options.election_ticks / 10);
  co.raft.seed = std::hash<std::string>{}(job.name);
  co.raft.transport = options.transport;
  co.bootstrap = MakeBootstrap(map, job.roles.parameter_server.copies);
  co.server_timeout = std::chrono::milliseconds(options.server_timeout_ms);
  co.server_probation = 4 * co.server_timeout;
  co.flap_window = 20 * co.server_timeout;
  return co;
}

}  // namespace

int Main(const spec::AdamJob& job, const MainOptions& options) {
  BlockTerminationSignals();
  auto members = ParseMembers(options.members);
  if (!members.ok()) {
    spdlog::error("{}", members.status().message());
    return 2;
  }
  if (!members->count(options.id)) {
    spdlog::error("--id {} is not one of --members", options.id);
    return 2;
  }
  if (options.state_dir.empty()) {
    spdlog::error("--state-dir is required: a member must keep its votes and log");
    return 2;
  }
  auto derived = update::DeriveJobLayout(job);
  if (!derived.ok()) {
    spdlog::error("{}", derived.status().message());
    return 1;
  }
  auto controller = Controller::Open(OptionsOf(job, options, *members, derived->map));
  if (!controller.ok()) {
    spdlog::error("controller: {}", controller.status().message());
    return 1;
  }
  const std::string listen = members->at(options.id);
  auto metrics =
      metrics::MetricsServer::Start(listen.substr(0, listen.rfind(':')), options.metrics_port);
  if (!metrics.ok()) {
    spdlog::error("{}", metrics.status().message());
    return 1;
  }
  auto& reg = **metrics;
  SampledMetrics sampled(reg, controller->get());
  (*controller)->Start();
  Periodic sampling(std::chrono::milliseconds(200), [&] { sampled.Sample(); });
  const int rc = net::Serve(*options.transport, listen,
                            {(*controller)->controller_service(), (*controller)->raft_service()},
                            reg.port(), [&] { (*controller)->Stop(); });
  sampling.Stop();
  (*controller)->Stop();
  return rc;
}

}  // namespace adam::controller
