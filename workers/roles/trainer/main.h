// `adam trainer`: one model replica, connected to the data server and the parameter servers.
#pragma once

#include <string>
#include <vector>

#include "core/clock.h"
#include "net/grpc.h"
#include "spec/adamjob.h"

namespace adam::trainer {

struct MainOptions {
  // How this role serves and dials (the job's mutual TLS, or plain text).
  std::shared_ptr<const net::Transport> transport = net::Transport::Plaintext();
  std::string name = "trainer-0";
  int index = 0;
  int threads = 0;                         // 0 = spec.roles.trainer.threads
  std::vector<std::string> data_servers;   // host:port of each data-server replica
  std::vector<std::string> param_servers;  // host:port, in server order
  std::vector<std::string> controller;     // controller members: route by its shard map
  std::string metrics_host = "127.0.0.1";
  int metrics_port = 0;
  bool bind = true;            // bind workers to cores (also needs spec.placement.numaPinning)
  bool evaluate_only = false;  // pull the model, evaluate it, exit (see TrainerOptions)
  std::string model_out;       // the final model as ONNX (see TrainerOptions)
  int check_pushes = 0;        // > 0: push tagged updates and check them (push_check.h)
  int check_round = 0;
  int check_every_ms = 20;
  // A split replica: every model worker's exchange address, the trainer's first; and which one
  // this process is (0: the trainer; k > 0: model worker k, which trains its slice of the model
  // for the trainer and nothing else).
  std::vector<std::string> model_workers;
  int model_worker = 0;
  // Where the role's waits, timeouts and figures read the time (not owned).
  Clock* clock = Clock::Real();
};

// Trains to the end of the job; returns the process exit code.
int Main(const spec::AdamJob& job, const MainOptions& options);

}  // namespace adam::trainer
