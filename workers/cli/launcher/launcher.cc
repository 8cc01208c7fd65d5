// Launcher: the run's stages and endpoints, its state directory and TLS material, what each
// child's exit means, and the evaluator of a final model trainer 0 did not see. The processes
// are children.h's, what the run reports run_log.h's, --kill and --chaos faults.h's.
#include "launcher/launcher.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "core/event.h"
#include "core/exit_codes.h"
#include "core/file.h"
#include "core/ports.h"
#include "core/role_events.h"
#include "launcher/child.h"
#include "launcher/children.h"
#include "launcher/faults.h"
#include "launcher/report.h"
#include "launcher/run_log.h"
#include "net/tls.h"
#include "spec/manifest_watch.h"
#include "spec/plan.h"
#include "spec/role_options.h"

namespace adam::launcher {

namespace {

int g_signal_pipe[2] = {-1, -1};
volatile sig_atomic_t g_signal = 0;

void OnSignal(int sig) {
  g_signal = sig;
  const char c = 1;
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &c, 1);
}

// DIR/ROLE/{ca.crt,tls.crt,tls.key} for each role, from a new CA whose key is not kept.
Status WriteRunCertificates(const std::string& dir) {
  const std::vector<std::string> hosts = {"127.0.0.1", "127.0.0.2", "localhost"};
  ADAM_ASSIGN_OR_RETURN(const net::TlsMaterial ca, net::MakeCertificateAuthority("adam-run"));
  ADAM_ASSIGN_OR_RETURN(const auto roles, net::IssueRoleCertificates(ca, hosts));
  for (const auto& [role, material] : roles)
    ADAM_RETURN_IF_ERROR(net::WriteTls(material, dir + "/" + role));
  return OkStatus();
}

class Supervisor {
 public:
  Supervisor(const spec::AdamJob& job, const RunOptions& o) : job_(job), o_(o), log_(job, o) {}

  int Run() {
    if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      std::fprintf(stderr, "adam run: pipe: %s\n", std::strerror(errno));
      return 1;
    }
    // Every way the run can be told to end stops the roles and removes what it made: an
    // interrupt, a terminal that hangs up, and a reader that closed the pipe (`adam run | head`).
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaction(sig, &sa, nullptr);
    // Outputs are checked before anything trains: a report that cannot be written is found now,
    // not after the run.
    if (int code = CheckOutputs(); code != 0) return Restore(code);
    PrintModelSize();
    bool temporary = false;
    if (int code = OpenStateRoot(&temporary); code != 0) return Restore(code);
    if (!o_.plaintext) {
      // A throw-away CA and a certificate per role for this run (net/access.h): each role's
      // processes get their own role's key only.
      if (Status w = WriteRunCertificates(state_root_ + "/tls"); !w.ok()) {
        std::fprintf(stderr, "adam run: TLS material: %s\n", w.message().c_str());
        return Restore(1);
      }
      tls_dir_ = state_root_ + "/tls";
    }
    spec::Plan plan = spec::MakePlan(job_);
    if (!PickPorts(plan)) return 1;
    if (int code = FollowManifest(plan); code != 0) return Restore(code);
    faults_.emplace(o_, ha_);
    log_.set_state_root(state_root_);
    PlanCpus(plan);
    int code = 1;
    try {
      code = RunPlan(plan);
    } catch (const std::exception& e) {  // never leave the roles and the run's files behind
      Fail(nullptr, std::string("internal error: ") + e.what());
    }
    StopAll();
    if (!o_.report_dir.empty() && !log_.WriteReport(code) && code == 0) code = 1;
    if (temporary) {
      std::error_code ec;
      std::filesystem::remove_all(state_root_, ec);
    }
    if (code == 0) log_.PrintSummary();
    return Restore(code);
  }

 private:
  // How big the model is, before any role allocates it.
  void PrintModelSize() const {
    auto shapes = spec::InferShapes(job_.model);
    if (!shapes.ok()) return;
    int64_t params = 0;
    for (const auto& l : *shapes) params += l.weights + l.biases;
    std::fprintf(stderr,
                 "adam run: %s: %s parameters (%.1f MB) in %zu layers on %d parameter servers\n",
                 job_.name.c_str(), Thousands(double(params)).c_str(), double(params) * 4 / 1e6,
                 job_.model.layers.size(), job_.roles.parameter_server.replicas);
  }

  // Parameter-server checkpoints: the caller's directory (kept, resumed from, and locked for
  // this run), or a throw-away one for this run (`*temporary`). Returns an exit code, 0 = go on.
  int OpenStateRoot(bool* temporary) {
    state_root_ = o_.state_dir;
    if (!state_root_.empty()) {
      if (int code = LockStateDir(); code != 0) return code;
      return o_.resume ? CheckResumable() : 0;
    }
    std::string tmpl = (std::filesystem::temp_directory_path() / "adam-run-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::fprintf(stderr, "adam run: mkdtemp: %s\n", std::strerror(errno));
      return 1;
    }
    state_root_ = tmpl;
    *temporary = true;
    return 0;
  }

  // Puts the signals back and closes the lock; returns `code`.
  int Restore(int code) {
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) signal(sig, SIG_DFL);
    if (g_signal_pipe[0] >= 0) close(g_signal_pipe[0]);
    if (g_signal_pipe[1] >= 0) close(g_signal_pipe[1]);
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
    if (lock_fd_ >= 0) close(lock_fd_);  // releases the state directory
    lock_fd_ = -1;
    return code;
  }

  // --report DIR and --prometheus-sd FILE: made and written to once before anything runs.
  int CheckOutputs() {
    auto probe = [](const std::filesystem::path& file) -> std::string {
      std::error_code ec;
      if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
      if (ec) return ec.message();
      const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0) return std::strerror(errno);
      close(fd);
      std::filesystem::remove(file, ec);
      return "";
    };
    // flag, its value, and the file written to try it (in the directory, or beside the file).
    const std::tuple<const char*, const std::string&, std::string> outputs[] = {
        {"--report", o_.report_dir, o_.report_dir + "/.adam-write-check"},
        {"--model-out", o_.model_out, o_.model_out + ".adam-write-check"},
        {"--prometheus-sd", o_.prometheus_sd, o_.prometheus_sd + ".adam-write-check"}};
    for (const auto& [flag, value, check] : outputs) {
      if (value.empty()) continue;
      const std::string why = probe(check);
      if (!why.empty()) {
        std::fprintf(stderr, "adam run: %s %s: cannot write there: %s\n", flag, value.c_str(),
                     why.c_str());
        return kExitInvalid;
      }
    }
    return 0;
  }

  // The controller members (copies > 1), and the manifest the roles are given: with copies, a
  // copy in the state directory, which `adam scale` rewrites and this run follows for the server
  // count (elastic parameter servers).
  int FollowManifest(const spec::Plan& plan) {
    members_ = spec::ControllerMembersOf(plan);
    ha_ = spec::ControllerOwnsShards(job_);
    job_path_ = o_.job_path;
    if (!ha_) return 0;
    job_path_ = RunManifestPath(state_root_);
    if (Status st = WriteManifest(job_path_, ReadWholeFile(o_.job_path).value_or("")); !st.ok()) {
      std::fprintf(stderr, "adam run: %s\n", std::string(st.message()).c_str());
      return 1;
    }
    ps_wanted_.store(job_.roles.parameter_server.replicas);
    ps_follower_ = spec::FollowParamServerCount(job_path_, job_.roles.parameter_server.replicas,
                                                [this](int n) { ps_wanted_.store(n); });
    if (!o_.state_dir.empty() && !o_.quiet)
      std::fprintf(stderr,
                   "adam run: servers join or leave while it runs: adam scale --state-dir %s "
                   "--parameter-servers N\n",
                   state_root_.c_str());
    return 0;
  }

  // One run at a time per --state-dir: a second would overwrite the first's certificates and
  // checkpoints under it. The lock (flock on DIR/.lock, which names the holder) goes with the
  // process, however it ends.
  int LockStateDir() {
    std::error_code ec;
    std::filesystem::create_directories(state_root_, ec);
    const std::string path = state_root_ + "/.lock";
    lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (ec || lock_fd_ < 0) {
      std::fprintf(stderr, "adam run: --state-dir %s: cannot use it: %s\n", state_root_.c_str(),
                   ec ? ec.message().c_str() : std::strerror(errno));
      return kExitInvalid;
    }
    if (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      char holder[128] = {};
      const ssize_t n = pread(lock_fd_, holder, sizeof holder - 1, 0);
      std::string who = n > 0 ? std::string(holder, size_t(n)) : "";
      while (!who.empty() && who.back() == '\n') who.pop_back();
      std::fprintf(stderr,
                   "adam run: --state-dir %s is in use by another adam run (%s); wait for it "
                   "to end or give another directory\n",
                   state_root_.c_str(), who.empty() ? "its process holds the lock" : who.c_str());
      return kExitInvalid;
    }
    const std::string me = "pid " + std::to_string(getpid()) + ", job " + job_.name + "\n";
    if (ftruncate(lock_fd_, 0) != 0 ||
        pwrite(lock_fd_, me.data(), me.size(), 0) != ssize_t(me.size()))
      std::fprintf(stderr, "adam run: cannot note this run in %s\n", path.c_str());
    return 0;
  }

  // --resume: every parameter server's directory holds a checkpoint file (whether it is usable
  // the server finds when it restores it, naming the file).
  int CheckResumable() {
    for (int i = 0; i < job_.roles.parameter_server.replicas; ++i) {
      const std::string dir = state_root_ + "/" + spec::RoleSubcommand(spec::Role::kParamServer) +
                              "-" + std::to_string(i);
      bool found = false;
      std::error_code ec;
      for (const auto& de : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = de.path().filename().string();
        found = found || (name.rfind("ckpt-", 0) == 0 && name.size() > 10 &&
                          name.compare(name.size() - 5, 5, ".adam") == 0);
      }
      if (!found) {
        std::fprintf(stderr,
                     "adam run: --resume %s: no checkpoint of parameter server %s-%d in %s "
                     "(a run with --state-dir %s leaves one per server)\n",
                     state_root_.c_str(), spec::RoleSubcommand(spec::Role::kParamServer), i,
                     dir.c_str(), state_root_.c_str());
        return kExitInvalid;
      }
    }
    return 0;
  }

  // Controller members, and the workers of a split replica, know each other's addresses before
  // they start: their ports are picked here. False (said) when a host has none free.
  static bool PickPorts(spec::Plan& plan) {
    for (auto& in : plan.instances)
      if (in.role == spec::Role::kController ||
          (in.role == spec::Role::kTrainer && !in.host.empty())) {
        in.port = FreePort(in.host);
        if (in.port == 0) {
          std::fprintf(stderr, "adam run: no free port on %s for %s\n", in.host.c_str(),
                       in.name.c_str());
          return false;
        }
      }
    return true;
  }

  int RunPlan(const spec::Plan& plan) {
    int max_stage = 0;
    for (const auto& in : plan.instances) max_stage = std::max(max_stage, in.stage);
    spec::Endpoints endpoints;
    endpoints.controller_members = members_;
    endpoints.model_workers = spec::ModelWorkerAddresses(plan);
    for (int stage = 0; stage <= max_stage; ++stage) {
      if (stage > 0) {
        endpoints = {};
        endpoints.controller_members = members_;
        endpoints.model_workers = spec::ModelWorkerAddresses(plan);
        for (const auto& c : children_.all()) {
          const std::string addr = c.inst.host + ":" + std::to_string(c.port);
          if (c.inst.role == spec::Role::kDataServer) endpoints.data_servers.push_back(addr);
          if (c.inst.role == spec::Role::kParamServer) endpoints.param_servers.push_back(addr);
        }
      }
      if (stage == max_stage) {
        log_.TrainingStarted();
        endpoints_ = endpoints;  // what restarted trainers and the final evaluator are given
      }
      for (const auto& in : plan.instances)
        if (in.stage == stage && !Spawn(in, endpoints)) return 1;
      // Every serving role of this stage must listen before the next stage starts.
      const auto deadline = o_.clock->Now() + o_.ready_timeout;
      while (stage < max_stage && !StageReady(stage)) {
        if (int code = Pump(); code >= 0) return code;
        if (o_.clock->Now() > deadline) {
          Fail(nullptr, "roles did not become ready within " +
                            std::to_string(o_.ready_timeout.count()) + " s");
          return 1;
        }
      }
    }
    // Run until every trainer has exited.
    while (true) {
      if (int code = Pump(); code >= 0) return code;
      faults_->Tick(log_.TrainSeconds(), children_.all(), log_,
                    [this](const spec::RoleInstance& in) { Spawn(in, endpoints_); });
      if (!StartJoiningServers(plan)) return 1;
      log_.SampleRate();
      bool all_done = !faults_->RestartingAReplica();
      for (const auto& c : children_.all())
        if (c.inst.role == spec::Role::kTrainer && !c.exited) all_done = false;
      if (all_done) break;
    }
    log_.TrainingEnded();
    return EvaluateWithoutTrainer0(plan);
  }

  // Elastic servers: every server below the count the manifest now asks for runs, those that
  // joined (or retired and are wanted again) started like the plan's first one, unbound (the
  // plan's CPU slices are taken). Servers above it retire by themselves once the controller
  // has moved their copies (event "retired").
  bool StartJoiningServers(const spec::Plan& plan) {
    const int wanted = ps_wanted_.load();
    const spec::RoleInstance* first = nullptr;
    for (const auto& in : plan.instances)
      if (in.role == spec::Role::kParamServer && in.index == 0) first = &in;
    if (first == nullptr) return true;
    for (int i = 0; i < wanted; ++i) {
      const std::string name =
          spec::RoleSubcommand(spec::Role::kParamServer) + std::string("-") + std::to_string(i);
      bool running = false, known = false;
      for (const auto& c : children_.all())
        if (c.inst.name == name) {
          known = true;
          running = running || !c.exited;
        }
      if (running || (known && !retired_.count(name))) continue;  // a killed one: faults' call
      spec::RoleInstance in = *first;
      in.index = i;
      in.name = name;
      no_bind_.insert(name);
      retired_.erase(name);
      std::fprintf(stderr, "adam run: starting %s: the job now has %d parameter servers\n",
                   name.c_str(), wanted);
      if (!Spawn(in, endpoints_)) return false;
    }
    return true;
  }

  // Trainer 0 evaluates the model after every epoch. When it did not live to the end (killed
  // while the others trained on), the job's result is not its last evaluation but one of the
  // final model: an evaluator (`adam trainer --evaluate-only` with trainer 0's arguments) pulls
  // it from the parameter servers and measures it on the test set. Returns the run's exit code.
  int EvaluateWithoutTrainer0(const spec::Plan& plan) {
    const spec::RoleInstance* t0 = nullptr;
    for (const auto& in : plan.instances)
      if (in.role == spec::Role::kTrainer && in.index == 0 && in.model_worker == 0) t0 = &in;
    if (t0 == nullptr || !log_.NeedsFinalEvaluation()) return 0;
    spec::RoleInstance in = *t0;
    in.name = "evaluator";
    if (!Spawn(in, endpoints_, /*evaluate_only=*/true)) return 1;
    const auto deadline = o_.clock->Now() + o_.ready_timeout;
    while (true) {
      if (int code = Pump(); code >= 0) return code;
      const Child& c = children_.all().back();
      if (c.exited) break;
      if (o_.clock->Now() > deadline) {
        Fail(&c, "the evaluator did not finish within " + std::to_string(o_.ready_timeout.count()) +
                     " s");
        return 1;
      }
    }
    if (!log_.TakeFinalEvaluation()) {
      Fail(&children_.all().back(), "the evaluator of the final model reported no accuracy");
      return 1;
    }
    return 0;
  }

  // Emulates the exclusive cpusets a cluster gives trainer pods: when the trainers' threads fit
  // in this process's CPUs, each trainer gets a disjoint slice (and binds its threads inside
  // it); otherwise no trainer binds, so two never pin to the same core.
  void PlanCpus(const spec::Plan& plan) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    int needed = 0;
    for (const auto& in : plan.instances)
      if (in.role == spec::Role::kTrainer) needed += in.threads;
    size_t next = 0;
    for (const auto& in : plan.instances) {
      if (in.role != spec::Role::kTrainer) continue;
      if (needed > int(cpus.size())) {
        no_bind_.insert(in.name);
        continue;
      }
      auto& set = cpus_[in.name];
      for (int k = 0; k < in.threads; ++k) set.push_back(cpus[next++]);
    }
  }

  // Every process of the stage listens, but those that ended without failing the run (one the
  // job goes on without that died as it started: the next stage must not wait for it).
  bool StageReady(int stage) const {
    for (const auto& c : children_.all())
      if (c.inst.stage == stage && !c.ready && !c.exited) return false;
    return true;
  }

  bool Spawn(const spec::RoleInstance& in, const spec::Endpoints& endpoints,
             bool evaluate_only = false) {
    spec::RoleOptions options = spec::OptionsFor(in, job_path_, endpoints);
    spec::CommonRoleOptions& common = spec::Common(options);
    if (tls_dir_.empty()) {
      common.plaintext = true;
    } else {
      common.tls_dir = tls_dir_ + "/" + spec::RoleSubcommand(in.role);
    }
    const bool no_bind = no_bind_.count(in.name) > 0;
    const std::string state_dir = state_root_ + "/" + in.name;
    if (auto* t = std::get_if<spec::TrainerOptions>(&options)) {
      t->evaluate_only = evaluate_only;
      t->no_bind = no_bind;
      // Trainer 0 evaluates the model after every epoch (the evaluator, given trainer 0's
      // options, when it did not finish): it writes the one the summary reports.
      if (!o_.model_out.empty() && in.index == 0)
        t->model_out = std::filesystem::absolute(o_.model_out).string();
    }
    if (auto* p = std::get_if<spec::ParamServerOptions>(&options)) {
      p->no_bind = no_bind;
      p->state_dir = state_dir;
    }
    if (auto* c = std::get_if<spec::ControllerOptions>(&options)) c->state_dir = state_dir;
    std::vector<std::string> args = spec::ToArgs(options);
    args.insert(args.begin(), o_.executable);
    const auto slice = cpus_.find(in.name);
    auto started = children_.Start(in, std::move(args),
                                   slice != cpus_.end() ? slice->second : std::vector<int>{});
    if (!started.ok()) {
      Fail(nullptr, started.status().message());
      return false;
    }
    return true;
  }

  // Reads output and reaps children once; returns an exit code to stop with, or -1.
  int Pump() {
    const std::vector<Child*> exited = children_.Poll(g_signal_pipe[0]);
    if (g_signal) {
      if (g_signal != SIGPIPE) std::fprintf(stderr, "adam run: interrupted; stopping every role\n");
      return 128 + g_signal;
    }
    for (Child* c : exited) {
      WriteScrapeTargets();
      if (int code = Exited(*c); code >= 0) return code;
    }
    return -1;
  }

  // Whether the job goes on without a process of `role` that died: a parameter server or
  // controller member with copies (failover), a data server with other replicas.
  bool GoesOnWithout(spec::Role role) const {
    if (role == spec::Role::kDataServer) return job_.roles.data_server.replicas > 1;
    return ha_ && (role == spec::Role::kParamServer || role == spec::Role::kController);
  }

  // What a child's exit means for the run: an exit code to stop with, or -1 to go on.
  int Exited(const Child& c) {
    const int status = c.wait_status;
    const bool ok_exit = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (c.inst.role == spec::Role::kTrainer && ok_exit) {
      if (c.inst.model_worker == 0) finished_.insert(c.inst.index);
      return -1;
    }
    if (!c.expected_exit && GoesOnWithout(c.inst.role)) {
      std::fprintf(stderr, "adam run: %s %s; the job goes on without it\n", c.inst.name.c_str(),
                   ExitText(status).c_str());
      ShowLastLines(c, 3);
      return -1;
    }
    if (!c.expected_exit && c.inst.role == spec::Role::kTrainer && WIFEXITED(status) &&
        WEXITSTATUS(status) == kExitDiverged) {
      Fail(nullptr,
           log_.diverged().empty() ? c.inst.name + ": training diverged" : log_.diverged());
      return kExitDiverged;
    }
    if (replica_kills_.erase(c.pid) > 0) return -1;  // stopped by its replica's restart
    // A split replica's process that ended, killed on purpose or not, restarts its replica.
    if (RestartReplica(c)) return -1;
    if (c.expected_exit) return -1;
    Fail(&c, c.inst.name + " " + ExitText(status));
    // A role that refused its input (a data file) makes the run's exit 2, as a manifest does.
    return WIFEXITED(status) && WEXITSTATUS(status) == kExitInvalid ? kExitInvalid : kExitFailed;
  }

  // A split replica is one unit, as its pods are on Kubernetes: when one of its processes ends
  // other than done (killed, or failed: a lost model worker fails its lead, a lost lead its
  // workers), the others are stopped and all of them start again a second later, rejoining
  // where the job is. At most kMaxReplicaRestarts times per replica; after that the run fails as
  // for any role (goes on, for a process killed on purpose).
  bool RestartReplica(const Child& failed) {
    if (failed.inst.role != spec::Role::kTrainer || job_.roles.trainer.model_workers < 2 ||
        failed.inst.name == "evaluator")
      return false;
    const int i = failed.inst.index;
    if (finished_.count(i)) {  // its lead is done: a worker cut off while stopping is no fault
      std::fprintf(stderr, "adam run: %s %s after trainer-%d finished\n", failed.inst.name.c_str(),
                   ExitText(failed.wait_status).c_str(), i);
      return true;
    }
    int& restarts = replica_restarts_[i];
    if (restarts >= kMaxReplicaRestarts) return false;
    ++restarts;
    const double t = log_.TrainSeconds();
    std::fprintf(stderr,
                 "adam run: %s %s; restarting split replica trainer-%d whole (%d of %d times)\n",
                 failed.inst.name.c_str(), ExitText(failed.wait_status).c_str(), i, restarts,
                 kMaxReplicaRestarts);
    log_.Mark("restart split replica trainer-" + std::to_string(i));
    std::map<std::string, spec::RoleInstance> members;
    for (auto& c : children_.all()) {
      if (c.inst.role != spec::Role::kTrainer || c.inst.index != i || c.inst.name == "evaluator")
        continue;
      members.emplace(c.inst.name, c.inst);
      if (c.exited) continue;
      c.expected_exit = true;
      replica_kills_.insert(c.pid);
      kill(c.pid, SIGKILL);
    }
    // A second later, each on a new port of the exchange (a process that could not listen, its
    // port taken by another since the plan picked it, gets another chance), all told the others'.
    std::vector<spec::RoleInstance> group;
    group.reserve(members.size());
    for (const auto& [name, in] : members) group.push_back(in);
    std::sort(group.begin(), group.end(),
              [](const auto& a, const auto& b) { return a.model_worker < b.model_worker; });
    std::vector<std::string> addresses;
    for (auto& in : group) {
      if (const int port = FreePort(in.host); port > 0) in.port = port;
      addresses.push_back(in.host + ":" + std::to_string(in.port));
    }
    if (size_t(i) < endpoints_.model_workers.size())
      endpoints_.model_workers[size_t(i)] = addresses;
    for (const auto& in : group) faults_->Restart(in, t + 1.0);
    return true;
  }

  void Line(Child& c, const std::string& line) {
    if (auto ev = ParseEvent(line)) {  // an event; one of a kind unknown here is not acted on
      if (auto typed = events::FromJson(*ev)) Event(c, *typed);
      return;
    }
    c.tail.push_back(line);
    while (int(c.tail.size()) > o_.tail_lines) c.tail.pop_front();
    if (!o_.quiet) std::fprintf(stderr, "[%s] %s\n", c.inst.name.c_str(), line.c_str());
  }

  void Event(Child& c, const events::RoleEvent& ev) {
    if (const auto* ready = std::get_if<events::Ready>(&ev)) {
      c.ready = true;
      c.port = ready->port;
      c.metrics_port = ready->metrics_port;
      WriteScrapeTargets();
      return;
    }
    if (std::holds_alternative<events::Retired>(ev)) {
      c.expected_exit = true;  // the job no longer wants it; it exits 0 once stopped
      retired_.insert(c.inst.name);
    }
    log_.OnEvent(c.inst.name, ev);
  }

  // Prometheus file-based service discovery (--prometheus-sd): every live role's /metrics,
  // labelled with its job, role and instance; rewritten (atomically) whenever one starts.
  void WriteScrapeTargets() {
    if (o_.prometheus_sd.empty()) return;
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& c : children_.all()) {
      if (c.exited || c.metrics_port <= 0) continue;
      const std::string host = c.inst.host.empty() ? "127.0.0.1" : c.inst.host;
      groups.push_back({{"targets", {host + ":" + std::to_string(c.metrics_port)}},
                        {"labels",
                         {{"adam_job", job_.name},
                          {"role", spec::RoleSubcommand(c.inst.role)},
                          {"instance_name", c.inst.name}}}});
    }
    const std::string tmp = o_.prometheus_sd + ".tmp";
    {
      std::ofstream out(tmp);
      out << groups.dump(2) << "\n";
    }
    std::error_code ec;
    std::filesystem::rename(tmp, o_.prometheus_sd, ec);
    if (ec)
      std::fprintf(stderr, "adam run: cannot write %s: %s\n", o_.prometheus_sd.c_str(),
                   ec.message().c_str());
  }

  void Fail(const Child* c, const std::string& why) {
    std::fprintf(stderr, "adam run: %s\n", why.c_str());
    if (c) ShowLastLines(*c, c->tail.size());
  }

  // The last `n` lines `c` logged (what a role that ended says of why).
  static void ShowLastLines(const Child& c, size_t n) {
    if (c.tail.empty()) return;
    std::fprintf(stderr, "adam run: last lines of %s:\n", c.inst.name.c_str());
    for (size_t i = c.tail.size() - std::min(n, c.tail.size()); i < c.tail.size(); ++i)
      std::fprintf(stderr, "  %s\n", c.tail[i].c_str());
  }

  void StopAll() { children_.StopAll(o_.stop_grace, *o_.clock); }

  const spec::AdamJob& job_;
  const RunOptions& o_;
  RunLog log_;
  std::string state_root_;  // parameter servers' checkpoints: <state_root_>/<name>
  Children children_{[this](Child& c, const std::string& line) { Line(c, line); }};
  std::map<std::string, std::vector<int>> cpus_;  // trainer name -> its CPU slice
  std::set<std::string> no_bind_;                 // trainers that must not bind
  spec::ControllerMembers members_;               // controller members (copies > 1), else empty
  bool ha_ = false;
  std::optional<Faults> faults_;
  std::string tls_dir_;            // the run's TLS material; empty: --plaintext
  spec::Endpoints endpoints_;      // the last stage's: data server, parameter servers, controller
  int lock_fd_ = -1;               // holds the --state-dir lock
  std::string job_path_;           // the manifest the roles follow (RunManifestPath)
  std::atomic<int> ps_wanted_{0};  // its parameter-server count
  std::unique_ptr<spec::ManifestWatcher> ps_follower_;  // sets ps_wanted_
  std::set<std::string> retired_;                       // servers that left the job
  static constexpr int kMaxReplicaRestarts = 3;
  std::map<int, int> replica_restarts_;  // split replicas started again, by trainer index
  std::set<int> finished_;               // trainers (leads) that exited 0
  std::set<pid_t> replica_kills_;        // processes a replica's restart stopped
};

}  // namespace

int Run(const spec::AdamJob& job, const RunOptions& options) {
  Supervisor s(job, options);
  return s.Run();
}

}  // namespace adam::launcher
