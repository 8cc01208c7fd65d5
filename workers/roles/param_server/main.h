// `adam ps`: holds this server's shards of the job's parameters and serves pushes and pulls.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "net/grpc.h"
#include "spec/adamjob.h"

namespace adam::ps {

struct MainOptions {
  // How this role serves and dials (the job's mutual TLS, or plain text).
  std::shared_ptr<const net::Transport> transport = net::Transport::Plaintext();
  std::string name = "ps-0";
  int index = 0;                       // server number in the shard map
  std::string listen = "127.0.0.1:0";  // host:port; port 0 = any free port
  int metrics_port = 0;
  std::string state_dir;                // checkpoints; empty = no persistence
  std::string replication_listen;       // host:port of the second NIC; empty = none
  std::string restore_from;             // a replication address holding this server's checkpoint
                                        // (a peer's copy): fetched first when state_dir holds none
  std::string checkpoint_peer;          // a peer's replication address: each flush is copied there
  std::vector<std::string> controller;  // controller members' addresses: copies, failover
  std::chrono::milliseconds forward_interval{100};  // primary -> secondaries (routing.h)
  int threads = 0;                                  // shard worker threads; 0 = one per usable core
  bool bind = true;                                 // bind shard workers to cores
  std::chrono::milliseconds debug_flush_pause{0};   // tests: pause mid-flush
  // The job's manifest file, followed for the trainer count (trainers scaled on a cluster);
  // "" = not followed.
  std::string job_path;
};

// Runs until SIGINT/SIGTERM; returns the process exit code. Emits a "ready" event once serving.
// With a state directory it restores the newest usable checkpoint first, flushes every
// spec.roles.parameterServer.persistence.interval and once more on SIGTERM.
int Main(const spec::AdamJob& job, const MainOptions& options);

}  // namespace adam::ps
