// The `adam` executable: one subcommand per role (spec::RoleCommands), and run, validate, evaluate,
// predict, plan, render and operator.
#include "controller/main.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/model_commands.h"
#include "core/crash.h"
#include "core/exit_codes.h"
#include "core/file.h"
#include "core/version.h"
#include "data_server/main.h"
#include "launcher/launcher.h"
#include "model/layout.h"
#include "net/grpc.h"
#include "net/tls.h"
#include "operator.h"
#include "param_server/main.h"
#include "reconcile/render.h"
#include "spec/adamjob.h"
#include "spec/plan.h"
#include "spec/role_options.h"
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

// One role's process: its options checked, the manifest loaded, TLS set up, then the role.
int RunRole(const adam::spec::RoleOptions& role) {
  const char* subcommand = adam::spec::RoleSubcommand(adam::spec::RoleOf(role));
  if (adam::Status st = adam::spec::Check(role); !st.ok()) {
    std::fprintf(stderr, "adam %s: %s\n", subcommand, st.message().c_str());
    return kExitInvalid;
  }
  const adam::spec::CommonRoleOptions& common = adam::spec::Common(role);
  SetUpLogging(common.name);
  auto job = Load(common.job);
  if (!job) return kExitInvalid;
  // Mutual TLS from --tls-dir (spec::Check saw to it that plain text was asked for otherwise),
  // read again every minute: a renewed certificate (the operator rewrites the Secret) takes
  // effect without a restart.
  adam::RoleProcess process;
  if (!common.tls_dir.empty()) {
    auto tls = adam::net::Transport::MutualTlsFromDir(common.tls_dir);
    if (!tls.ok()) {
      std::fprintf(stderr, "adam: --tls-dir: %s\n", tls.status().message().c_str());
      return kExitInvalid;
    }
    process.transport = *tls;
  }
  return std::visit(
      [&](const auto& r) {
        using R = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<R, adam::spec::DataServerOptions>)
          return adam::data_server::Main(*job, r, process);
        if constexpr (std::is_same_v<R, adam::spec::ParamServerOptions>)
          return adam::ps::Main(*job, r, process);
        if constexpr (std::is_same_v<R, adam::spec::ControllerOptions>)
          return adam::controller::Main(*job, r, process);
        if constexpr (std::is_same_v<R, adam::spec::TrainerOptions>)
          return adam::trainer::Main(*job, r, process);
      },
      role);
}

}  // namespace

namespace {

// A subcommand: its flags, bound to options its `run` reads once the command line is parsed.
struct Command {
  CLI::App* sub = nullptr;
  std::function<int()> run;
};

// `adam run`'s flags that are not RunOptions fields as they are: the summary format, the
// --resume directory, and the faults (parsed against the job once it is loaded).
struct RunFlags {
  adam::launcher::RunOptions ro;
  std::string output = "text", resume, chaos;
  std::vector<std::string> kills;
};

void AddRunFlags(CLI::App* run, RunFlags* f) {
  run->add_option("file", f->ro.job_path, "AdamJob manifest (YAML)");
  run->add_option("-f,--filename", f->ro.job_path, "AdamJob manifest (YAML)");
  run->add_option("-o,--output", f->output, "summary format: text or json")
      ->check(CLI::IsMember({"text", "json"}));
  run->add_flag("-q,--quiet", f->ro.quiet, "hide the roles' log lines");
  run->add_flag("--plaintext", f->ro.plaintext,
                "no TLS between the roles (by default the run makes a throw-away CA and the roles "
                "talk mutual TLS)");
  run->add_option("--state-dir", f->ro.state_dir,
                  "keep parameter-server checkpoints here (a later run resumes from them)");
  run->add_option("--resume", f->resume,
                  "go on from the checkpoints an earlier run left in its --state-dir DIR: the "
                  "parameters, the epochs finished and the learning-rate schedule (refused when "
                  "DIR holds none)")
      ->excludes("--state-dir");
  run->add_option("--report", f->ro.report_dir,
                  "write a training report to DIR/index.html: loss and accuracy per epoch, "
                  "images/s over time, faults marked (self-contained HTML with SVG)");
  run->add_option("--prometheus-sd", f->ro.prometheus_sd,
                  "keep FILE a Prometheus file_sd list of every role's /metrics endpoint");
  run->add_option("--kill", f->kills,
                  "fault injection: NAME@SECONDS[+RESTART] kills (SIGKILL) role instance NAME "
                  "that many seconds into training, and restarts it RESTART seconds later "
                  "(NAME controller-leader: the current controller leader)");
  run->add_option("--chaos", f->chaos,
                  "SECONDS[:SEED]: for that long, kill -9 a random controller member or parameter "
                  "server every 1-2 s and restart it 1 s later (needs copies > 1)");
  run->add_option("--model-out", f->ro.model_out,
                  "write the final model (the one the summary's accuracy is of) to FILE as ONNX");
}

// `adam run`, once its command line is parsed.
int RunJob(RunFlags f) {
  adam::launcher::RunOptions& ro = f.ro;
  if (ro.job_path.empty()) {
    std::fprintf(stderr, "adam run: give a manifest: adam run FILE\n");
    return kExitInvalid;
  }
  auto job = Load(ro.job_path);
  if (!job) return kExitInvalid;
  // What the launcher's own parts log (the manifest it follows) goes to stderr: stdout holds the
  // summary only.
  SetUpLogging("adam-run");
  spdlog::set_level(spdlog::level::warn);  // its own lines say what changed
  ro.executable = SelfPath();
  ro.json = f.output == "json";
  if (!f.resume.empty()) {
    ro.state_dir = f.resume;
    ro.resume = true;
  }
  for (const std::string& k : f.kills) {
    auto kill = adam::launcher::ParseKill(k, *job);
    if (!kill.ok()) {
      std::fprintf(stderr, "adam run: %s\n", kill.status().message().c_str());
      return kExitInvalid;
    }
    ro.kills.push_back(*kill);
  }
  if (!f.chaos.empty()) {
    if (adam::Status st = adam::launcher::ParseChaos(f.chaos, *job, &ro); !st.ok()) {
      std::fprintf(stderr, "adam run: %s\n", st.message().c_str());
      return kExitInvalid;
    }
  }
  return adam::launcher::Run(*job, ro);
}

Command AddRun(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  auto* run =
      app.add_subcommand("run", "Run an AdamJob locally: every role as a process on loopback");
  AddRunFlags(run, f.get());
  return {run, [f] { return RunJob(*f); }};
}

Command AddScale(CLI::App& app) {
  struct Options {
    std::string state_dir;
    int parameter_servers = 0;
  };
  auto o = std::make_shared<Options>();
  auto* sub = app.add_subcommand(
      "scale",
      "Add or remove parameter servers of a running `adam run --state-dir DIR` (copies > 1): "
      "the run starts the servers that join, the controller moves copies, servers that leave "
      "exit once they hold nothing");
  sub->add_option("--state-dir", o->state_dir, "the running job's --state-dir")->required();
  sub->add_option("--parameter-servers", o->parameter_servers,
                  "the new spec.roles.parameterServer.replicas")
      ->required();
  return {sub, [o] { return adam::launcher::Scale(o->state_dir, o->parameter_servers); }};
}

Command AddValidate(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("validate", "Check a manifest; exit 2 listing every problem");
  sub->add_option("file", *path, "AdamJob manifest (YAML)")->required();
  return {sub, [path] {
            auto job = Load(*path);
            if (!job) return kExitInvalid;
            auto layout = adam::model::ModelLayout::Make(job->model);
            std::printf("%s: valid AdamJob '%s' (%lld parameters)\n", path->c_str(),
                        job->name.c_str(), layout.ok() ? (long long)layout->num_params() : 0LL);
            return 0;
          }};
}

// `evaluate` and `predict`.
std::vector<Command> AddModelCommands(CLI::App& app) {
  auto mo = std::make_shared<adam::cli::ModelCommandOptions>();
  auto output = std::make_shared<std::string>("text");
  auto* evaluate = app.add_subcommand(
      "evaluate",
      "Evaluate an ONNX model Adam wrote on a labelled set (a folder of class folders, or IDX "
      "files): accuracy, per-class precision and recall, confusion matrix");
  evaluate->add_option("model", mo->model, "the ONNX file (adam run --model-out)")->required();
  auto* folder = evaluate->add_option(
      "--folder", mo->folder,
      "a folder of class folders (DIR/CLASS/*.png|jpg), matched to the model's classes by name");
  evaluate->add_option("--images", mo->images, "IDX images (raw or gzip)")->excludes(folder);
  evaluate->add_option("--labels", mo->labels, "IDX labels (raw or gzip)")->excludes(folder);
  evaluate
      ->add_option("--max-corrupt", mo->max_corrupt,
                   "--folder: files that may fail to decode (skipped, named) before it fails")
      ->check(CLI::NonNegativeNumber);
  auto* predict = app.add_subcommand(
      "predict",
      "Classify images with an ONNX model Adam wrote: each image's class and probability");
  predict->add_option("model", mo->model, "the ONNX file (adam run --model-out)")->required();
  predict
      ->add_option("images", mo->inputs,
                   "PNG or JPEG files of any size (fitted as the job fitted its test set), "
                   "folders of them (walked), or IDX files (raw or gzip)")
      ->required();
  predict->add_option("--first", mo->first, "an IDX file: classify its first N images (0: all)")
      ->check(CLI::NonNegativeNumber);
  predict->add_option("--top", mo->top, "the most probable classes shown per image (default 2)")
      ->check(CLI::PositiveNumber);
  for (auto* sub : {evaluate, predict})
    sub->add_option("-o,--output", *output, "text or json")->check(CLI::IsMember({"text", "json"}));
  return {{evaluate,
           [mo, output] {
             mo->json = *output == "json";
             return adam::cli::Evaluate(*mo);
           }},
          {predict, [mo, output] {
             mo->json = *output == "json";
             return adam::cli::Predict(*mo);
           }}};
}

Command AddPlan(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("plan", "Print the role instances a manifest runs as");
  sub->add_option("file", *path, "AdamJob manifest (YAML)")->required();
  return {sub, [path] {
            auto job = Load(*path);
            if (!job) return kExitInvalid;
            for (const auto& in : adam::spec::MakePlan(*job).instances)
              std::printf("stage %d  %-14s threads %-3d %s\n", in.stage, in.name.c_str(),
                          in.threads,
                          in.host.empty() ? "" : (in.host + ":" + std::to_string(in.port)).c_str());
            return 0;
          }};
}

Command AddRender(CLI::App& app) {
  struct Options {
    std::string path, name_space, output = "yaml";
  };
  auto o = std::make_shared<Options>();
  auto* sub = app.add_subcommand(
      "render", "Print the Kubernetes objects the operator creates for a manifest, as YAML");
  sub->add_option("file", o->path, "AdamJob manifest (YAML)")->required();
  sub->add_option("-n,--namespace", o->name_space, "namespace (default: the manifest's)");
  sub->add_option("-o,--output", o->output,
                  "yaml (documents, as kubectl apply takes them) or json (one list)")
      ->check(CLI::IsMember({"yaml", "json"}));
  return {sub, [o] {
            auto job = Load(o->path);
            if (!job) return kExitInvalid;
            if (!o->name_space.empty()) job->name_space = o->name_space;
            adam::op::RenderOptions ro;
            ro.manifest = adam::ReadWholeFile(o->path).value_or("");  // Load read it a moment ago
            const auto objects = adam::op::Render(*job, ro);
            if (o->output == "json")
              std::printf("%s\n", nlohmann::json(objects).dump(2).c_str());
            else
              std::fputs(adam::op::ToYaml(objects).c_str(), stdout);
            return 0;
          }};
}

// `adam operator`'s flags beside its OperatorOptions: durations as text, parsed at the start.
struct OperatorFlags {
  adam::op::OperatorOptions oo;
  std::string kubeconfig, context;
  std::string lease_duration = "15s", renew_deadline = "10s", retry_period = "2s",
              write_timeout = "2s", restart_backoff = "10s", restart_backoff_max = "5m",
              node_loss_timeout = "2m";
  int certificate_days = 0;
  int child_event_batch_ms = 0;
};

// The flags that time the operator: leader election, writes, back-offs, a lost node.
void AddOperatorTimings(CLI::App* oper, OperatorFlags* o) {
  oper->add_option("--leader-elect-lease-duration", o->lease_duration,
                   "how long a standby waits after the leader's last renewal (30s, 500ms, ...)");
  oper->add_option("--leader-elect-renew-deadline", o->renew_deadline,
                   "how long the leader keeps acting without a renewal");
  oper->add_option("--leader-elect-retry-period", o->retry_period,
                   "how often candidates try the Lease");
  oper->add_option("--api-write-timeout", o->write_timeout,
                   "bound on each write to the API; renew deadline + this < lease duration");
  oper->add_option("--restart-backoff", o->restart_backoff,
                   "wait before a role's pods are made again after its second failure in a row "
                   "(doubling with each further one)");
  oper->add_option("--restart-backoff-max", o->restart_backoff_max,
                   "longest such wait; a role with no failure for twice this starts afresh");
  oper->add_option("--node-loss-timeout", o->node_loss_timeout,
                   "how long a trainer or data server waits on an unreachable node before it is "
                   "deleted at once and made again elsewhere (0s: never)");
}

// The timing flags parsed into o->oo; false (having said which flag) for a malformed one.
bool ParseOperatorTimings(OperatorFlags* o) {
  const std::pair<const char*, std::string*> durations[] = {
      {"--leader-elect-lease-duration", &o->lease_duration},
      {"--leader-elect-renew-deadline", &o->renew_deadline},
      {"--leader-elect-retry-period", &o->retry_period},
      {"--api-write-timeout", &o->write_timeout},
      {"--restart-backoff", &o->restart_backoff},
      {"--restart-backoff-max", &o->restart_backoff_max},
      {"--node-loss-timeout", &o->node_loss_timeout}};
  for (const auto& [flag, text] : durations) {
    const int64_t ms = adam::spec::ParseDurationMs(*text);
    // Only the node-loss timeout may be 0 (never).
    if (ms < 0 || (ms == 0 && text != &o->node_loss_timeout)) {
      std::fprintf(stderr, "adam operator: %s: expected a duration like 15s or 500ms, got '%s'\n",
                   flag, text->c_str());
      return false;
    }
  }
  const auto ms = [](const std::string& text) {
    return std::chrono::milliseconds(adam::spec::ParseDurationMs(text));
  };
  o->oo.lease_duration = ms(o->lease_duration);
  o->oo.renew_deadline = ms(o->renew_deadline);
  o->oo.retry_period = ms(o->retry_period);
  o->oo.write_timeout = ms(o->write_timeout);
  o->oo.restart_backoff = ms(o->restart_backoff);
  o->oo.restart_backoff_max = ms(o->restart_backoff_max);
  o->oo.node_loss_timeout = ms(o->node_loss_timeout);
  return true;
}

Command AddOperator(CLI::App& app) {
  auto o = std::make_shared<OperatorFlags>();
  o->certificate_days = int(o->oo.certificate_validity.count() / 86400);
  o->child_event_batch_ms = int(o->oo.child_event_batch.count());
  adam::op::OperatorOptions& oo = o->oo;
  auto* oper = app.add_subcommand(
      "operator", "Run the Kubernetes operator: reconcile AdamJob resources into pods");
  oper->add_option("--kubeconfig", o->kubeconfig,
                   "kubeconfig file (default: the pod's service account)");
  oper->add_option("--context", o->context, "kubeconfig context (default: its current one)");
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
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double q = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end != '\0' || !(q == 0 || (q >= 0.01 && q <= 10000)))
              return "--kube-api-qps: " + v + " is not 0 (no limit) or from 0.01 to 10000";
            return {};
          },
          "0 or 0.01-10000"));
  oper->add_option("--kube-api-burst", oo.burst, "API requests in a burst")
      ->check(CLI::Range(1, 100000));
  oper->add_option("--child-event-batch-ms", o->child_event_batch_ms,
                   "a job is reconciled this many ms after the first of a burst of changes to its "
                   "pods and other objects (0: at each change)")
      ->check(CLI::Range(0, 60000));
  AddOperatorTimings(oper, o.get());
  oper->add_option("--certificate-days", o->certificate_days,
                   "lifetime of the job certificates it issues (renewed with a third left)")
      ->check(CLI::Range(1, 3650));
  oper->add_option("--default-image", oo.default_image,
                   "image of a job whose spec.image is unset (the chart passes its own)");
  oper->add_flag("--kueue", oo.kueue,
                 "jobs labelled kueue.x-k8s.io/queue-name wait for Kueue to admit their Workload");
  return {oper, [o] {
            SetUpLogging("operator");
            // Wall-clock UTC to the microsecond: operator logs are read beside the API server's.
            spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %l %v", spdlog::pattern_time_type::utc);
            if (!ParseOperatorTimings(o.get())) return kExitInvalid;
            o->oo.child_event_batch = std::chrono::milliseconds(o->child_event_batch_ms);
            if (const char* pod = std::getenv("ADAM_POD_NAME")) o->oo.identity = pod;
            o->oo.certificate_validity = std::chrono::seconds(int64_t(o->certificate_days) * 86400);
            return adam::op::OperatorMain(o->oo, o->kubeconfig, o->context);
          }};
}

int RunAdam(int argc, char** argv) {
  CLI::App app{"Adam: Project Adam's deep-learning training system"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("adam ") + adam::kAdamVersion);
  std::vector<Command> commands = {AddRun(app), AddScale(app), AddValidate(app)};
  for (Command& c : AddModelCommands(app)) commands.push_back(std::move(c));
  commands.push_back(AddPlan(app));
  commands.push_back(AddRender(app));
  commands.push_back(AddOperator(app));
  const adam::spec::RoleCommands roles(&app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end with 0; every usage error with 2, as an invalid manifest does.
    return app.exit(e) == 0 ? 0 : kExitInvalid;
  }
  for (const Command& c : commands)
    if (c.sub->parsed()) return c.run();
  if (const std::optional<adam::spec::RoleOptions> role = roles.Parsed()) return RunRole(*role);
  return kExitInvalid;
}

}  // namespace

int main(int argc, char** argv) {
  adam::ReportCrashes();  // a crash says where in the log, and so in a pod's termination message
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
