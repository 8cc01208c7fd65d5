// Launcher: fork/exec, a poll loop over the children's pipes, events, progress and summary.
#include "launcher/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
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
#include <optional>
#include <random>
#include <set>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/event.h"
#include "core/ports.h"
#include "launcher/report.h"
#include "net/tls.h"
#include "spec/plan.h"

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
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

std::string Clock2(double s) {
  const int t = int(s);
  char b[32];
  if (t >= 3600) std::snprintf(b, sizeof b, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(b, sizeof b, "%d:%02d", t / 60, t % 60);
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
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    start_ = Clock::now();
    // Parameter-server checkpoints: the caller's directory (kept, and resumed from), or a
    // throw-away one for this run.
    state_root_ = o_.state_dir;
    bool temporary = false;
    if (state_root_.empty()) {
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
    int code = RunPlan(plan);
    StopAll();
    if (!o_.report_dir.empty()) WriteReport(code);
    if (temporary) {
      std::error_code ec;
      std::filesystem::remove_all(state_root_, ec);
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    close(g_signal_pipe[0]);
    close(g_signal_pipe[1]);
    if (code == 0) PrintSummary();
    return code;
  }

 private:
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
      if (stage == max_stage) train_start_ = Clock::now();
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

  bool Spawn(const spec::RoleInstance& in, const spec::Endpoints& endpoints) {
    std::vector<std::string> args = spec::RoleArgs(in, o_.job_path, endpoints);
    if (tls_dir_.empty()) {
      args.push_back("--plaintext");
    } else {
      args.insert(args.end(), {"--tls-dir", tls_dir_});
    }
    args.insert(args.begin(), o_.executable);
    if (no_bind_.count(in.name)) args.push_back("--no-bind");
    if (in.role == spec::Role::kParamServer || in.role == spec::Role::kController)
      args.insert(args.end(), {"--state-dir", state_root_ + "/" + in.name});
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
      std::fprintf(stderr, "adam run: interrupted; stopping every role\n");
      return 130;
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
          std::fprintf(stderr, "adam run: %s %s; the job goes on without it\n",
                       c.inst.name.c_str(), ExitText(status).c_str());
          continue;
        }
        if (!c.expected_exit) {
          Fail(&c, c.inst.name + " " + ExitText(status));
          return 1;
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
      Event(c, *ev);
      return;
    }
    c.tail.push_back(line);
    while (int(c.tail.size()) > o_.tail_lines) c.tail.pop_front();
    if (!o_.quiet) std::fprintf(stderr, "[%s] %s\n", c.inst.name.c_str(), line.c_str());
  }

  void Event(Child& c, const nlohmann::json& ev) {
    const std::string type = ev.value("event", "");
    if (type == "ready") {
      c.ready = true;
      c.port = ev.value("port", 0);
      c.metrics_port = ev.value("metrics_port", 0);
      WriteScrapeTargets();
    } else if (type == "progress" || type == "epoch" || type == "done") {
      const int t = ev.value("trainer", 0);
      images_total_[t] = std::max<int64_t>(images_total_[t], ev.value("images_total", int64_t{0}));
      if (type == "epoch") Epoch(ev);
      if (type == "done") done_[t] = ev;
    } else if (type == "promoted_first_update" && kill_unix_ms_ > 0) {
      const int64_t ms = ev.value("unix_ms", int64_t{0}) - kill_unix_ms_;
      if (promoted_ == 0)
        std::fprintf(stderr, "adam run: failover: %s accepted its first update as the new primary "
                     "of shard %d %lld ms after the kill\n", c.inst.name.c_str(),
                     ev.value("shard", 0), static_cast<long long>(ms));
      if (promoted_ == 0) Mark("failover: " + c.inst.name + " primary");
      ++promoted_;
      failover_ms_ = std::max(failover_ms_, ms);
      if (first_failover_ms_ < 0) first_failover_ms_ = ms;
    } else if (type == "shard_map_committed") {
      if (ev.value("version", int64_t{0}) >= map_version_) {
        map_version_ = ev.value("version", int64_t{0});
        under_replicated_ = ev.value("under_replicated", 0);
      }
    } else if (type == "controller_leader") {
      if (!controller_leader_.empty() && controller_leader_ != c.inst.name)
        Mark("new controller leader " + c.inst.name);
      controller_leader_ = c.inst.name;
      controller_term_ = ev.value("term", int64_t{0});
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
        if (kill_at.restart_after > 0) restarts_.push_back({c.inst, t + kill_at.restart_after});
        break;
      }
      done_kills_.insert(k);
    }
    if (o_.chaos_seconds > 0 && t < o_.chaos_seconds && restarts_.empty() && t >= next_chaos_) {
      std::vector<Child*> victims;
      for (auto& c : children_)
        if (!c.exited && (c.inst.role == spec::Role::kController ||
                          c.inst.role == spec::Role::kParamServer))
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
      spec::Endpoints endpoints;
      endpoints.controller_members = members_;
      // A controller member comes back on its address (the members list is fixed); a
      // parameter server on new ports, which it registers with the controller.
      Spawn(it->first, endpoints);
      it = restarts_.erase(it);
    }
  }

  void Epoch(const nlohmann::json& ev) {
    const int t = ev.value("trainer", 0);
    const int epoch = ev.value("epoch", 0);
    epoch_loss_[epoch].push_back(ev.value("loss", 0.0));
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
    last_accuracy_ = ev.value("test_accuracy", -1.0);
    last_epoch_ = epoch;
    last_loss_ = loss;
    record_.epochs.push_back({epoch, std::chrono::duration<double>(now - train_start_).count(), loss,
                              last_accuracy_});
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

  void WriteReport(int code) {
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
      record_.summary.push_back({"controller failover", std::to_string(controller_failover_ms_) + " ms"});
    std::error_code ec;
    std::filesystem::create_directories(o_.report_dir, ec);
    const std::string path = o_.report_dir + "/index.html";
    std::ofstream out(path);
    out << RenderReportHtml(record_);
    if (!out) {
      std::fprintf(stderr, "adam run: cannot write the report %s\n", path.c_str());
      return;
    }
    std::fprintf(stderr, "adam run: report written to %s\n", path.c_str());
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
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%s: %d epochs, test accuracy %.2f%%, %s images in %s (%s img/s), wall %s\n",
                  job_.name.c_str(), last_epoch_, 100 * last_accuracy_,
                  Thousands(double(images)).c_str(), Clock2(train).c_str(),
                  Thousands(ips).c_str(), Clock2(wall).c_str());
      if (first_failover_ms_ >= 0)
        std::printf("failover after kill -9 %s: %d shards moved; first update accepted by a new "
                    "primary after %lld ms, the last after %lld ms\n",
                    killed_.c_str(), promoted_, static_cast<long long>(first_failover_ms_),
                    static_cast<long long>(failover_ms_));
      if (controller_failover_ms_ >= 0)
        std::printf("failover after kill -9 %s: a new controller leader after %lld ms\n",
                    killed_.c_str(), static_cast<long long>(controller_failover_ms_));
    }
    std::fflush(stdout);
  }

  const spec::AdamJob& job_;
  const RunOptions& o_;
  std::string state_root_;  // parameter servers' checkpoints: <state_root_>/<name>
  std::deque<Child> children_;  // deque: stable addresses
  std::map<std::string, std::vector<int>> cpus_;  // trainer name -> its CPU slice
  std::set<std::string> no_bind_;                  // trainers that must not bind
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
  int promoted_ = 0;
  int64_t failover_ms_ = -1, first_failover_ms_ = -1, controller_failover_ms_ = -1;
  std::string controller_leader_;
  int64_t controller_term_ = 0;
  std::mt19937_64 chaos_rng_{o_.chaos_seed};
  double next_chaos_ = 1.0;
  int chaos_faults_ = 0;
  int64_t map_version_ = 0;   // the newest shard map the controller leader committed
  int under_replicated_ = 0;  // its shards with fewer in-sync copies than wanted
  std::string tls_dir_;       // the run's TLS material; empty: --plaintext
  RunRecord record_;          // for --report
  std::optional<Clock::time_point> rate_at_;
  std::deque<std::pair<Clock::time_point, int64_t>> rate_window_;  // (time, images) samples
};

}  // namespace

int Run(const spec::AdamJob& job, const RunOptions& options) {
  Supervisor s(job, options);
  return s.Run();
}

}  // namespace adam::launcher
