// MakePlan and ControllerMembers.
#include "spec/plan.h"

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

std::string ControllerMembers(const Plan& plan) {
  std::string out;
  for (const auto& in : plan.instances)
    if (in.role == Role::kController) {
      if (!out.empty()) out += ',';
      out += std::to_string(in.index + 1);
      out += '=';
      out += in.host;
      out += ':';
      out += std::to_string(in.port);
    }
  return out;
}

std::vector<std::string> ModelWorkerAddresses(const Plan& plan) {
  std::vector<std::string> out;
  for (const auto& in : plan.instances) {
    if (in.role != Role::kTrainer || in.host.empty()) continue;
    if (out.size() <= size_t(in.index)) out.resize(size_t(in.index) + 1);
    // MakePlan lists each trainer (worker 0) right before its workers, in order.
    std::string& list = out[size_t(in.index)];
    list += (list.empty() ? "" : ",") + in.host + ":" + std::to_string(in.port);
  }
  return out;
}

}  // namespace adam::spec
