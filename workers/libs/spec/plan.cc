// MakePlan, the controller members and their text form.
#include "spec/plan.h"

#include <algorithm>
#include <charconv>

namespace adam::spec {

const char* RoleSubcommand(Role role) {
  switch (role) {
    case Role::kDataServer:
      return "data-server";
    case Role::kParamServer:
      return "ps";
    case Role::kTrainer:
      return "trainer";
    case Role::kController:
      return "controller";
  }
  return "?";
}

Plan MakePlan(const AdamJob& job, const PlanOptions& options) {
  Plan plan;
  plan.job_name = job.name;
  auto add = [&](Role role, int index, int threads, const Resources& res, int stage) {
    RoleInstance in;
    in.role = role;
    in.index = index;
    in.name = std::string(RoleSubcommand(role)) + "-" + std::to_string(index);
    in.threads = threads;
    in.resources = res;
    in.stage = stage;
    if (role != Role::kTrainer || job.roles.trainer.model_workers > 1) {
      // In a cluster each pod is "<job>-<name>" under the job's headless Service "<job>".
      in.host = options.local ? options.host : job.name + "-" + in.name + "." + job.name;
      in.port = options.local ? 0 : options.grpc_port;
    }
    in.metrics_port = options.local ? 0 : options.metrics_port;
    if (role == Role::kParamServer)
      in.replication_host = options.local ? options.replication_host : in.host;
    if (role == Role::kParamServer)
      in.replication_port = options.local ? 0 : options.replication_port;
    plan.instances.push_back(in);
  };
  // With copies, a controller group owns the shard map (members know each other's addresses
  // before they start: the launcher picks their ports).
  if (ControllerOwnsShards(job))
    for (int i = 0; i < job.roles.controller.replicas; ++i)
      add(Role::kController, i, 1, job.roles.controller.resources, 0);
  // Parameter servers and the data server first: trainers need both to start.
  for (int i = 0; i < job.roles.parameter_server.replicas; ++i)
    add(Role::kParamServer, i, 1, job.roles.parameter_server.resources, 0);
  for (int i = 0; i < job.roles.data_server.replicas; ++i)
    add(Role::kDataServer, i, 1, job.roles.data_server.resources, 0);
  for (int i = 0; i < job.roles.trainer.replicas; ++i) {
    add(Role::kTrainer, i, job.roles.trainer.threads, job.roles.trainer.resources, 1);
    for (int k = 1; k < job.roles.trainer.model_workers; ++k) {
      add(Role::kTrainer, i, job.roles.trainer.threads, job.roles.trainer.resources, 1);
      RoleInstance& w = plan.instances.back();
      w.model_worker = k;
      w.name = "trainer-" + std::to_string(i) + "-w" + std::to_string(k);
      if (!options.local) w.host = job.name + "-" + w.name + "." + job.name;
    }
  }
  return plan;
}

std::string MembersText(const ControllerMembers& members) {
  std::string out;
  for (const ControllerMember& m : members)
    out += (out.empty() ? "" : ",") + std::to_string(m.id) + "=" + m.address;
  return out;
}

std::vector<std::string> SplitItems(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    out.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

StatusOr<ControllerMembers> ParseMembers(const std::string& text) {
  ControllerMembers out;
  for (const std::string& item : SplitItems(text)) {
    // The id: decimal digits only (no sign, no space), at least 1, within 64 bits.
    const size_t eq = item.find('=');
    uint64_t id = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (eq == std::string::npos || ec != std::errc() || end != item.data() + eq || id == 0 ||
        eq + 1 >= item.size())
      return InvalidArgumentError("'" + item + "' is not ID=HOST:PORT with ID >= 1");
    for (const ControllerMember& m : out)
      if (m.id == id) return InvalidArgumentError("id " + std::to_string(id) + " appears twice");
    out.push_back({id, item.substr(eq + 1)});
  }
  return out;
}

std::vector<std::string> MemberAddresses(const ControllerMembers& members) {
  std::vector<std::string> out;
  out.reserve(members.size());
  for (const ControllerMember& m : members) out.push_back(m.address);
  return out;
}

ControllerMembers ControllerMembersOf(const Plan& plan) {
  ControllerMembers out;
  for (const auto& in : plan.instances)
    if (in.role == Role::kController)
      out.push_back({uint64_t(in.index) + 1, in.host + ":" + std::to_string(in.port)});
  return out;
}

std::vector<std::vector<std::string>> ModelWorkerAddresses(const Plan& plan) {
  std::vector<std::vector<std::string>> out;
  for (const auto& in : plan.instances) {
    if (in.role != Role::kTrainer || in.host.empty()) continue;
    if (out.size() <= size_t(in.index)) out.resize(size_t(in.index) + 1);
    // MakePlan lists each trainer (worker 0) right before its workers, in order.
    out[size_t(in.index)].push_back(in.host + ":" + std::to_string(in.port));
  }
  return out;
}

}  // namespace adam::spec
