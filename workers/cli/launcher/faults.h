// `adam run --kill` and `--chaos`: kill -9 role instances when their time comes, and start them
// again when asked. Used by the launcher's thread only.
#pragma once

#include <deque>
#include <functional>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "launcher/child.h"
#include "launcher/launcher.h"
#include "launcher/run_log.h"

namespace adam::launcher {

class Faults {
 public:
  // `ha`: the job has copies (a controller), so parameter servers come back on new ports.
  Faults(const RunOptions& options, bool ha);

  // At `t` seconds of training: kills what is due among `children` (on `log`'s timeline), and
  // starts again, through `spawn`, what is due to come back.
  void Tick(double t, std::deque<Child>& children, RunLog& log,
            const std::function<void(const spec::RoleInstance&)>& spawn);
  // Starts `in` again at `at` seconds (a split replica's processes, all together), in place of
  // any restart of it already due.
  void Restart(const spec::RoleInstance& in, double at);
  // Whether a process Restart was given is still due to start.
  bool RestartingAReplica() const { return !replicas_.empty(); }

 private:
  void Kills(double t, std::deque<Child>& children, RunLog& log);
  void Chaos(double t, std::deque<Child>& children, RunLog& log);

  const RunOptions& o_;
  const bool ha_;
  std::set<size_t> done_kills_;
  std::vector<std::pair<spec::RoleInstance, double>> restarts_;  // instance, at seconds
  std::set<std::string> replicas_;  // the names among them that Restart gave
  std::mt19937_64 chaos_rng_;
  double next_chaos_ = 1.0;
};

}  // namespace adam::launcher
