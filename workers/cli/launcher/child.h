// A role instance `adam run` started as a child process, and how its exit reads.
#pragma once

#include <sys/types.h>

#include <deque>
#include <string>

#include "spec/plan.h"

namespace adam::launcher {

struct Child {
  spec::RoleInstance inst;
  pid_t pid = -1;
  int fd = -1;  // its stdout and stderr, read by the launcher
  std::string buf;
  std::deque<std::string> tail;  // its last log lines, shown when it fails
  bool exited = false;
  int wait_status = 0;
  bool ready = false;
  int port = 0;
  int metrics_port = 0;
  bool expected_exit = false;  // we asked it to stop (or killed it on purpose)
};

// "exited with code N", "was killed by signal NAME".
std::string ExitText(int wait_status);

}  // namespace adam::launcher
