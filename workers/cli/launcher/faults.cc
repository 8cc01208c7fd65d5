#include "launcher/faults.h"

#include <signal.h>

#include <cstdio>

namespace adam::launcher {

Faults::Faults(const RunOptions& options, bool ha)
    : o_(options), ha_(ha), chaos_rng_(options.chaos_seed) {}

void Faults::Tick(double t, std::deque<Child>& children, RunLog& log,
                  const std::function<void(const spec::RoleInstance&)>& spawn) {
  Kills(t, children, log);
  if (o_.chaos_seconds > 0 && t < o_.chaos_seconds && restarts_.empty() && t >= next_chaos_)
    Chaos(t, children, log);
  for (auto it = restarts_.begin(); it != restarts_.end();) {
    if (t < it->second) {
      ++it;
      continue;
    }
    std::fprintf(stderr, "adam run: restarting %s at %.1f s\n", it->first.name.c_str(), t);
    log.Mark("restart " + it->first.name);
    // A controller member comes back on its address (the members list is fixed); a parameter
    // server on new ports, which it registers with the controller (without one, on its old
    // port); the data server on its old port; a trainer with the addresses the first ones had.
    spawn(it->first);
    replicas_.erase(it->first.name);
    it = restarts_.erase(it);
  }
}

// The roles named in RunOptions::kills, when their time comes.
void Faults::Kills(double t, std::deque<Child>& children, RunLog& log) {
  for (size_t k = 0; k < o_.kills.size(); ++k) {
    const auto& kill_at = o_.kills[k];
    if (done_kills_.count(k) || t < kill_at.at_seconds) continue;
    // "controller-leader": whichever member leads now (wait until one has been announced).
    std::string name = kill_at.name;
    if (name == "controller-leader") {
      if (log.controller_leader().empty()) continue;
      name = log.controller_leader();
    }
    for (auto& c : children) {
      if (c.inst.name != name || c.exited) continue;
      c.expected_exit = true;
      kill(c.pid, SIGKILL);
      log.Killed(c.inst.name);
      log.Mark("kill -9 " + c.inst.name);
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
}

// A random controller member or parameter server, back a second later.
void Faults::Chaos(double t, std::deque<Child>& children, RunLog& log) {
  std::vector<Child*> victims;
  for (auto& c : children)
    if (!c.exited &&
        (c.inst.role == spec::Role::kController || c.inst.role == spec::Role::kParamServer))
      victims.push_back(&c);
  if (!victims.empty()) {
    Child& c = *victims[chaos_rng_() % victims.size()];
    c.expected_exit = true;
    kill(c.pid, SIGKILL);
    log.ChaosFault();
    log.Mark("kill -9 " + c.inst.name);
    std::fprintf(stderr, "adam run: chaos: kill -9 %s at %.1f s\n", c.inst.name.c_str(), t);
    restarts_.push_back({c.inst, t + 1.0});
  }
  next_chaos_ = t + 1.0 + double(chaos_rng_() % 1000) / 1000.0;
}

void Faults::Restart(const spec::RoleInstance& in, double at) {
  std::erase_if(restarts_, [&](const auto& r) { return r.first.name == in.name; });
  restarts_.push_back({in, at});
  replicas_.insert(in.name);
}

}  // namespace adam::launcher
