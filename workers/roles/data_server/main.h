// `adam data-server`: loads the job's data set, builds the augmentation cache, serves it.
#pragma once

#include <string>

#include "spec/adamjob.h"

namespace adam::data_server {

struct MainOptions {
  std::string name = "data-server-0";
  std::string listen = "127.0.0.1:0";  // host:port; port 0 = any free port
  int metrics_port = 0;
  int batch_images = 256;
  // The job's manifest file, followed for the trainer count (trainers scaled on a cluster);
  // "" = not followed.
  std::string job_path;
};

// Runs until SIGINT/SIGTERM; returns the process exit code. Emits a "ready" event once serving.
int Main(const spec::AdamJob& job, const MainOptions& options);

}  // namespace adam::data_server
