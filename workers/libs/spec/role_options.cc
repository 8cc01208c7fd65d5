// Each role's flags, listed once (the Fields functions), and the two walks over them: CLI11
// registration (RoleCommands) and serialisation (ToArgs).
#include "spec/role_options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <type_traits>

namespace adam::spec {

namespace {

// The flag list of each role. V is a visitor with Required, Option, Flag and Hidden; O is the
// options struct, const or not, so one list serves both reading and writing.
template <class V, class O>
void CommonFields(V& v, O& o) {
  v.Required("--job", o.job, "AdamJob manifest (YAML)");
  v.Option("--name", o.name, "instance name used in logs");
  v.Option("--metrics-port", o.metrics_port, "Prometheus /metrics port (0 = any)");
  v.Option("--tls-dir", o.tls_dir,
           "mutual TLS with the job's other roles: DIR holds ca.crt, tls.crt, tls.key");
  v.Flag("--plaintext", o.plaintext, "no TLS (tests only): any peer can connect");
}

template <class V, class O>
void Fields(V& v, O& o) requires std::is_same_v<std::remove_const_t<O>, DataServerOptions> {
  CommonFields(v, o.common);
  v.Option("--listen", o.listen, "host:port to serve on (port 0 = any)");
}

template <class V, class O>
void Fields(V& v, O& o) requires std::is_same_v<std::remove_const_t<O>, ParamServerOptions> {
  CommonFields(v, o.common);
  v.Required("--index", o.index, "server number");
  v.Option("--listen", o.listen, "host:port to serve on (port 0 = any)");
  v.Option("--state-dir", o.state_dir,
           "checkpoint directory (restored on start); none = no persistence");
  v.Option("--replication-listen", o.replication_listen,
           "host:port of the second NIC for replication and checkpoint traffic");
  v.Option("--replication-network", o.replication_network,
           "Kubernetes: bind --replication-listen's port on this Multus network's address, found "
           "in the pod's network-status annotation (see --pod-annotations)");
  v.Option("--pod-annotations", o.pod_annotations,
           "the downward-API file of this pod's annotations (where the operator mounts it)");
  v.Option("--network-wait-ms", o.network_wait_ms,
           "how long to wait for --replication-network's address to appear in the pod's "
           "annotations (Multus writes it after the pod starts)");
  v.Option("--restore-from", o.restore_from,
           "a replication address holding this server's checkpoint (its own former one, or its "
           "checkpoint peer's): copied first when --state-dir has none");
  v.Option("--checkpoint-peer", o.checkpoint_peer,
           "a peer's replication address: every flush is copied there");
  v.Option("--controller", o.controller,
           "controller members ID=HOST:PORT,...: copies per shard and failover");
  v.Option("--forward-interval-ms", o.forward_interval_ms,
           "how often a primary sends changed shards to their other copies");
  v.Option("--threads", o.threads, "shard worker threads (default: one per usable core)");
  v.Flag("--no-bind", o.no_bind, "do not bind shard workers to cores");
  v.Hidden("--debug-flush-pause-ms", o.debug_flush_pause_ms,
           "tests: pause this long mid-checkpoint");
}

template <class V, class O>
void Fields(V& v, O& o) requires std::is_same_v<std::remove_const_t<O>, ControllerOptions> {
  CommonFields(v, o.common);
  v.Required("--id", o.id,
             "this member's id (>= 1), or 'hostname': the ordinal N at the end of the host name "
             "(a StatefulSet pod's '-N') plus one");
  v.Required("--members", o.members,
             "every member: ID=HOST:PORT,... (this one listens on its own)");
  v.Required("--state-dir", o.state_dir, "Raft log and snapshots");
  v.Option("--cluster-id", o.cluster_id,
           "the job the Raft state belongs to (a state dir written for another is refused; "
           "default: NAMESPACE/NAME of the job)");
  v.Option("--server-timeout-ms", o.server_timeout_ms,
           "a parameter server silent this long is failed over");
  v.Option("--tick-ms", o.tick_ms, "Raft tick");
  v.Option("--election-ticks", o.election_ticks,
           "followers campaign after this many to twice this many silent ticks");
}

template <class V, class O>
void Fields(V& v, O& o) requires std::is_same_v<std::remove_const_t<O>, TrainerOptions> {
  CommonFields(v, o.common);
  v.Required("--index", o.index, "trainer number");
  v.Option("--threads", o.threads, "worker threads (default: spec.roles.trainer.threads)");
  v.Required("--data-server", o.data_server,
             "data servers host:port,... (replicas serving the same batches; one is used, the "
             "next when it is lost)");
  v.Option("--ps", o.ps, "parameter servers host:port,... in server order");
  v.Option("--controller", o.controller,
           "controller members ID=HOST:PORT,...: route by its shard map instead of --ps");
  v.Flag("--no-bind", o.no_bind, "do not bind worker threads to cores");
  v.Option("--model-out", o.model_out,
           "trainer 0 or --evaluate-only: write the last evaluated model to FILE as ONNX");
  v.Flag("--evaluate-only", o.evaluate_only,
         "train nothing: pull the model from the parameter servers, evaluate it on the test set "
         "(an `evaluated` event) and exit");
  v.Option("--check-pushes", o.check_pushes,
           "train nothing: make N tagged pushes, then check every copy of every shard for lost, "
           "twice-applied and disagreeing updates (a push_check event; exit 1 if any)");
  v.Option("--check-round", o.check_round, "with --check-pushes: which round's tags to use");
  v.Option("--check-every-ms", o.check_every_ms, "with --check-pushes: pause between pushes");
  v.Option("--model-workers", o.model_workers,
           "a split replica (spec.roles.trainer.modelWorkers): every model worker's exchange "
           "host:port, this trainer's (where it listens) first");
  v.Option("--model-worker", o.model_worker,
           "with --model-workers: run model worker N (>= 1) of the replica instead of the trainer");
  v.Option("--metrics-host", o.metrics_host, "address /metrics listens on (0.0.0.0: every one)");
}

// "a,b,c" -> {"a", "b", "c"} (empty items dropped): a list flag's one argument.
std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out = SplitItems(text);
  out.erase(std::remove(out.begin(), out.end(), std::string()), out.end());
  return out;
}

std::string JoinList(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

// Registers each field as a CLI11 option bound to it. A list is one comma-separated argument,
// read into its typed field here (members through ParseMembers, the one parser of that form).
struct Registrar {
  CLI::App* app;
  template <class T>
  CLI::Option* Add(const char* flag, T& field, const char* help) {
    if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      return app->add_option_function<std::string>(
          flag, [&field](const std::string& text) { field = SplitList(text); }, help);
    } else if constexpr (std::is_same_v<T, ControllerMembers>) {
      return app->add_option_function<std::string>(
          flag,
          [&field, flag](const std::string& text) {
            StatusOr<ControllerMembers> members = ParseMembers(text);
            if (!members.ok()) throw CLI::ValidationError(flag, members.status().message());
            field = std::move(*members);
          },
          help);
    } else {
      return app->add_option(flag, field, help)->capture_default_str();
    }
  }
  template <class T>
  void Required(const char* flag, T& field, const char* help) {
    Add(flag, field, help)->required();
  }
  template <class T>
  void Option(const char* flag, T& field, const char* help) {
    Add(flag, field, help);
  }
  void Flag(const char* flag, bool& field, const char* help) { app->add_flag(flag, field, help); }
  template <class T>
  void Hidden(const char* flag, T& field, const char* help) {
    Add(flag, field, help)->group("");
  }
};

// Lists each field as the argument text it would be given.
struct Writer {
  struct Arg {
    std::string flag;
    std::string value;  // a flag's "1" or ""
    bool required = false;
    bool is_flag = false;
  };
  std::vector<Arg> args;
  static std::string Text(const std::string& s) { return s; }
  static std::string Text(int i) { return std::to_string(i); }
  static std::string Text(const std::vector<std::string>& list) { return JoinList(list); }
  static std::string Text(const ControllerMembers& members) { return MembersText(members); }
  template <class T>
  void Required(const char* flag, const T& field, const char*) {
    args.push_back({flag, Text(field), true, false});
  }
  template <class T>
  void Option(const char* flag, const T& field, const char*) {
    args.push_back({flag, Text(field), false, false});
  }
  void Flag(const char* flag, const bool& field, const char*) {
    args.push_back({flag, field ? "1" : "", false, true});
  }
  template <class T>
  void Hidden(const char* flag, const T& field, const char* help) {
    Option(flag, field, help);
  }
};

template <class O>
std::vector<std::string> ArgsOf(const O& options) {
  Writer set, defaults;
  Fields(set, options);
  const O fresh{};
  Fields(defaults, fresh);
  std::vector<std::string> out;
  for (size_t i = 0; i < set.args.size(); ++i) {
    const Writer::Arg& a = set.args[i];
    if (!a.required && a.value == defaults.args[i].value) continue;
    out.push_back(a.flag);
    if (!a.is_flag) out.push_back(a.value);
  }
  return out;
}

constexpr const char* kRoleHelp[] = {"Serve the job's data set to trainers",
                                     "Run a parameter server", "Run a trainer (one model replica)",
                                     "Run a member of the parameter-server controller group"};

const char* Help(Role role) { return kRoleHelp[static_cast<int>(role)]; }

template <class O>
constexpr Role kRoleOf = std::is_same_v<O, DataServerOptions>    ? Role::kDataServer
                         : std::is_same_v<O, ParamServerOptions> ? Role::kParamServer
                         : std::is_same_v<O, ControllerOptions>  ? Role::kController
                                                                 : Role::kTrainer;

}  // namespace

Role RoleOf(const RoleOptions& options) {
  return std::visit([](const auto& o) { return kRoleOf<std::decay_t<decltype(o)>>; }, options);
}

CommonRoleOptions& Common(RoleOptions& options) {
  return std::visit([](auto& o) -> CommonRoleOptions& { return o.common; }, options);
}

const CommonRoleOptions& Common(const RoleOptions& options) {
  return std::visit([](const auto& o) -> const CommonRoleOptions& { return o.common; }, options);
}

RoleOptions OptionsFor(const RoleInstance& in, const std::string& job_path,
                       const Endpoints& endpoints, const RoleIdentity& identity) {
  CommonRoleOptions common;
  common.job = job_path;
  common.name = identity.name.empty() ? in.name : identity.name;
  common.metrics_port = in.metrics_port;
  const std::string listen = in.host + ":" + std::to_string(in.port);
  switch (in.role) {
    case Role::kDataServer: {
      DataServerOptions o;
      o.common = common;
      o.listen = listen;
      return o;
    }
    case Role::kParamServer: {
      ParamServerOptions o;
      o.common = common;
      o.index = in.index;
      o.listen = listen;
      if (!in.replication_host.empty())
        o.replication_listen = in.replication_host + ":" + std::to_string(in.replication_port);
      o.controller = endpoints.controller_members;
      return o;
    }
    case Role::kController: {
      ControllerOptions o;
      o.common = common;
      o.id = identity.id.empty() ? std::to_string(in.index + 1) : identity.id;
      o.members = endpoints.controller_members;
      return o;
    }
    case Role::kTrainer:
      break;
  }
  TrainerOptions o;
  o.common = common;
  o.index = in.index;
  o.threads = in.threads;
  o.data_server = endpoints.data_servers;
  o.model_worker = in.model_worker;
  if (size_t(in.index) < endpoints.model_workers.size())
    o.model_workers = endpoints.model_workers[size_t(in.index)];
  if (endpoints.controller_members.empty())
    o.ps = endpoints.param_servers;
  else
    o.controller = endpoints.controller_members;
  return o;
}

std::vector<std::string> ToArgs(const RoleOptions& options) {
  std::vector<std::string> out = {RoleSubcommand(RoleOf(options))};
  const std::vector<std::string> flags =
      std::visit([](const auto& o) { return ArgsOf(o); }, options);
  out.insert(out.end(), flags.begin(), flags.end());
  return out;
}

struct RoleCommands::Subcommands {
  DataServerOptions data_server;
  ParamServerOptions param_server;
  ControllerOptions controller;
  TrainerOptions trainer;
  CLI::App* apps[4] = {};  // by Role
};

RoleCommands::RoleCommands(CLI::App* app) : subs_(std::make_shared<Subcommands>()) {
  auto add = [&](Role role, auto& options) {
    CLI::App* sub = app->add_subcommand(RoleSubcommand(role), Help(role));
    Registrar r{sub};
    Fields(r, options);
    subs_->apps[static_cast<int>(role)] = sub;
  };
  add(Role::kDataServer, subs_->data_server);
  add(Role::kParamServer, subs_->param_server);
  add(Role::kController, subs_->controller);
  add(Role::kTrainer, subs_->trainer);
}

std::optional<RoleOptions> RoleCommands::Parsed() const {
  const auto parsed = [&](Role r) { return subs_->apps[static_cast<int>(r)]->parsed(); };
  if (parsed(Role::kDataServer)) return subs_->data_server;
  if (parsed(Role::kParamServer)) return subs_->param_server;
  if (parsed(Role::kController)) return subs_->controller;
  if (parsed(Role::kTrainer)) return subs_->trainer;
  return std::nullopt;
}

StatusOr<RoleOptions> ParseArgs(const std::vector<std::string>& args) {
  CLI::App app{"adam"};
  app.require_subcommand(1);
  RoleCommands commands(&app);
  std::vector<std::string> argv_text = {"adam"};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<const char*> argv;
  argv.reserve(argv_text.size());
  for (const auto& a : argv_text) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return InvalidArgumentError(e.what());
  }
  std::optional<RoleOptions> options = commands.Parsed();
  if (!options) return InvalidArgumentError("no role subcommand");
  ADAM_RETURN_IF_ERROR(Check(*options));
  return *options;
}

std::optional<uint64_t> ResolveMemberId(const std::string& id, const std::string& host_name) {
  std::string digits = id;
  uint64_t offset = 0;
  if (id == "hostname") {
    const size_t dash = host_name.rfind('-');
    if (dash == std::string::npos) return std::nullopt;
    digits = host_name.substr(dash + 1);
    offset = 1;
  }
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const uint64_t n = std::stoull(digits) + offset;
  if (n < 1) return std::nullopt;
  return n;
}

Status Check(const RoleOptions& options) {
  const CommonRoleOptions& common = Common(options);
  if (common.tls_dir.empty() == !common.plaintext)
    return InvalidArgumentError(
        "give exactly one of --tls-dir DIR (mutual TLS between the job's roles) and --plaintext");
  if (const auto* t = std::get_if<TrainerOptions>(&options);
      t && t->ps.empty() == t->controller.empty())
    return InvalidArgumentError("give exactly one of --ps and --controller");
  if (const auto* t = std::get_if<TrainerOptions>(&options)) {
    const int64_t workers = int64_t(t->model_workers.size());
    if (t->model_worker < 0 || (t->model_worker > 0 && t->model_worker >= workers))
      return InvalidArgumentError("--model-worker " + std::to_string(t->model_worker) +
                                  ": --model-workers lists " + std::to_string(workers) +
                                  " workers (the trainer is 0)");
    if (workers == 1)
      return InvalidArgumentError("--model-workers: a split replica has at least 2 workers");
  }
  if (const auto* c = std::get_if<ControllerOptions>(&options)) {
    // "hostname" is resolved at start; any other text must already be a member id.
    if (c->id != "hostname" && !ResolveMemberId(c->id, ""))
      return InvalidArgumentError("--id " + c->id +
                                  ": expected a number >= 1 or 'hostname' (a host name ending "
                                  "in -N)");
    if (const auto least = kPrimaryLease + kLeaseMargin; c->server_timeout_ms < least.count())
      return InvalidArgumentError(
          "--server-timeout-ms " + std::to_string(c->server_timeout_ms) +
          " would let a parameter server's primary lease (" +
          std::to_string(kPrimaryLease.count()) +
          " ms) outlive the controller's failure timeout: two primaries of one shard could take "
          "writes at once; give at least " +
          std::to_string(least.count()));
  }
  return OkStatus();
}

}  // namespace adam::spec
