// The `adam` executable: one subcommand per role, plus run, validate and plan.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/model_commands.h"
#include "controller/main.h"
#include "core/exit_codes.h"
#include "core/file.h"
#include "core/version.h"
#include "data_server/main.h"
#include "launcher/launcher.h"
#include "model/layout.h"
#include "param_server/main.h"
#include "param_server/routing.h"
#include "net/network_status.h"
#include "net/tls.h"
#include "operator.h"
#include "reconcile/render.h"
#include "spec/adamjob.h"
#include "spec/plan.h"
#include "trainer/main.h"

namespace {

using adam::kExitInvalid;

void SetUpLogging(const std::string& name) {
  auto logger = spdlog::stderr_color_mt(name.empty() ? "adam" : name);
  logger->set_pattern("%H:%M:%S.%e %l %v");
  spdlog::set_default_logger(logger);
}

// Loads and validates a manifest; prints every problem and returns nullopt on error.
std::optional<adam::spec::AdamJob> Load(const std::string& path) {
  auto job = adam::spec::LoadAdamJob(path);
  if (!job.ok()) {
    std::fprintf(stderr, "%s: invalid AdamJob:\n", path.c_str());
    std::istringstream lines(job.status().message());
    const std::string prefix = path + ": ";
    for (std::string l; std::getline(lines, l);) {
      if (l.rfind(prefix, 0) == 0) l = l.substr(prefix.size());
      std::fprintf(stderr, "  %s\n", l.c_str());
    }
    return std::nullopt;
  }
  return std::move(*job);
}

std::string SelfPath() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "adam";
  buf[n] = 0;
  return buf;
}

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// "1=host:port,2=host:port" (or plain "host:port,...") -> the addresses.
std::vector<std::string> MemberAddresses(const std::string& members) {
  std::vector<std::string> out;
  for (std::string item : SplitComma(members)) {
    if (const size_t eq = item.find('='); eq != std::string::npos) item = item.substr(eq + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// "3" -> 3; "hostname" -> the ordinal at the end of this host's name plus one
// ("job-controller-0" -> 1); nullopt when neither.
std::optional<uint64_t> MemberId(const std::string& text) {
  std::string digits = text;
  uint64_t offset = 0;
  if (text == "hostname") {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) return std::nullopt;
    const std::string h = host;
    const size_t dash = h.rfind('-');
    if (dash == std::string::npos) return std::nullopt;
    digits = h.substr(dash + 1);
    offset = 1;
  }
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const uint64_t id = std::stoull(digits) + offset;
  if (id < 1) return std::nullopt;
  return id;
}

}  // namespace

namespace {

int RunAdam(int argc, char** argv) {
  CLI::App app{"Adam: Project Adam's deep-learning training system"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("adam ") + adam::kAdamVersion);

  std::string job_path, output = "text", name, listen = "127.0.0.1:0", data_server, ps_list;
  int index = 0, threads = 0, metrics_port = 0;
  bool quiet = false, no_bind = false;

  auto* run = app.add_subcommand("run", "Run an AdamJob locally: every role as a process on loopback");
  run->add_option("file", job_path, "AdamJob manifest (YAML)");
  run->add_option("-f,--filename", job_path, "AdamJob manifest (YAML)");
  run->add_option("-o,--output", output, "summary format: text or json")
      ->check(CLI::IsMember({"text", "json"}));
  run->add_flag("-q,--quiet", quiet, "hide the roles' log lines");
  bool run_plaintext = false;
  run->add_flag("--plaintext", run_plaintext,
                "no TLS between the roles (by default the run makes a throw-away CA and the roles "
                "talk mutual TLS)");
  std::string run_state_dir;
  run->add_option("--state-dir", run_state_dir,
                  "keep parameter-server checkpoints here (a later run resumes from them)");
  std::string run_resume;
  run->add_option("--resume", run_resume,
                  "go on from the checkpoints an earlier run left in its --state-dir DIR: the "
                  "parameters, the epochs finished and the learning-rate schedule (refused when "
                  "DIR holds none)")
      ->excludes("--state-dir");

  std::string report_dir;
  run->add_option("--report", report_dir,
                  "write a training report to DIR/index.html: loss and accuracy per epoch, "
                  "images/s over time, faults marked (self-contained HTML with SVG)");
  std::string prometheus_sd;
  run->add_option("--prometheus-sd", prometheus_sd,
                  "keep FILE a Prometheus file_sd list of every role's /metrics endpoint");
  std::vector<std::string> kills;
  run->add_option("--kill", kills,
                  "fault injection: NAME@SECONDS[+RESTART] kills (SIGKILL) role instance NAME "
                  "that many seconds into training, and restarts it RESTART seconds later "
                  "(NAME controller-leader: the current controller leader)");
  std::string chaos;
  run->add_option("--chaos", chaos,
                  "SECONDS[:SEED]: for that long, kill -9 a random controller member or parameter "
                  "server every 1-2 s and restart it 1 s later (needs copies > 1)");
  std::string run_model_out;
  run->add_option("--model-out", run_model_out,
                  "write the final model (the one the summary's accuracy is of) to FILE as ONNX");
  auto* validate = app.add_subcommand("validate", "Check a manifest; exit 2 listing every problem");
  validate->add_option("file", job_path, "AdamJob manifest (YAML)")->required();

  adam::cli::ModelCommandOptions mo;
  auto* evaluate = app.add_subcommand(
      "evaluate", "Evaluate an ONNX model Adam wrote on a labelled IDX set: accuracy, confusion matrix");
  evaluate->add_option("model", mo.model, "the ONNX file (adam run --model-out)")->required();
  evaluate->add_option("--images", mo.images, "IDX images (raw or gzip)")->required();
  evaluate->add_option("--labels", mo.labels, "IDX labels (raw or gzip)")->required();
  auto* predict = app.add_subcommand(
      "predict", "Classify images with an ONNX model Adam wrote: each image's class and probability");
  predict->add_option("model", mo.model, "the ONNX file (adam run --model-out)")->required();
  predict->add_option("images", mo.inputs, "an IDX file of images (raw or gzip), or PNG files")
      ->required();
  predict->add_option("--first", mo.first, "an IDX file: classify its first N images (0: all)")
      ->check(CLI::NonNegativeNumber);
  for (auto* sub : {evaluate, predict})
    sub->add_option("-o,--output", output, "text or json")->check(CLI::IsMember({"text", "json"}));

  auto* plan = app.add_subcommand("plan", "Print the role instances a manifest runs as");
  plan->add_option("file", job_path, "AdamJob manifest (YAML)")->required();

  auto* render = app.add_subcommand(
      "render", "Print the Kubernetes objects the operator creates for a manifest, as YAML");
  render->add_option("file", job_path, "AdamJob manifest (YAML)")->required();
  std::string render_namespace;
  render->add_option("-n,--namespace", render_namespace, "namespace (default: the manifest's)");
  std::string render_output = "yaml";
  render->add_option("-o,--output", render_output,
                     "yaml (documents, as kubectl apply takes them) or json (one list)")
      ->check(CLI::IsMember({"yaml", "json"}));

  auto* oper = app.add_subcommand(
      "operator", "Run the Kubernetes operator: reconcile AdamJob resources into pods");
  adam::op::OperatorOptions oo;
  std::string kubeconfig, kube_context;
  oper->add_option("--kubeconfig", kubeconfig,
                   "kubeconfig file (default: the pod's service account)");
  oper->add_option("--context", kube_context, "kubeconfig context (default: its current one)");
  oper->add_option("--namespace", oo.watch_namespace, "watch one namespace (default: every one)");
  oper->add_option("--metrics-bind-address", oo.metrics_address,
                   "host:port of /metrics, /healthz and /readyz");
  oper->add_option("--leader-elect", oo.leader_elect, "campaign for a Lease; only the leader acts");
  oper->add_option("--leader-election-namespace", oo.lease_namespace,
                   "namespace of the Lease (default: the operator's own)");
  oper->add_option("--leader-election-id", oo.lease_name, "name of the Lease");
  oper->add_option("--workers", oo.workers, "concurrent reconciles (of different jobs)")
      ->check(CLI::Range(1, 64));
  oper->add_option("--kube-api-qps", oo.qps, "API requests per second on average (0 = no limit)")
      ->check(CLI::Range(0.0, 10000.0));
  oper->add_option("--kube-api-burst", oo.burst, "API requests in a burst")->check(CLI::Range(1, 100000));
  std::string lease_duration = "15s", renew_deadline = "10s", retry_period = "2s", write_timeout = "2s";
  oper->add_option("--leader-elect-lease-duration", lease_duration,
                   "how long a standby waits after the leader's last renewal (30s, 500ms, ...)");
  oper->add_option("--leader-elect-renew-deadline", renew_deadline,
                   "how long the leader keeps acting without a renewal");
  oper->add_option("--leader-elect-retry-period", retry_period, "how often candidates try the Lease");
  oper->add_option("--api-write-timeout", write_timeout,
                   "bound on each write to the API; renew deadline + this < lease duration");
  int certificate_days = int(oo.certificate_validity.count() / 86400);
  oper->add_option("--certificate-days", certificate_days,
                   "lifetime of the job certificates it issues (renewed with a third left)")
      ->check(CLI::Range(1, 3650));

  std::string tls_dir;
  bool plaintext = false;
  auto add_role_flags = [&](CLI::App* sub) {
    sub->add_option("--job", job_path, "AdamJob manifest (YAML)")->required();
    sub->add_option("--name", name, "instance name used in logs");
    sub->add_option("--metrics-port", metrics_port, "Prometheus /metrics port (0 = any)");
    sub->add_option("--tls-dir", tls_dir,
                    "mutual TLS with the job's other roles: DIR holds ca.crt, tls.crt, tls.key");
    sub->add_flag("--plaintext", plaintext, "no TLS (tests only): any peer can connect");
  };
  auto* ds = app.add_subcommand("data-server", "Serve the job's data set to trainers");
  add_role_flags(ds);
  ds->add_option("--listen", listen, "host:port to serve on (port 0 = any)");
  auto* ps = app.add_subcommand("ps", "Run a parameter server");
  add_role_flags(ps);
  ps->add_option("--index", index, "server number")->required();
  ps->add_option("--listen", listen, "host:port to serve on (port 0 = any)");
  std::string state_dir;
  int flush_pause_ms = 0;
  ps->add_option("--state-dir", state_dir, "checkpoint directory (restored on start); none = no persistence");
  std::string replication_listen, restore_from, checkpoint_peer;
  ps->add_option("--replication-listen", replication_listen,
                 "host:port of the second NIC for replication and checkpoint traffic");
  std::string replication_network, pod_annotations;
  ps->add_option("--replication-network", replication_network,
                 "Kubernetes: bind --replication-listen's port on this Multus network's address, "
                 "found in the pod's network-status annotation (see --pod-annotations)");
  ps->add_option("--pod-annotations", pod_annotations,
                 "the downward-API file of this pod's annotations")
      ->default_val("/etc/podinfo/annotations");
  int network_wait_ms = 120000;
  ps->add_option("--network-wait-ms", network_wait_ms,
                 "how long to wait for --replication-network's address to appear in the pod's "
                 "annotations (Multus writes it after the pod starts)");
  ps->add_option("--restore-from", restore_from,
                 "a replication address holding this server's checkpoint (its own former one, or "
                 "its checkpoint peer's): copied first when --state-dir has none");
  ps->add_option("--checkpoint-peer", checkpoint_peer,
                 "a peer's replication address: every flush is copied there");
  std::string controller;
  int forward_interval_ms = 100;
  ps->add_option("--controller", controller,
                 "controller members ID=HOST:PORT,...: copies per shard and failover");
  ps->add_option("--forward-interval-ms", forward_interval_ms,
                 "how often a primary sends changed shards to their other copies");
  ps->add_option("--threads", threads, "shard worker threads (default: one per usable core)");
  ps->add_flag("--no-bind", no_bind, "do not bind shard workers to cores");
  ps->add_option("--debug-flush-pause-ms", flush_pause_ms, "tests: pause this long mid-checkpoint")
      ->group("");
  auto* ctl = app.add_subcommand("controller", "Run a member of the parameter-server controller group");
  add_role_flags(ctl);
  std::string member_id = "1";
  std::string members;
  int server_timeout_ms = 500, tick_ms = 10, election_ticks = 20;
  ctl->add_option("--id", member_id,
                  "this member's id (>= 1), or 'hostname': the ordinal N at the end of the host "
                  "name (a StatefulSet pod's '-N') plus one")
      ->required();
  ctl->add_option("--members", members, "every member: ID=HOST:PORT,... (this one listens on its own)")
      ->required();
  ctl->add_option("--state-dir", state_dir, "Raft log and snapshots")->required();
  std::string cluster_id;
  ctl->add_option("--cluster-id", cluster_id,
                  "the job the Raft state belongs to (a state dir written for another is "
                  "refused; default: NAMESPACE/NAME of the job)");
  ctl->add_option("--server-timeout-ms", server_timeout_ms,
                  "a parameter server silent this long is failed over");
  ctl->add_option("--tick-ms", tick_ms, "Raft tick");
  ctl->add_option("--election-ticks", election_ticks,
                  "followers campaign after this many to twice this many silent ticks");
  auto* tr = app.add_subcommand("trainer", "Run a trainer (one model replica)");
  add_role_flags(tr);
  tr->add_option("--index", index, "trainer number")->required();
  tr->add_option("--threads", threads, "worker threads (default: spec.roles.trainer.threads)");
  tr->add_option("--data-server", data_server, "data server host:port")->required();
  tr->add_option("--ps", ps_list, "parameter servers host:port,... in server order");
  tr->add_option("--controller", controller,
                 "controller members ID=HOST:PORT,...: route by its shard map instead of --ps");
  tr->add_flag("--no-bind", no_bind, "do not bind worker threads to cores");
  bool evaluate_only = false;
  std::string trainer_model_out;
  tr->add_option("--model-out", trainer_model_out,
                 "trainer 0 or --evaluate-only: write the last evaluated model to FILE as ONNX");
  tr->add_flag("--evaluate-only", evaluate_only,
               "train nothing: pull the model from the parameter servers, evaluate it on the test "
               "set (an `evaluated` event) and exit");
  int check_pushes = 0, check_round = 0, check_every_ms = 20;
  tr->add_option("--check-pushes", check_pushes,
                 "train nothing: make N tagged pushes, then check every copy of every shard for "
                 "lost, twice-applied and disagreeing updates (a push_check event; exit 1 if any)");
  tr->add_option("--check-round", check_round, "with --check-pushes: which round's tags to use");
  tr->add_option("--check-every-ms", check_every_ms, "with --check-pushes: pause between pushes");
  std::string metrics_host = "127.0.0.1";
  tr->add_option("--metrics-host", metrics_host, "address /metrics listens on (0.0.0.0: every one)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end with 0; every usage error with 2, as an invalid manifest does.
    return app.exit(e) == 0 ? 0 : kExitInvalid;
  }

  if (validate->parsed()) {
    auto job = Load(job_path);
    if (!job) return kExitInvalid;
    auto layout = adam::model::ModelLayout::Make(job->model);
    std::printf("%s: valid AdamJob '%s' (%lld parameters)\n", job_path.c_str(), job->name.c_str(),
                layout.ok() ? (long long)layout->num_params() : 0LL);
    return 0;
  }
  if (plan->parsed()) {
    auto job = Load(job_path);
    if (!job) return kExitInvalid;
    for (const auto& in : adam::spec::MakePlan(*job).instances)
      std::printf("stage %d  %-14s threads %-3d %s\n", in.stage, in.name.c_str(), in.threads,
                  in.host.empty() ? "" : (in.host + ":" + std::to_string(in.port)).c_str());
    return 0;
  }
  if (oper->parsed()) {
    SetUpLogging("operator");
    // Wall-clock UTC to the microsecond: operator logs are read beside the API server's.
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %l %v", spdlog::pattern_time_type::utc);
    const std::pair<const char*, std::string*> durations[] = {
        {"--leader-elect-lease-duration", &lease_duration},
        {"--leader-elect-renew-deadline", &renew_deadline},
        {"--leader-elect-retry-period", &retry_period},
        {"--api-write-timeout", &write_timeout}};
    for (const auto& [flag, text] : durations) {
      if (adam::spec::ParseDurationMs(*text) <= 0) {
        std::fprintf(stderr, "adam operator: %s: expected a duration like 15s or 500ms, got '%s'\n",
                     flag, text->c_str());
        return kExitInvalid;
      }
    }
    oo.lease_duration = std::chrono::milliseconds(adam::spec::ParseDurationMs(lease_duration));
    oo.renew_deadline = std::chrono::milliseconds(adam::spec::ParseDurationMs(renew_deadline));
    oo.retry_period = std::chrono::milliseconds(adam::spec::ParseDurationMs(retry_period));
    oo.write_timeout = std::chrono::milliseconds(adam::spec::ParseDurationMs(write_timeout));
    if (const char* pod = std::getenv("ADAM_POD_NAME")) oo.identity = pod;
    oo.certificate_validity = std::chrono::seconds(int64_t(certificate_days) * 86400);
    return adam::op::OperatorMain(oo, kubeconfig, kube_context);
  }
  if (render->parsed()) {
    auto job = Load(job_path);
    if (!job) return kExitInvalid;
    if (!render_namespace.empty()) job->name_space = render_namespace;
    adam::op::RenderOptions ro;
    ro.manifest = adam::ReadWholeFile(job_path).value_or("");  // Load read it a moment ago
    const auto objects = adam::op::Render(*job, ro);
    if (render_output == "json")
      std::printf("%s\n", nlohmann::json(objects).dump(2).c_str());
    else
      std::fputs(adam::op::ToYaml(objects).c_str(), stdout);
    return 0;
  }
  if (evaluate->parsed() || predict->parsed()) {
    mo.json = output == "json";
    return evaluate->parsed() ? adam::cli::Evaluate(mo) : adam::cli::Predict(mo);
  }
  if (run->parsed()) {
    if (job_path.empty()) {
      std::fprintf(stderr, "adam run: give a manifest: adam run FILE\n");
      return kExitInvalid;
    }
    auto job = Load(job_path);
    if (!job) return kExitInvalid;
    adam::launcher::RunOptions ro;
    ro.job_path = job_path;
    ro.executable = SelfPath();
    ro.json = output == "json";
    ro.quiet = quiet;
    ro.state_dir = run_resume.empty() ? run_state_dir : run_resume;
    ro.resume = !run_resume.empty();
    ro.report_dir = report_dir;
    ro.plaintext = run_plaintext;
    ro.prometheus_sd = prometheus_sd;
    ro.model_out = run_model_out;
    for (const std::string& k : kills) {
      auto kill = adam::launcher::ParseKill(k, *job);
      if (!kill.ok()) {
        std::fprintf(stderr, "adam run: %s\n", kill.status().message().c_str());
        return kExitInvalid;
      }
      ro.kills.push_back(*kill);
    }
    if (!chaos.empty()) {
      if (adam::Status st = adam::launcher::ParseChaos(chaos, *job, &ro); !st.ok()) {
        std::fprintf(stderr, "adam run: %s\n", st.message().c_str());
        return kExitInvalid;
      }
    }
    return adam::launcher::Run(*job, ro);
  }

  SetUpLogging(name);
  auto job = Load(job_path);
  if (!job) return kExitInvalid;
  // Every role talks mutual TLS unless told, explicitly, not to.
  if (tls_dir.empty() == !plaintext) {
    std::fprintf(stderr, "adam: give exactly one of --tls-dir DIR (mutual TLS between the job's "
                         "roles) and --plaintext\n");
    return kExitInvalid;
  }
  if (!tls_dir.empty()) {
    // Read again every minute: a renewed certificate (the operator rewrites the Secret) takes
    // effect without a restart.
    adam::Status tls = adam::net::EnableMutualTlsFromDir(tls_dir);
    if (!tls.ok()) {
      std::fprintf(stderr, "adam: --tls-dir: %s\n", tls.message().c_str());
      return kExitInvalid;
    }
  }
  if (ds->parsed()) {
    adam::data_server::MainOptions o;
    o.name = name;
    o.listen = listen;
    o.metrics_port = metrics_port;
    return adam::data_server::Main(*job, o);
  }
  if (ps->parsed()) {
    adam::ps::MainOptions o;
    o.name = name;
    o.index = index;
    o.listen = listen;
    o.metrics_port = metrics_port;
    o.state_dir = state_dir;
    o.replication_listen = replication_listen;
    if (!replication_network.empty()) {
      // The second NIC: its address comes from Multus, through the downward API.
      auto addr = adam::net::WaitForPodNetworkAddress(pod_annotations, replication_network,
                                                      std::chrono::milliseconds(network_wait_ms));
      if (!addr.ok()) {
        spdlog::error("--replication-network {}: {}", replication_network, addr.status().message());
        return 1;
      }
      const size_t colon = replication_listen.rfind(':');
      o.replication_listen =
          *addr + ":" + (colon == std::string::npos ? "7071" : replication_listen.substr(colon + 1));
      spdlog::info("replication traffic on {} ({})", o.replication_listen, replication_network);
    }
    o.restore_from = restore_from;
    o.checkpoint_peer = checkpoint_peer;
    o.threads = threads;
    o.bind = !no_bind;
    o.controller = MemberAddresses(controller);
    o.forward_interval = std::chrono::milliseconds(forward_interval_ms);
    o.debug_flush_pause = std::chrono::milliseconds(flush_pause_ms);
    return adam::ps::Main(*job, o);
  }
  if (ctl->parsed()) {
    adam::controller::MainOptions o;
    o.name = name;
    const std::optional<uint64_t> id = MemberId(member_id);
    if (!id) {
      std::fprintf(stderr, "adam controller: --id %s: expected a number >= 1 or 'hostname' (a host "
                           "name ending in -N)\n", member_id.c_str());
      return kExitInvalid;
    }
    o.id = *id;
    o.members = members;
    o.state_dir = state_dir;
    o.cluster_id = cluster_id;
    o.metrics_port = metrics_port;
    if (const auto least = adam::ps::kPrimaryLease + adam::ps::kLeaseMargin;
        server_timeout_ms < least.count()) {
      std::fprintf(stderr,
                   "adam controller: --server-timeout-ms %d would let a parameter server's primary "
                   "lease (%lld ms) outlive the controller's failure timeout: two primaries of one "
                   "shard could take writes at once; give at least %lld\n",
                   server_timeout_ms, static_cast<long long>(adam::ps::kPrimaryLease.count()),
                   static_cast<long long>(least.count()));
      return kExitInvalid;
    }
    o.server_timeout_ms = server_timeout_ms;
    o.tick_ms = tick_ms;
    o.election_ticks = election_ticks;
    return adam::controller::Main(*job, o);
  }
  if (tr->parsed()) {
    adam::trainer::MainOptions o;
    o.name = name;
    o.index = index;
    o.threads = threads;
    o.data_server = data_server;
    o.param_servers = SplitComma(ps_list);
    o.controller = MemberAddresses(controller);
    if (o.param_servers.empty() == o.controller.empty()) {
      std::fprintf(stderr, "adam trainer: give exactly one of --ps and --controller\n");
      return kExitInvalid;
    }
    o.metrics_port = metrics_port;
    o.metrics_host = metrics_host;
    o.bind = !no_bind;
    o.evaluate_only = evaluate_only;
    o.model_out = trainer_model_out;
    o.check_pushes = check_pushes;
    o.check_round = check_round;
    o.check_every_ms = check_every_ms;
    return adam::trainer::Main(*job, o);
  }
  return kExitInvalid;
}

}  // namespace

int main(int argc, char** argv) {
  // Errors are Statuses and exit codes; an exception that still gets here is a bug, said as one
  // rather than an abort.
  try {
    return RunAdam(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adam: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "adam: internal error: an unknown exception\n");
  }
  return adam::kExitFailed;
}
