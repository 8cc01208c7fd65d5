// The role instances `adam run` started: child processes whose stdout and stderr it reads line
// by line, and reaps. Used by the launcher's thread only.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "launcher/child.h"

namespace adam::launcher {

class Children {
 public:
  using OnLine = std::function<void(Child& child, const std::string& line)>;
  // `on_line` gets every complete line a child writes.
  explicit Children(OnLine on_line) : on_line_(std::move(on_line)) {}

  // Forks and execs `args` (args[0] the executable) as `in`: its output goes to a pipe Poll
  // reads, it runs on `cpus` when any are given, and it dies with this process
  // (PR_SET_PDEATHSIG). Fails naming the call that failed.
  StatusOr<Child*> Start(const spec::RoleInstance& in, std::vector<std::string> args,
                         const std::vector<int>& cpus);
  // Waits up to 200 ms for output (or for `wake_fd` to be readable), hands on the complete lines
  // and reaps; returns the children that exited since the last call, their output read to the
  // end.
  std::vector<Child*> Poll(int wake_fd);
  // SIGTERM to every child still running; SIGKILL, named on stderr, to any left after `grace`
  // (on `clock`).
  void StopAll(std::chrono::seconds grace, Clock& clock);

  std::deque<Child>& all() { return children_; }
  const std::deque<Child>& all() const { return children_; }

 private:
  // Reads what is available; returns true if it read something.
  bool ReadFrom(Child& c);
  // Everything it wrote, until its pipe closes.
  void Drain(Child& c);

  const OnLine on_line_;
  std::deque<Child> children_;  // deque: stable addresses
};

}  // namespace adam::launcher
