// gRPC helpers shared by every role: starting a server on "host:port" (port 0 = any free port),
// making channels with the project's message limits, and turning grpc::Status into Status.
// Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace adam::net {

// Largest message a role sends or accepts: a few shards or batches, with room to spare.
constexpr int kMaxMessageBytes = 256 << 20;

struct Server {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the port actually bound
};

// Starts a server with `services` on `address`. Fails naming the address when it cannot be
// bound (in use, bad host).
StatusOr<Server> StartServer(const std::string& address,
                             const std::vector<grpc::Service*>& services);

// A second listener of a serving role (e.g. the parameter server's replication address).
struct ExtraListener {
  std::string name;     // the ready event's key for its port, e.g. "replication_port"
  std::string address;  // host:port; port 0 = any free port
  std::vector<grpc::Service*> services;
};

// The serving role's main loop: starts `services` on `address` (and each extra listener),
// reports the bound ports (and `metrics_port`) as a "ready" event, serves until SIGINT/SIGTERM
// (which the caller has blocked with BlockTerminationSignals), then shuts down with a 2 s grace.
// Returns the process exit code: 0, or 1 when an address cannot be bound (logged).
// `before_shutdown`, when set, runs after the signal and before the shutdown (to release calls
// the service holds back).
// `on_ready`, when set, runs once everything listens, with the main port and each extra
// listener's port (in order), before the ready event is emitted.
int Serve(const std::string& address, const std::vector<grpc::Service*>& services, int metrics_port,
          const std::function<void()>& before_shutdown = {},
          const std::vector<ExtraListener>& extra = {},
          const std::function<void(int port, const std::vector<int>& extra_ports)>& on_ready = {});

// A channel to `address` with the project's message limits.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// Waits until `channel` connects, or fails after `timeout` naming `what` and `address`.
Status WaitForReady(grpc::Channel* channel, const std::string& what, const std::string& address,
                    std::chrono::milliseconds timeout);

// `what: CODE: message` as a Status (UNAVAILABLE, DEADLINE_EXCEEDED, ... keep their meaning).
Status FromGrpc(const grpc::Status& s, const std::string& what);
// A Status as a gRPC status with the same code and message (a code gRPC lacks: INTERNAL).
grpc::Status ToGrpc(const Status& s);

// A ClientContext deadline `timeout` from now.
void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds timeout);

}  // namespace adam::net
