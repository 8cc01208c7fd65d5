// `adam ps`: holds this server's shards of the job's parameters and serves pushes and pulls.
#pragma once

#include <string>

#include "spec/adamjob.h"

namespace adam::ps {

struct MainOptions {
  std::string name = "ps-0";
  int index = 0;                       // server number in the shard map
  std::string listen = "127.0.0.1:0";  // host:port; port 0 = any free port
  int metrics_port = 0;
};

// Runs until SIGINT/SIGTERM; returns the process exit code. Emits a "ready" event once serving.
int Main(const spec::AdamJob& job, const MainOptions& options);

}  // namespace adam::ps
