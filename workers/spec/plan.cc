// MakePlan and RoleArgs.
#include "spec/plan.h"

namespace adam::spec {

const char* RoleSubcommand(Role role) {
  switch (role) {
    case Role::kDataServer: return "data-server";
    case Role::kParamServer: return "ps";
    case Role::kTrainer: return "trainer";
    case Role::kController: return "controller";
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
    if (role != Role::kTrainer) {
      // In a cluster each pod is "<job>-<name>" under the job's headless Service "<job>".
      in.host = options.local ? options.host : job.name + "-" + in.name + "." + job.name;
      in.port = options.local ? 0 : options.grpc_port;
    }
    in.metrics_port = options.local ? 0 : options.metrics_port;
    if (role == Role::kParamServer)
      in.replication_host = options.local ? options.replication_host : in.host;
    if (role == Role::kParamServer) in.replication_port = options.local ? 0 : options.replication_port;
    plan.instances.push_back(in);
  };
  // With copies, a controller group owns the shard map (members know each other's addresses
  // before they start: the launcher picks their ports).
  if (job.roles.parameter_server.copies > 1)
    for (int i = 0; i < job.roles.controller.replicas; ++i)
      add(Role::kController, i, 1, job.roles.controller.resources, 0);
  // Parameter servers and the data server first: trainers need both to start.
  for (int i = 0; i < job.roles.parameter_server.replicas; ++i)
    add(Role::kParamServer, i, 1, job.roles.parameter_server.resources, 0);
  for (int i = 0; i < job.roles.data_server.replicas; ++i)
    add(Role::kDataServer, i, 1, job.roles.data_server.resources, 0);
  for (int i = 0; i < job.roles.trainer.replicas; ++i)
    add(Role::kTrainer, i, job.roles.trainer.threads, job.roles.trainer.resources, 1);
  return plan;
}

std::vector<std::string> RoleArgs(const RoleInstance& in, const std::string& job_path,
                                  const Endpoints& endpoints, const RoleIdentity& identity) {
  std::vector<std::string> args = {RoleSubcommand(in.role), "--job", job_path, "--name",
                                   identity.name.empty() ? in.name : identity.name,
                                   "--metrics-port", std::to_string(in.metrics_port)};
  switch (in.role) {
    case Role::kParamServer:
      args.insert(args.end(), {"--index", std::to_string(in.index), "--listen",
                               in.host + ":" + std::to_string(in.port)});
      if (!in.replication_host.empty())
        args.insert(args.end(), {"--replication-listen", in.replication_host + ":" +
                                                        std::to_string(in.replication_port)});
      if (!endpoints.controller_members.empty())
        args.insert(args.end(), {"--controller", endpoints.controller_members});
      break;
    case Role::kDataServer:
      args.insert(args.end(), {"--listen", in.host + ":" + std::to_string(in.port)});
      break;
    case Role::kController:
      args.insert(args.end(), {"--id", identity.id.empty() ? std::to_string(in.index + 1) : identity.id,
                               "--members", endpoints.controller_members});
      break;
    case Role::kTrainer: {
      std::string ps;
      for (const auto& a : endpoints.param_servers) ps += (ps.empty() ? "" : ",") + a;
      args.insert(args.end(), {"--index", std::to_string(in.index), "--threads",
                               std::to_string(in.threads), "--data-server", endpoints.data_server});
      if (endpoints.controller_members.empty())
        args.insert(args.end(), {"--ps", ps});
      else
        args.insert(args.end(), {"--controller", endpoints.controller_members});
      break;
    }
  }
  return args;
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

}  // namespace adam::spec
