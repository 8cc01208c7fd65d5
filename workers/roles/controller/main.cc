#include "controller/main.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <optional>

#include "controller/controller.h"
#include "controller/member.h"
#include "controller/shard_state.h"
#include "core/exit_codes.h"
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
ControllerOptions OptionsOf(const spec::AdamJob& job, const spec::ControllerOptions& options,
                            const RoleProcess& process, raft::NodeId id,
                            const std::map<raft::NodeId, std::string>& members,
                            const shard::ShardMap& map) {
  ControllerOptions co;
  co.raft.id = id;
  co.raft.peers = members;
  co.raft.dir = options.state_dir;
  co.raft.cluster_id =
      options.cluster_id.empty() ? job.name_space + "/" + job.name : options.cluster_id;
  co.raft.tick = std::chrono::milliseconds(options.tick_ms);
  co.raft.election_ticks = options.election_ticks;
  co.raft.heartbeat_ticks = std::max(1, options.election_ticks / 10);
  co.raft.seed = std::hash<std::string>{}(job.name);
  co.raft.transport = process.transport;
  co.raft.clock = process.clock;
  co.clock = process.clock;
  co.bootstrap = MakeBootstrap(map, job.roles.parameter_server.copies);
  co.server_timeout = std::chrono::milliseconds(options.server_timeout_ms);
  co.server_probation = 4 * co.server_timeout;
  co.flap_window = 20 * co.server_timeout;
  return co;
}

std::string HostName() {
  char host[256] = {};
  return gethostname(host, sizeof host - 1) == 0 ? host : "";
}

}  // namespace

int Main(const spec::AdamJob& job, const spec::ControllerOptions& options,
         const RoleProcess& process) {
  BlockTerminationSignals();
  const std::optional<uint64_t> id = spec::ResolveMemberId(options.id, HostName());
  if (!id) {
    spdlog::error("--id {}: this host's name ({}) does not end in -N", options.id, HostName());
    return kExitInvalid;
  }
  std::map<raft::NodeId, std::string> members;
  for (const spec::ControllerMember& m : options.members) members[m.id] = m.address;
  if (!members.count(*id)) {
    spdlog::error("--id {} is not one of --members", *id);
    return kExitInvalid;
  }
  if (options.state_dir.empty()) {
    spdlog::error("--state-dir is required: a member must keep its votes and log");
    return kExitInvalid;
  }
  auto derived = update::DeriveJobLayout(job);
  if (!derived.ok()) {
    spdlog::error("{}", derived.status().message());
    return 1;
  }
  auto controller = Controller::Open(OptionsOf(job, options, process, *id, members, derived->map));
  if (!controller.ok()) {
    spdlog::error("controller: {}", controller.status().message());
    return 1;
  }
  // The count the manifest asks for, now and whenever it changes: the leader moves copies to
  // servers that join and off servers that leave.
  Controller* c = controller->get();
  c->SetServersWanted(job.roles.parameter_server.replicas);
  Member member(std::move(*controller), members.at(*id), options.common.metrics_port,
                process.transport);
  auto follow =
      spec::FollowParamServerCount(options.common.job, job.roles.parameter_server.replicas,
                                   [c](int n) { c->SetServersWanted(n); });
  return ServeUntilSignalled(member);
}

}  // namespace adam::controller
