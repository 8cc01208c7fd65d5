// The plan: one pure function from an AdamJob to the role instances that run it.
//
// The local launcher renders a plan to child processes on loopback; the operator renders the same
// plan to pods. A plan says what runs (role, index, name, threads, ports, addresses, resources,
// start stage); role_options.h says how one instance is invoked once its peers' addresses are
// known.
// Pure and thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "spec/adamjob.h"

namespace adam::spec {

enum class Role { kDataServer, kParamServer, kTrainer, kController };

// "data-server", "ps", "trainer", "controller": the subcommand of `adam` that runs the role.
const char* RoleSubcommand(Role role);

struct RoleInstance {
  Role role = Role::kTrainer;
  int index = 0;
  std::string name;              // unique in the job: "ps-0", "trainer-1", "data-server-0"
  std::string host;              // address the role listens on (trainers: none)
  int port = 0;                  // gRPC port; 0 = any free port, reported by the role once bound
  int metrics_port = 0;          // Prometheus /metrics port; 0 = any free port
  std::string replication_host;  // parameter servers: the second NIC's address
  int replication_port = 0;      // parameter servers: its port; 0 = any free port
  int threads = 1;
  Resources resources;
  int stage = 0;  // start order: every instance of stage s is ready before s+1 starts
  // Trainers of a split replica (spec.roles.trainer.modelWorkers > 1): which model worker this
  // is; 0 is the trainer itself ("trainer-1"), k > 0 a model worker ("trainer-1-w2"). Every one
  // listens on host:port for the replica's model exchange.
  int model_worker = 0;
};

struct PlanOptions {
  // Loopback addresses and free ports, vs. cluster DNS names ("<job>-ps-0.<job>": the pod under
  // the job's headless Service) and fixed ports.
  bool local = true;
  std::string host = "127.0.0.1";
  std::string replication_host = "127.0.0.2";
  int grpc_port = 7070;         // cluster mode only
  int metrics_port = 9090;      // cluster mode only
  int replication_port = 7071;  // cluster mode only
};

struct Plan {
  std::string job_name;
  std::vector<RoleInstance> instances;  // sorted by stage, then role, then index
};

// Builds the plan for a validated job.
Plan MakePlan(const AdamJob& job, const PlanOptions& options = {});

// The addresses of the serving roles, known once they listen.
// A member of the controller group: its Raft id (>= 1; the instance's index + 1) and address.
struct ControllerMember {
  uint64_t id = 0;
  std::string address;  // host:port
  bool operator==(const ControllerMember&) const = default;
};
using ControllerMembers = std::vector<ControllerMember>;

// Members as the command line writes them ("1=host:port,2=host:port"), and back: the one parser
// of that form. An entry that is not ID=HOST:PORT with ID >= 1, or an id given twice, is an
// error naming it.
std::string MembersText(const ControllerMembers& members);
StatusOr<ControllerMembers> ParseMembers(const std::string& text);
// "a,,b" -> {"a", "", "b"}: a list argument's items, empty ones kept ("" -> {""}).
std::vector<std::string> SplitItems(const std::string& text);
// Their addresses, in member order.
std::vector<std::string> MemberAddresses(const ControllerMembers& members);

struct Endpoints {
  std::vector<std::string> data_servers;   // host:port of each replica
  std::vector<std::string> param_servers;  // host:port, in index order
  // With copies > 1 (ControllerOwnsShards): every controller member. Parameter servers and
  // trainers then find each other through the controller.
  ControllerMembers controller_members;
  // Per trainer replica of a split job: every model worker's exchange address, the trainer's
  // first; empty when the job is not split.
  std::vector<std::vector<std::string>> model_workers;
};

// The controller members of a plan whose controller instances have their ports.
ControllerMembers ControllerMembersOf(const Plan& plan);
// Endpoints::model_workers of a plan whose split trainers have their ports.
std::vector<std::vector<std::string>> ModelWorkerAddresses(const Plan& plan);

// How an instance learns who it is when one pod template serves every member of a group (a
// Kubernetes StatefulSet): `--id` and `--name` as these strings instead of the instance's own
// ("hostname": the id from the host name's ordinal; "$(ADAM_POD_NAME)", expanded by the kubelet).
// Empty fields keep the instance's own.
struct RoleIdentity {
  std::string id;  // controllers only
  std::string name;
};

}  // namespace adam::spec
