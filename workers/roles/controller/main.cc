#include "controller/main.h"

#include <spdlog/spdlog.h>

#include "controller/controller.h"
#include "controller/member.h"
#include "controller/shard_state.h"
#include "core/role.h"
#include "core/signals.h"
#include "model/layout.h"
#include "net/grpc.h"
#include "shard/shard_map.h"
#include "spec/manifest_watch.h"
#include "update/update_plan.h"

namespace adam::controller {

namespace {

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
  std::map<raft::NodeId, std::string> members;
  for (const spec::ControllerMember& m : options.members) members[m.id] = m.address;
  if (!members.count(options.id)) {
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
  auto controller = Controller::Open(OptionsOf(job, options, members, derived->map));
  if (!controller.ok()) {
    spdlog::error("controller: {}", controller.status().message());
    return 1;
  }
  // The count the manifest asks for, now and whenever it changes: the leader moves copies to
  // servers that join and off servers that leave.
  Controller* c = controller->get();
  c->SetServersWanted(job.roles.parameter_server.replicas);
  Member member(std::move(*controller), members.at(options.id), options.metrics_port,
                options.transport);
  auto follow = spec::FollowParamServerCount(options.job_path, job.roles.parameter_server.replicas,
                                             [c](int n) { c->SetServersWanted(n); });
  return ServeUntilSignalled(member);
}

}  // namespace adam::controller
