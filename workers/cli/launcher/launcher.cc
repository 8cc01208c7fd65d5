// Launcher: fork/exec, a poll loop over the children's pipes, events, progress and summary.
#include "launcher/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "core/event.h"
#include "core/exit_codes.h"
#include "core/ports.h"
#include "launcher/report.h"
#include "net/tls.h"
#include "spec/plan.h"
#include "spec/role_options.h"

namespace adam::launcher {
namespace {

using Clock = std::chrono::steady_clock;

int g_signal_pipe[2] = {-1, -1};
volatile sig_atomic_t g_signal = 0;

void OnSignal(int sig) {
  g_signal = sig;
  const char c = 1;
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &c, 1);
}

struct Child {
  spec::RoleInstance inst;
  pid_t pid = -1;
  int fd = -1;
  std::string buf;
  std::deque<std::string> tail;
  bool exited = false;
  int wait_status = 0;
  bool ready = false;
  int port = 0;
  int metrics_port = 0;
  bool expected_exit = false;  // we asked it to stop
};

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string ExitText(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

std::string Clock2(double s) {
  const int t = int(s);
  char b[32];
  if (t >= 3600)
    std::snprintf(b, sizeof b, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(b, sizeof b, "%d:%02d", t / 60, t % 60);
  return b;
}

std::string Percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100 * fraction);
  return buf;
}

std::string Thousands(double v) {
  const std::string digits = std::to_string(int64_t(std::llround(v)));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') out += ',';
    out += digits[i];
  }
  return out;
}

class Supervisor {
 public:
  Supervisor(const spec::AdamJob& job, const RunOptions& o) : job_(job), o_(o) {}

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
    start_ = Clock::now();
    // Outputs are checked before anything trains: a report that cannot be written is found now,
    // not after the run.
    if (int code = CheckOutputs(); code != 0) return Restore(code);
    // How big the model is, before any role allocates it.
    if (auto shapes = spec::InferShapes(job_.model); shapes.ok()) {
      int64_t params = 0;
      for (const auto& l : *shapes) params += l.weights + l.biases;
      std::fprintf(stderr,
                   "adam run: %s: %s parameters (%.1f MB) in %zu layers on %d parameter "
                   "servers\n",
                   job_.name.c_str(), Thousands(double(params)).c_str(), double(params) * 4 / 1e6,
                   job_.model.layers.size(), job_.roles.parameter_server.replicas);
    }
    // Parameter-server checkpoints: the caller's directory (kept, resumed from, and locked for
    // this run), or a throw-away one for this run.
    state_root_ = o_.state_dir;
    bool temporary = false;
    if (!state_root_.empty()) {
      if (int code = LockStateDir(); code != 0) return Restore(code);
      if (o_.resume)
        if (int code = CheckResumable(); code != 0) return Restore(code);
    } else {
      std::string tmpl = (std::filesystem::temp_directory_path() / "adam-run-XXXXXX").string();
      if (mkdtemp(tmpl.data()) == nullptr) {
        std::fprintf(stderr, "adam run: mkdtemp: %s\n", std::strerror(errno));
        return 1;
      }
      state_root_ = tmpl;
      temporary = true;
    }
    if (!o_.plaintext) {
      // A throw-away CA and certificate for this run: every role presents it and demands it.
      auto tls = net::MakeJobCertificates(job_.name, {"127.0.0.1", "127.0.0.2", "localhost"});
      Status w = tls.ok() ? net::WriteTls(*tls, state_root_ + "/tls") : tls.status();
      if (!w.ok()) {
        std::fprintf(stderr, "adam run: TLS material: %s\n", w.message().c_str());
        return 1;
      }
      tls_dir_ = state_root_ + "/tls";
    }
    spec::Plan plan = spec::MakePlan(job_);
    for (auto& in : plan.instances)
      if (in.role == spec::Role::kController) {
        in.port = FreePort(in.host);
        if (in.port == 0) {
          std::fprintf(stderr, "adam run: no free port on %s for %s\n", in.host.c_str(),
                       in.name.c_str());
          return 1;
        }
      }
    members_ = spec::ControllerMembers(plan);
    ha_ = !members_.empty();
    PlanCpus(plan);
    int code = 1;
    try {
      code = RunPlan(plan);
    } catch (const std::exception& e) {  // never leave the roles and the run's files behind
      Fail(nullptr, std::string("internal error: ") + e.what());
    }
    StopAll();
    if (!o_.report_dir.empty() && !WriteReport(code) && code == 0) code = 1;
    if (temporary) {
      std::error_code ec;
      std::filesystem::remove_all(state_root_, ec);
    }
    if (code == 0) PrintSummary();
    return Restore(code);
  }

 private:
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

  int RunPlan(const spec::Plan& plan) {
    int max_stage = 0;
    for (const auto& in : plan.instances) max_stage = std::max(max_stage, in.stage);
    spec::Endpoints endpoints;
    endpoints.controller_members = members_;
    for (int stage = 0; stage <= max_stage; ++stage) {
      if (stage > 0) {
        endpoints = {};
        endpoints.controller_members = members_;
        for (const auto& c : children_) {
          const std::string addr = c.inst.host + ":" + std::to_string(c.port);
          if (c.inst.role == spec::Role::kDataServer) endpoints.data_server = addr;
          if (c.inst.role == spec::Role::kParamServer) endpoints.param_servers.push_back(addr);
        }
      }
      if (stage == max_stage) {
        train_start_ = Clock::now();
        endpoints_ = endpoints;  // what restarted trainers and the final evaluator are given
      }
      for (const auto& in : plan.instances)
        if (in.stage == stage && !Spawn(in, endpoints)) return 1;
      // Every serving role of this stage must listen before the next stage starts.
      const auto deadline = Clock::now() + o_.ready_timeout;
      while (stage < max_stage && !StageReady(stage)) {
        if (int code = Pump(); code >= 0) return code;
        if (Clock::now() > deadline) {
          Fail(nullptr, "roles did not become ready within " +
                            std::to_string(o_.ready_timeout.count()) + " s");
          return 1;
        }
      }
    }
    // Run until every trainer has exited.
    while (true) {
      if (int code = Pump(); code >= 0) return code;
      InjectFaults();
      SampleRate();
      bool all_done = true;
      for (const auto& c : children_)
        if (c.inst.role == spec::Role::kTrainer && !c.exited) all_done = false;
      if (all_done) break;
    }
    train_end_ = Clock::now();
    return EvaluateWithoutTrainer0(plan);
  }

  // Trainer 0 evaluates the model after every epoch. When it did not live to the end (killed
  // while the others trained on), the job's result is not its last evaluation but one of the
  // final model: an evaluator (`adam trainer --evaluate-only` with trainer 0's arguments) pulls
  // it from the parameter servers and measures it on the test set. Returns the run's exit code.
  int EvaluateWithoutTrainer0(const spec::Plan& plan) {
    if (done_.count(0) || done_.empty()) return 0;
    const spec::RoleInstance* t0 = nullptr;
    for (const auto& in : plan.instances)
      if (in.role == spec::Role::kTrainer && in.index == 0) t0 = &in;
    if (t0 == nullptr) return 0;
    for (const auto& [_, ev] : done_)
      last_epoch_ = std::max(last_epoch_, int(EventInt(ev, "epochs", 0)));
    std::fprintf(stderr,
                 "adam run: trainer-0 did not finish (its last evaluation was after epoch %d); "
                 "evaluating the final model (epoch %d) with an evaluator\n",
                 evaluated_epoch_, last_epoch_);
    spec::RoleInstance in = *t0;
    in.name = "evaluator";
    if (!Spawn(in, endpoints_, /*evaluate_only=*/true)) return 1;
    const auto deadline = Clock::now() + o_.ready_timeout;
    while (true) {
      if (int code = Pump(); code >= 0) return code;
      const Child& c = children_.back();
      if (c.exited) break;
      if (Clock::now() > deadline) {
        Fail(&c, "the evaluator did not finish within " + std::to_string(o_.ready_timeout.count()) +
                     " s");
        return 1;
      }
    }
    if (final_accuracy_ < 0) {
      Fail(&children_.back(), "the evaluator of the final model reported no accuracy");
      return 1;
    }
    last_accuracy_ = final_accuracy_;
    Mark("final model evaluated without trainer-0");
    std::fprintf(stderr, "adam run: the final model: test accuracy %s\n",
                 Percent(last_accuracy_).c_str());
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

  bool StageReady(int stage) const {
    for (const auto& c : children_)
      if (c.inst.stage == stage && !c.ready) return false;
    return true;
  }

  bool Spawn(const spec::RoleInstance& in, const spec::Endpoints& endpoints,
             bool evaluate_only = false) {
    spec::RoleOptions options = spec::OptionsFor(in, o_.job_path, endpoints);
    spec::CommonRoleOptions& common = spec::Common(options);
    if (tls_dir_.empty()) {
      common.plaintext = true;
    } else {
      common.tls_dir = tls_dir_;
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
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    const auto slice = cpus_.find(in.name);
    if (slice != cpus_.end())
      for (int c : slice->second) CPU_SET(c, &cpus);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      Fail(nullptr, std::string("pipe: ") + std::strerror(errno));
      return false;
    }
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
      Fail(nullptr, std::string("fork: ") + std::strerror(errno));
      return false;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      if (slice != cpus_.end()) sched_setaffinity(0, sizeof cpus, &cpus);
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      std::vector<char*> argv;
      argv.reserve(args.size() + 1);
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
      _exit(127);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    Child c;
    c.inst = in;
    c.pid = pid;
    c.fd = fds[0];
    c.ready = in.role == spec::Role::kTrainer;  // trainers serve nothing others wait on
    children_.push_back(std::move(c));
    return true;
  }

  // Reads output and reaps children once; returns an exit code to stop with, or -1.
  int Pump() {
    std::vector<pollfd> pfds;
    std::vector<Child*> owners;
    pfds.push_back({g_signal_pipe[0], POLLIN, 0});
    owners.push_back(nullptr);
    for (auto& c : children_)
      if (c.fd >= 0) {
        pfds.push_back({c.fd, POLLIN, 0});
        owners.push_back(&c);
      }
    poll(pfds.data(), pfds.size(), 200);
    for (size_t i = 1; i < pfds.size(); ++i)
      if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) ReadFrom(*owners[i]);
    if (g_signal) {
      if (g_signal != SIGPIPE) std::fprintf(stderr, "adam run: interrupted; stopping every role\n");
      return 128 + g_signal;
    }
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& c : children_) {
        if (c.pid != pid) continue;
        if (c.fd >= 0) {
          // Drain what it wrote before dying.
          ReadFrom(c);
          while (c.fd >= 0 && ReadFrom(c)) {
          }
        }
        c.exited = true;
        c.wait_status = status;
        WriteScrapeTargets();
        const bool ok_exit = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (c.inst.role == spec::Role::kTrainer && ok_exit) continue;
        if (ha_ && !c.expected_exit &&
            (c.inst.role == spec::Role::kParamServer || c.inst.role == spec::Role::kController)) {
          std::fprintf(stderr, "adam run: %s %s; the job goes on without it\n", c.inst.name.c_str(),
                       ExitText(status).c_str());
          continue;
        }
        if (!c.expected_exit && c.inst.role == spec::Role::kTrainer && WIFEXITED(status) &&
            WEXITSTATUS(status) == kExitDiverged) {
          Fail(nullptr, diverged_.empty() ? c.inst.name + ": training diverged" : diverged_);
          return kExitDiverged;
        }
        if (!c.expected_exit) {
          Fail(&c, c.inst.name + " " + ExitText(status));
          // A role that refused its input (a data file) makes the run's exit 2, as a manifest does.
          return WIFEXITED(status) && WEXITSTATUS(status) == kExitInvalid ? kExitInvalid
                                                                          : kExitFailed;
        }
      }
    }
    return -1;
  }

  // Reads what is available; returns true if it read something.
  bool ReadFrom(Child& c) {
    char buf[65536];
    const ssize_t n = read(c.fd, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      if (!c.buf.empty()) Line(c, c.buf);
      c.buf.clear();
      close(c.fd);
      c.fd = -1;
      return false;
    }
    if (n < 0) return false;
    c.buf.append(buf, size_t(n));
    size_t pos;
    while ((pos = c.buf.find('\n')) != std::string::npos) {
      Line(c, c.buf.substr(0, pos));
      c.buf.erase(0, pos + 1);
    }
    return true;
  }

  void Line(Child& c, const std::string& line) {
    if (auto ev = ParseEvent(line)) {
      try {
        Event(c, *ev);
      } catch (const std::exception& e) {  // an event of an unexpected shape is shown, not acted on
        std::fprintf(stderr, "[%s] unreadable event (%s): %s\n", c.inst.name.c_str(), e.what(),
                     line.c_str());
      }
      return;
    }
    c.tail.push_back(line);
    while (int(c.tail.size()) > o_.tail_lines) c.tail.pop_front();
    if (!o_.quiet) std::fprintf(stderr, "[%s] %s\n", c.inst.name.c_str(), line.c_str());
  }

  void Event(Child& c, const nlohmann::json& ev) {
    const std::string type = EventString(ev, "event");
    if (type == "ready") {
      c.ready = true;
      c.port = int(EventInt(ev, "port", 0));
      c.metrics_port = int(EventInt(ev, "metrics_port", 0));
      WriteScrapeTargets();
    } else if (type == "progress" || type == "epoch" || type == "done") {
      const int t = int(EventInt(ev, "trainer", 0));
      images_total_[t] = std::max<int64_t>(images_total_[t], EventInt(ev, "images_total", 0));
      if (type == "epoch") Epoch(ev);
      if (type == "done") done_[t] = ev;
    } else if (type == "promoted_first_update" && kill_unix_ms_ > 0) {
      const int64_t ms = EventInt(ev, "unix_ms", 0) - kill_unix_ms_;
      if (promoted_ == 0)
        std::fprintf(stderr,
                     "adam run: failover: %s accepted its first update as the new primary "
                     "of shard %d %lld ms after the kill\n",
                     c.inst.name.c_str(), int(EventInt(ev, "shard", 0)),
                     static_cast<long long>(ms));
      if (promoted_ == 0) Mark(c.inst.name + ": first update as a new primary");
      // Shards, not promotions: a shard promoted again (its new primary lost too) moved once.
      promoted_shards_.insert(int(EventInt(ev, "shard", -1)));
      promoted_ = int(promoted_shards_.size());
      failover_ms_ = std::max(failover_ms_, ms);
      if (first_failover_ms_ < 0) first_failover_ms_ = ms;
    } else if (type == "model_written") {
      model_written_ = EventString(ev, "path");
    } else if (type == "evaluated") {
      // The evaluator's, or trainer 0's in a job resumed after its last epoch.
      final_accuracy_ = EventNumber(ev, "test_accuracy", -1.0);
      last_accuracy_ = final_accuracy_;
    } else if (type == "resumed") {
      // Trainer 0 starting where the checkpoints are; not trainer 0 restarted mid-run (it too
      // starts where the job is, after this run's own epochs).
      if (EventInt(ev, "trainer", -1) == 0 && resumed_epochs_ < 0 && epoch_loss_.empty()) {
        resumed_epochs_ = int(EventInt(ev, "epochs", 0));
        last_epoch_ = evaluated_epoch_ = resumed_epochs_;
        std::fprintf(stderr, "adam run: resuming: the checkpoints in %s hold %d of %d epochs%s\n",
                     state_root_.c_str(), resumed_epochs_, job_.training.epochs,
                     resumed_epochs_ < job_.training.epochs ? "" : " (nothing left to train)");
        Mark("resumed after epoch " + std::to_string(resumed_epochs_));
      }
    } else if (type == "diverged") {
      if (diverged_.empty())
        diverged_ = c.inst.name + ": " + EventString(ev, "message", "training diverged");
    } else if (type == "failover") {
      // The controller leader moved a lost server's shards: one row per failover in the report.
      std::string dead;
      if (auto it = ev.find("dead"); it != ev.end() && it->is_array())
        for (const auto& d : *it)
          if (d.is_number_integer())
            dead += (dead.empty() ? "ps-" : ", ps-") + std::to_string(d.get<int64_t>());
      if (dead.empty()) dead = "a parameter server";
      const int shards = int(EventInt(ev, "shards", 0));
      ++failovers_;
      std::fprintf(stderr, "adam run: failover: %s lost; %d shard(s) moved (shard map v%lld)\n",
                   dead.c_str(), shards, static_cast<long long>(EventInt(ev, "map_version", 0)));
      Mark("failover: " + dead + " lost, " + std::to_string(shards) + " shard(s) moved");
    } else if (type == "shard_map_committed") {
      if (EventInt(ev, "version", 0) >= map_version_) {
        map_version_ = EventInt(ev, "version", 0);
        const int under = int(EventInt(ev, "under_replicated", 0));
        if (under > 0 && under_replicated_ == 0)
          Mark("under-replicated: " + std::to_string(under) + " shard(s)");
        else if (under == 0 && under_replicated_ > 0)
          Mark("every shard has all its copies again");
        under_replicated_ = under;
      }
    } else if (type == "controller_leader") {
      if (!controller_leader_.empty() && controller_leader_ != c.inst.name)
        Mark("new controller leader " + c.inst.name);
      controller_leader_ = c.inst.name;
      controller_term_ = EventInt(ev, "term", 0);
      if (kill_unix_ms_ > 0 && controller_failover_ms_ < 0 && c.inst.name != killed_)
        controller_failover_ms_ = UnixMs() - kill_unix_ms_;
    }
  }

  // Kills (and restarts) the roles named in RunOptions::kills when their time comes.
  void InjectFaults() {
    const double t = std::chrono::duration<double>(Clock::now() - train_start_).count();
    for (size_t k = 0; k < o_.kills.size(); ++k) {
      const auto& kill_at = o_.kills[k];
      if (done_kills_.count(k) || t < kill_at.at_seconds) continue;
      // "controller-leader": whichever member leads now (wait until one has been announced).
      std::string name = kill_at.name;
      if (name == "controller-leader") {
        if (controller_leader_.empty()) continue;
        name = controller_leader_;
      }
      for (auto& c : children_) {
        if (c.inst.name != name || c.exited) continue;
        c.expected_exit = true;
        kill(c.pid, SIGKILL);
        kill_unix_ms_ = UnixMs();
        killed_ = c.inst.name;
        Mark("kill -9 " + c.inst.name);
        std::fprintf(stderr, "adam run: kill -9 %s at %.1f s\n", c.inst.name.c_str(), t);
        if (kill_at.restart_after > 0) {
          spec::RoleInstance again = c.inst;
          // The trainers know the data server, and without a controller the parameter servers,
          // by address only: such a role comes back on the port it had, as a pod under its name.
          if (again.role == spec::Role::kDataServer ||
              (again.role == spec::Role::kParamServer && !ha_))
            again.port = c.port;
          restarts_.push_back({again, t + kill_at.restart_after});
        }
        break;
      }
      done_kills_.insert(k);
    }
    if (o_.chaos_seconds > 0 && t < o_.chaos_seconds && restarts_.empty() && t >= next_chaos_) {
      std::vector<Child*> victims;
      for (auto& c : children_)
        if (!c.exited &&
            (c.inst.role == spec::Role::kController || c.inst.role == spec::Role::kParamServer))
          victims.push_back(&c);
      if (!victims.empty()) {
        Child& c = *victims[chaos_rng_() % victims.size()];
        c.expected_exit = true;
        kill(c.pid, SIGKILL);
        ++chaos_faults_;
        Mark("kill -9 " + c.inst.name);
        std::fprintf(stderr, "adam run: chaos: kill -9 %s at %.1f s\n", c.inst.name.c_str(), t);
        restarts_.push_back({c.inst, t + 1.0});
      }
      next_chaos_ = t + 1.0 + double(chaos_rng_() % 1000) / 1000.0;
    }
    for (auto it = restarts_.begin(); it != restarts_.end();) {
      if (t < it->second) {
        ++it;
        continue;
      }
      std::fprintf(stderr, "adam run: restarting %s at %.1f s\n", it->first.name.c_str(), t);
      Mark("restart " + it->first.name);
      // A controller member comes back on its address (the members list is fixed); a
      // parameter server on new ports, which it registers with the controller (without one, on
      // its old port); the data server on its old port; a trainer with the addresses the first
      // ones had.
      Spawn(it->first, endpoints_);
      it = restarts_.erase(it);
    }
  }

  void Epoch(const nlohmann::json& ev) {
    const int t = int(EventInt(ev, "trainer", 0));
    const int epoch = int(EventInt(ev, "epoch", 0));
    epoch_loss_[epoch].push_back(EventNumber(ev, "loss", 0.0));
    if (t != 0) return;
    const auto now = Clock::now();
    int64_t total = 0;
    for (const auto& [_, v] : images_total_) total += v;
    const auto since = last_line_ ? *last_line_ : train_start_;
    const double dt = std::chrono::duration<double>(now - since).count();
    const double ips = dt > 0 ? double(total - last_total_) / dt : 0;
    last_line_ = now;
    last_total_ = total;
    double loss = 0;
    for (double l : epoch_loss_[epoch]) loss += l;
    loss /= double(epoch_loss_[epoch].size());
    last_accuracy_ = EventNumber(ev, "test_accuracy", -1.0);
    last_epoch_ = epoch;
    evaluated_epoch_ = epoch;
    last_loss_ = loss;
    record_.epochs.push_back(
        {epoch, std::chrono::duration<double>(now - train_start_).count(), loss, last_accuracy_});
    std::fprintf(stderr, "epoch %3d/%-3d  loss %.4f  test acc %6.2f%%  %9s img/s  %s\n", epoch,
                 job_.training.epochs, loss, 100 * last_accuracy_, Thousands(ips).c_str(),
                 Clock2(std::chrono::duration<double>(now - start_).count()).c_str());
    std::fflush(stderr);
  }

  double TrainSeconds() const {
    return std::chrono::duration<double>(Clock::now() - train_start_).count();
  }

  // Prometheus file-based service discovery (--prometheus-sd): every live role's /metrics,
  // labelled with its job, role and instance; rewritten (atomically) whenever one starts.
  void WriteScrapeTargets() {
    if (o_.prometheus_sd.empty()) return;
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& c : children_) {
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

  void Mark(const std::string& what) { record_.marks.push_back({TrainSeconds(), what}); }

  // Throughput for the report: every second, the trainers' images over the last 5 s (trainers
  // report their counts every few seconds, so a shorter window would alternate 0 and spikes).
  void SampleRate() {
    if (o_.report_dir.empty()) return;
    const auto now = Clock::now();
    if (rate_at_ && now - *rate_at_ < std::chrono::seconds(1)) return;
    rate_at_ = now;
    int64_t total = 0;
    for (const auto& [_, v] : images_total_) total += v;
    rate_window_.push_back({now, total});
    while (rate_window_.size() > 1 && now - rate_window_.front().first > std::chrono::seconds(5))
      rate_window_.pop_front();
    const auto& [t0, n0] = rate_window_.front();
    const double dt = std::chrono::duration<double>(now - t0).count();
    if (dt >= 1.0) record_.rates.push_back({TrainSeconds(), double(total - n0) / dt});
  }

  // Writes DIR/index.html; false (after saying why) when it cannot.
  bool WriteReport(int code) {
    int64_t images = 0;
    for (const auto& [_, v] : images_total_) images += v;
    record_.job = job_.name;
    record_.summary = {
        {"result", code == 0 ? "completed" : "failed (exit " + std::to_string(code) + ")"},
        {"epochs", std::to_string(last_epoch_) + " of " + std::to_string(job_.training.epochs)},
        {"test accuracy", last_accuracy_ >= 0 ? Percent(last_accuracy_) : "-"},
        {"images", Thousands(double(images))},
        {"wall time", Clock2(std::chrono::duration<double>(Clock::now() - start_).count())},
        {"trainers", std::to_string(job_.roles.trainer.replicas) + " x " +
                         std::to_string(job_.roles.trainer.threads) + " threads"},
        {"parameter servers", std::to_string(job_.roles.parameter_server.replicas) + " (copies " +
                                  std::to_string(job_.roles.parameter_server.copies) + ")"}};
    if (first_failover_ms_ >= 0)
      record_.summary.push_back({"failover (kill to first update on the new primary)",
                                 std::to_string(first_failover_ms_) + " ms"});
    if (controller_failover_ms_ >= 0)
      record_.summary.push_back(
          {"controller failover", std::to_string(controller_failover_ms_) + " ms"});
    if (o_.chaos_seconds > 0)
      record_.summary.push_back({"chaos faults", std::to_string(chaos_faults_)});
    if (failovers_ > 0)
      record_.summary.push_back({"parameter-server failovers", std::to_string(failovers_)});
    if (map_version_ > 0)
      record_.summary.push_back(
          {"shards under-replicated at the end", std::to_string(under_replicated_)});
    std::error_code ec;
    std::filesystem::create_directories(o_.report_dir, ec);
    const std::string path = o_.report_dir + "/index.html";
    std::ofstream out(path);
    out << RenderReportHtml(record_);
    out.close();
    if (!out) {
      std::fprintf(stderr, "adam run: cannot write the report %s\n", path.c_str());
      return false;
    }
    std::fprintf(stderr, "adam run: report written to %s\n", path.c_str());
    return true;
  }

  void Fail(const Child* c, const std::string& why) {
    std::fprintf(stderr, "adam run: %s\n", why.c_str());
    if (c && !c->tail.empty()) {
      std::fprintf(stderr, "adam run: last lines of %s:\n", c->inst.name.c_str());
      for (const auto& l : c->tail) std::fprintf(stderr, "  %s\n", l.c_str());
    }
  }

  void StopAll() {
    for (auto& c : children_)
      if (!c.exited) {
        c.expected_exit = true;
        kill(c.pid, SIGTERM);
      }
    const auto deadline = Clock::now() + o_.stop_grace;
    while (true) {
      bool alive = false;
      for (auto& c : children_) {
        if (c.exited) continue;
        int status;
        if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
          c.exited = true;
          c.wait_status = status;
          if (c.fd >= 0) {
            while (c.fd >= 0 && ReadFrom(c)) {
            }
          }
        } else {
          alive = true;
        }
      }
      if (!alive) break;
      if (Clock::now() > deadline) {
        for (auto& c : children_)
          if (!c.exited) {
            std::fprintf(stderr, "adam run: %s did not stop in %lld s; killing it\n",
                         c.inst.name.c_str(), (long long)o_.stop_grace.count());
            kill(c.pid, SIGKILL);
            waitpid(c.pid, &c.wait_status, 0);
            c.exited = true;
          }
        break;
      }
      usleep(20000);
    }
    for (auto& c : children_)
      if (c.fd >= 0) {
        close(c.fd);
        c.fd = -1;
      }
  }

  void PrintSummary() {
    int64_t images = 0;
    for (const auto& [_, v] : images_total_) images += v;
    const double wall = std::chrono::duration<double>(Clock::now() - start_).count();
    const double train = std::chrono::duration<double>(train_end_ - train_start_).count();
    const double ips = train > 0 ? double(images) / train : 0;
    if (o_.json) {
      nlohmann::json j = {{"job", job_.name},
                          {"test_accuracy", last_accuracy_},
                          {"train_loss", last_loss_},
                          {"epochs", last_epoch_},
                          {"images", images},
                          {"images_per_second", ips},
                          {"train_seconds", train},
                          {"wall_seconds", wall},
                          {"trainers", job_.roles.trainer.replicas},
                          {"threads_per_trainer", job_.roles.trainer.threads},
                          {"parameter_servers", job_.roles.parameter_server.replicas}};
      if (kill_unix_ms_ > 0) {
        j["killed"] = killed_;
        if (first_failover_ms_ >= 0) {
          j["failover_ms"] = failover_ms_;
          j["failover_first_ms"] = first_failover_ms_;
          j["shards_promoted"] = promoted_;
        }
        if (controller_failover_ms_ >= 0) j["controller_failover_ms"] = controller_failover_ms_;
      }
      if (!controller_leader_.empty())
        j["controller"] = {{"leader", controller_leader_}, {"term", controller_term_}};
      if (map_version_ > 0)
        j["shard_map"] = {{"version", map_version_}, {"under_replicated", under_replicated_}};
      if (o_.chaos_seconds > 0) j["chaos_faults"] = chaos_faults_;
      if (failovers_ > 0) j["failovers"] = failovers_;
      if (!model_written_.empty()) j["model"] = model_written_;
      if (resumed_epochs_ > 0) j["resumed_after_epoch"] = resumed_epochs_;
      std::printf("%s\n", FiniteJson(j).dump().c_str());
    } else {
      const std::string resumed =
          resumed_epochs_ > 0 ? " (resumed after " + std::to_string(resumed_epochs_) + ")" : "";
      std::printf("%s: %d epochs%s, test accuracy %.2f%%, %s images in %s (%s img/s), wall %s\n",
                  job_.name.c_str(), last_epoch_, resumed.c_str(), 100 * last_accuracy_,
                  Thousands(double(images)).c_str(), Clock2(train).c_str(), Thousands(ips).c_str(),
                  Clock2(wall).c_str());
      if (first_failover_ms_ >= 0)
        std::printf(
            "failover after kill -9 %s: %d shards moved; first update accepted by a new "
            "primary after %lld ms, the last after %lld ms\n",
            killed_.c_str(), promoted_, static_cast<long long>(first_failover_ms_),
            static_cast<long long>(failover_ms_));
      if (controller_failover_ms_ >= 0)
        std::printf("failover after kill -9 %s: a new controller leader after %lld ms\n",
                    killed_.c_str(), static_cast<long long>(controller_failover_ms_));
      if (!model_written_.empty()) std::printf("model: %s (ONNX)\n", model_written_.c_str());
    }
    std::fflush(stdout);
  }

  const spec::AdamJob& job_;
  const RunOptions& o_;
  std::string state_root_;      // parameter servers' checkpoints: <state_root_>/<name>
  std::deque<Child> children_;  // deque: stable addresses
  std::map<std::string, std::vector<int>> cpus_;  // trainer name -> its CPU slice
  std::set<std::string> no_bind_;                 // trainers that must not bind
  Clock::time_point start_, train_start_, train_end_;
  std::map<int, int64_t> images_total_;
  std::map<int, nlohmann::json> done_;
  std::map<int, std::vector<double>> epoch_loss_;
  std::optional<Clock::time_point> last_line_;
  int64_t last_total_ = 0;
  double last_accuracy_ = -1;
  double last_loss_ = 0;
  int last_epoch_ = 0;
  std::string members_;  // controller members (copies > 1), else empty
  bool ha_ = false;
  std::set<size_t> done_kills_;
  std::vector<std::pair<spec::RoleInstance, double>> restarts_;  // instance, at seconds
  int64_t kill_unix_ms_ = 0;
  std::string killed_;
  int promoted_ = 0;  // shards that moved to a new primary since the kill
  std::set<int> promoted_shards_;
  int64_t failover_ms_ = -1, first_failover_ms_ = -1, controller_failover_ms_ = -1;
  std::string controller_leader_;
  int64_t controller_term_ = 0;
  std::mt19937_64 chaos_rng_{o_.chaos_seed};
  double next_chaos_ = 1.0;
  int chaos_faults_ = 0;
  int64_t map_version_ = 0;     // the newest shard map the controller leader committed
  int failovers_ = 0;           // the controller's failovers (lost servers whose shards moved)
  int under_replicated_ = 0;    // its shards with fewer in-sync copies than wanted
  std::string tls_dir_;         // the run's TLS material; empty: --plaintext
  std::string diverged_;        // the first trainer's divergence message
  spec::Endpoints endpoints_;   // the last stage's: data server, parameter servers, controller
  std::string model_written_;   // where the final model went (a model_written event)
  double final_accuracy_ = -1;  // the evaluator's, when trainer 0 did not finish
  int evaluated_epoch_ = 0;     // the epoch of trainer 0's last evaluation
  int resumed_epochs_ = -1;     // trainer 0's start: the epochs the checkpoints held (-1: none)
  int lock_fd_ = -1;            // holds the --state-dir lock
  RunRecord record_;            // for --report
  std::optional<Clock::time_point> rate_at_;
  std::deque<std::pair<Clock::time_point, int64_t>> rate_window_;  // (time, images) samples
};

}  // namespace

int Run(const spec::AdamJob& job, const RunOptions& options) {
  Supervisor s(job, options);
  return s.Run();
}

}  // namespace adam::launcher
