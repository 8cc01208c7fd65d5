// The `adam controller` process: one member of the job's controller group.
#pragma once

#include <string>

#include "core/status.h"
#include "net/grpc.h"
#include "raft/driver.h"
#include "spec/adamjob.h"

namespace adam::controller {

struct MainOptions {
  // How this role serves and dials (the job's mutual TLS, or plain text).
  std::shared_ptr<const net::Transport> transport = net::Transport::Plaintext();
  std::string name = "controller-1";
  uint64_t id = 1;
  std::string members;    // "1=host:port,2=host:port,3=host:port": every member's address
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

// Parses "1=a:1,2=b:2" into id -> address, naming the bad item.
StatusOr<std::map<raft::NodeId, std::string>> ParseMembers(const std::string& members);

int Main(const spec::AdamJob& job, const MainOptions& options);

}  // namespace adam::controller
