// gRPC helpers shared by every role: a Transport (plain text or the job's mutual TLS), starting a
// server on "host:port" (port 0 = any free port) and making channels with the project's message
// limits through one, and turning grpc::Status into Status. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "net/tls.h"

namespace grpc::experimental {
class CertificateProviderInterface;
}

namespace adam::net {

// How a role's servers listen and its channels connect: plain text, or mutual TLS with the job's
// certificate (tls.h). A role makes one from its command line (--tls-dir or --plaintext) and
// hands it to everything that serves or dials; nothing about TLS is process-wide, so one process
// may hold both kinds (tests do). Immutable, shared by whoever uses it.
class Transport {
 public:
  static std::shared_ptr<const Transport> Plaintext();
  // Fixed material.
  static std::shared_ptr<const Transport> MutualTls(const TlsMaterial& material);
  // DIR's ca.crt, tls.crt and tls.key, checked now (an error names the file at fault) and read
  // again every `refresh`: renewed certificates take effect for the next handshake.
  static StatusOr<std::shared_ptr<const Transport>> MutualTlsFromDir(
      const std::string& dir, std::chrono::seconds refresh = std::chrono::seconds(60));

  bool tls() const { return provider_ != nullptr; }
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;

  explicit Transport(std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider)
      : provider_(std::move(provider)) {}

 private:
  const std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;  // null: plain
};

// Largest message a role sends or accepts: a few shards or batches, with room to spare.
constexpr int kMaxMessageBytes = 256 << 20;

struct Server {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the port actually bound
};

// Starts a server with `services` on `address`. Fails naming the address when it cannot be
// bound (in use, bad host).
StatusOr<Server> StartServer(const Transport& transport, const std::string& address,
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
int Serve(const Transport& transport, const std::string& address,
          const std::vector<grpc::Service*>& services, int metrics_port,
          const std::function<void()>& before_shutdown = {},
          const std::vector<ExtraListener>& extra = {},
          const std::function<void(int port, const std::vector<int>& extra_ports)>& on_ready = {});

// A channel to `address` with the project's message limits.
std::shared_ptr<grpc::Channel> MakeChannel(const Transport& transport, const std::string& address);

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
