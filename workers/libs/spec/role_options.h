// Each role's process options, typed, and the one list of their command-line flags.
//
// A role instance of a plan (plan.h) becomes a RoleOptions; the launcher and the operator add
// what they own (TLS, state directories, the model file) as typed fields, and ToArgs turns it
// into `adam` arguments. The CLI parses those arguments back through the same flag list
// (AddRoleCommands), so what one side writes the other reads: RoleOptions -> ToArgs -> ParseArgs
// gives the same RoleOptions. Check holds the rules that tie fields together, the primary lease
// against the controller's failure timeout among them.
// Thread-compatible.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/status.h"
#include "spec/leases.h"  // kPrimaryLease, kLeaseMargin: Check holds the controller to them
#include "spec/plan.h"

namespace CLI {
class App;
}

namespace adam::spec {

// Flags every role takes.
struct CommonRoleOptions {
  std::string job;         // --job: the AdamJob manifest (required)
  std::string name;        // --name: the instance's name in logs and metrics
  int metrics_port = 0;    // --metrics-port: 0 = any free port
  std::string tls_dir;     // --tls-dir: ca.crt, tls.crt, tls.key for mutual TLS
  bool plaintext = false;  // --plaintext: no TLS (exactly one of the two)
  bool operator==(const CommonRoleOptions&) const = default;
};

struct DataServerOptions {
  CommonRoleOptions common;
  std::string listen = "127.0.0.1:0";
  bool operator==(const DataServerOptions&) const = default;
};

struct ParamServerOptions {
  CommonRoleOptions common;
  int index = 0;  // required
  std::string listen = "127.0.0.1:0";
  std::string state_dir;
  std::string replication_listen;
  std::string replication_network;  // Kubernetes: the Multus network whose address to bind
  std::string pod_annotations = std::string(kPodInfoPath) + "/annotations";  // downward API
  int network_wait_ms = 120000;
  std::string restore_from;
  std::string checkpoint_peer;
  ControllerMembers controller;  // --controller ID=HOST:PORT,...
  int forward_interval_ms = 100;
  int threads = 0;
  bool no_bind = false;
  int debug_flush_pause_ms = 0;  // tests only; a hidden flag
  bool operator==(const ParamServerOptions&) const = default;
};

struct ControllerOptions {
  CommonRoleOptions common;
  std::string id = "1";       // required: a number >= 1, or "hostname" (see ResolveMemberId)
  ControllerMembers members;  // required: --members ID=HOST:PORT,...
  std::string state_dir;      // required
  std::string cluster_id;
  int server_timeout_ms = 500;
  int tick_ms = 10;
  int election_ticks = 20;
  bool operator==(const ControllerOptions&) const = default;
};

struct TrainerOptions {
  CommonRoleOptions common;
  int index = 0;  // required
  int threads = 0;
  std::vector<std::string> data_server;  // required: --data-server host:port,...
  std::vector<std::string> ps;           // --ps host:port,... in server order; or
  ControllerMembers controller;          // --controller ID=HOST:PORT,...: route by its map
  bool no_bind = false;
  bool evaluate_only = false;
  std::string model_out;
  int check_pushes = 0;
  int check_round = 0;
  int check_every_ms = 20;
  std::string metrics_host = "127.0.0.1";
  std::vector<std::string> model_workers;  // a split replica's exchange addresses, trainer's first
  int model_worker = 0;  // > 0: run that model worker of the replica, not the trainer
  bool operator==(const TrainerOptions&) const = default;
};

using RoleOptions =
    std::variant<DataServerOptions, ParamServerOptions, ControllerOptions, TrainerOptions>;

Role RoleOf(const RoleOptions& options);
CommonRoleOptions& Common(RoleOptions& options);
const CommonRoleOptions& Common(const RoleOptions& options);

// The options that start `instance` of the job in `job_path`, once its peers' addresses are
// known. `identity` replaces the instance's own id and name (one pod template for every member
// of a StatefulSet). Neither TLS nor --plaintext is set: the caller says which.
RoleOptions OptionsFor(const RoleInstance& instance, const std::string& job_path,
                       const Endpoints& endpoints, const RoleIdentity& identity = {});

// The `adam` arguments (subcommand first) that parse back to `options`: required flags always,
// the others where they differ from their defaults.
std::vector<std::string> ToArgs(const RoleOptions& options);

// The four role subcommands ("data-server", "ps", "controller", "trainer") added to a CLI11 app,
// each bound to its options. After the app parsed, Parsed() is the role it ran, if any.
class RoleCommands {
 public:
  explicit RoleCommands(CLI::App* app);
  std::optional<RoleOptions> Parsed() const;

 private:
  struct Subcommands;
  std::shared_ptr<Subcommands> subs_;
};

// Parses a role's `adam` arguments (subcommand first) through RoleCommands, then Check.
StatusOr<RoleOptions> ParseArgs(const std::vector<std::string>& args);

// The rules between fields: exactly one of --tls-dir and --plaintext; a trainer's exactly one of
// --ps and --controller; a controller's --id a number >= 1 or "hostname", and its
// --server-timeout-ms at least kPrimaryLease + kLeaseMargin. Errors name the flags.
Status Check(const RoleOptions& options);

// A controller's --id: "3" -> 3; "hostname" -> the ordinal at the end of `host_name` plus one
// ("job-controller-0" -> 1, a StatefulSet pod's). nullopt when neither.
std::optional<uint64_t> ResolveMemberId(const std::string& id, const std::string& host_name);

}  // namespace adam::spec
