// The `adam controller` process: one member of the job's controller group.
#pragma once

#include <string>

#include "core/status.h"
#include "net/grpc.h"
#include "raft/driver.h"
#include "spec/adamjob.h"
#include "spec/plan.h"

namespace adam::controller {

struct MainOptions {
  // How this role serves and dials (the job's mutual TLS, or plain text).
  std::shared_ptr<const net::Transport> transport = net::Transport::Plaintext();
  std::string name = "controller-1";
  uint64_t id = 1;
  spec::ControllerMembers members;  // every member's id and address
  std::string state_dir;  // Raft log and snapshots (required: a member must not forget votes)
  std::string
      cluster_id;  // the job the state belongs to (its uid on Kubernetes); "" = the job's name
  int metrics_port = 0;
  int server_timeout_ms = 500;
  int tick_ms = 10;
  int election_ticks = 20;
  // The job's manifest file, followed for the parameter-server count (elastic servers); "" = not
  // followed.
  std::string job_path;
};

int Main(const spec::AdamJob& job, const MainOptions& options);

}  // namespace adam::controller
