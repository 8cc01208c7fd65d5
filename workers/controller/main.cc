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
  const auto& role = job.roles.parameter_server;
  ControllerOptions co;
  co.raft.id = options.id;
  co.raft.peers = *members;
  co.raft.dir = options.state_dir;
  co.raft.cluster_id =
      options.cluster_id.empty() ? job.name_space + "/" + job.name : options.cluster_id;
  co.raft.tick = std::chrono::milliseconds(options.tick_ms);
  co.raft.election_ticks = options.election_ticks;
  co.raft.heartbeat_ticks = std::max(1, options.election_ticks / 10);
  co.raft.seed = std::hash<std::string>{}(job.name);
  co.bootstrap = MakeBootstrap(derived->map, role.copies);
  co.server_timeout = std::chrono::milliseconds(options.server_timeout_ms);
  co.server_probation = 4 * co.server_timeout;
  co.flap_window = 20 * co.server_timeout;
  auto controller = Controller::Open(co);
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
  auto& term = reg.Gauge("adam_controller_term", "Raft term of this member");
  auto& leader = reg.Gauge("adam_controller_is_leader", "1 while this member is the Raft leader");
  auto& commit = reg.Gauge("adam_controller_commit_index", "Raft commit index");
  auto& applied = reg.Gauge("adam_controller_applied_index", "Raft entries applied");
  auto& log_bytes = reg.Gauge("adam_controller_log_bytes", "Bytes in the Raft log file");
  auto& version = reg.Gauge("adam_controller_map_version", "Version of the shard map");
  auto& alive = reg.Gauge("adam_controller_servers_alive", "Parameter servers marked alive");
  auto& under =
      reg.Gauge("adam_controller_shards_under_replicated",
                "Shards with fewer in-sync copies than spec.roles.parameterServer.copies");
  auto& heartbeats =
      reg.Counter("adam_controller_heartbeats_total", "Heartbeats accepted (leader)");
  auto& failovers = reg.Counter("adam_controller_failovers_total",
                                "Failovers committed for dead parameter servers (leader)");
  auto& restarts = reg.Counter("adam_controller_server_restarts_total",
                               "Parameter servers seen heartbeating as a new process (leader)");
  auto& rebuilt = reg.Counter("adam_controller_copies_rebuilt_total",
                              "New shard copies committed in sync (every member)");
  auto& leader_changes = reg.Counter("adam_controller_leader_changes_total",
                                     "Times this member saw a different leader take over");
  auto& failover_seconds = reg.Histogram(
      "adam_controller_failover_seconds",
      "From a dead parameter server's last heartbeat to the committed map without it (leader)",
      {0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10});
  (*controller)->Start();
  ControllerCounters last;  // the sampler's
  raft::NodeId last_leader = 0;
  Periodic sampler(std::chrono::milliseconds(200), [&] {
    const raft::DriverInfo info = (*controller)->raft_info();
    if (info.leader != 0 && info.leader != last_leader) {
      if (last_leader != 0) leader_changes.Increment();
      last_leader = info.leader;
    }
    for (double sec : (*controller)->TakeFailoverSeconds()) failover_seconds.Observe(sec);
    term.Set(double(info.term));
    leader.Set(info.role == raft::Role::kLeader ? 1 : 0);
    commit.Set(double(info.commit));
    applied.Set(double(info.applied));
    log_bytes.Set(double(info.log_bytes));
    const v1::ControllerState s = (*controller)->state();
    version.Set(double(s.version()));
    int n_alive = 0, n_under = 0;
    for (const auto& sv : s.servers()) n_alive += sv.alive();
    for (const auto& sh : s.shards()) n_under += sh.replicas_size() < int(s.copies());
    alive.Set(n_alive);
    under.Set(n_under);
    const ControllerCounters c = (*controller)->counters();
    heartbeats.Increment(double(c.heartbeats - last.heartbeats));
    failovers.Increment(double(c.failovers - last.failovers));
    rebuilt.Increment(double(c.copies_done - last.copies_done));
    restarts.Increment(double(c.restarts - last.restarts));
    last = c;
  });
  const int rc =
      net::Serve(listen, {(*controller)->controller_service(), (*controller)->raft_service()},
                 reg.port(), [&] { (*controller)->Stop(); });
  sampler.Stop();
  (*controller)->Stop();
  return rc;
}

}  // namespace adam::controller
