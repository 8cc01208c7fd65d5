// `adam data-server`: loads the job's data set, builds the augmentation cache, serves it.
#pragma once

#include <string>

#include "net/grpc.h"
#include "spec/adamjob.h"

namespace adam::data_server {

struct MainOptions {
  // How this role serves and dials (the job's mutual TLS, or plain text).
  std::shared_ptr<const net::Transport> transport = net::Transport::Plaintext();
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
