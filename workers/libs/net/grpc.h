// gRPC helpers shared by every role: a Transport (plain text or the job's mutual TLS), starting a
// server on "host:port" (port 0 = any free port) and making channels with the project's message
// limits through one, and turning grpc::Status into Status. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/role_events.h"
#include "core/status.h"
#include "net/tls.h"

namespace grpc::experimental {
class CertificateProviderInterface;
}

namespace adam::net {

// How a role's servers listen and its channels connect: plain text, or mutual TLS with the job's
// certificate (tls.h). A role makes one from its command line (--tls-dir or --plaintext) and
// hands it to everything that serves or dials; nothing about TLS is process-wide, so one process
// may hold both kinds (tests do). A mutual-TLS server lets a call through only from a role that
// may make it (access.h). Immutable, shared by whoever uses it.
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

// While a channel has calls out it pings its peer every kKeepaliveTime; a ping not answered
// within kKeepaliveTimeout ends the connection (its calls fail UNAVAILABLE): a peer that went
// away without a reset is found within their sum, not at each call's deadline.
constexpr std::chrono::milliseconds kKeepaliveTime{2000};
constexpr std::chrono::milliseconds kKeepaliveTimeout{3000};

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

// A serving role's gRPC servers: its main address and any extra listeners, started together.
class Listeners {
 public:
  // Starts `services` on `address` and each extra listener; fails naming the address that could
  // not be bound (nothing is left listening then).
  static StatusOr<Listeners> Start(const Transport& transport, const std::string& address,
                                   const std::vector<grpc::Service*>& services,
                                   const std::vector<ExtraListener>& extra = {});
  int port() const { return main_.port; }
  // Each extra listener's bound port, in the order given.
  std::vector<int> extra_ports() const;
  // The role's "ready" event: its main port, `metrics_port`, and each extra listener by name.
  events::Ready ReadyEvent(int metrics_port) const;
  // Stops accepting calls and ends those in flight after `grace`. Idempotent.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::seconds(2));

 private:
  Server main_;
  std::vector<std::pair<std::string, Server>> extra_;  // by ready-event key
};

// A channel to `address` with the project's message limits.
std::shared_ptr<grpc::Channel> MakeChannel(const Transport& transport, const std::string& address);

// Waits until `channel` connects, or fails after `timeout` naming `what` and `address`.
Status WaitForReady(grpc::Channel* channel, const std::string& what, const std::string& address,
                    std::chrono::milliseconds timeout);

// `what: CODE: message` as a Status (UNAVAILABLE, DEADLINE_EXCEEDED, ... keep their meaning).
Status FromGrpc(const grpc::Status& s, const std::string& what);
// A Status as a gRPC status with the same code and message (a code gRPC lacks: INTERNAL).
grpc::Status ToGrpc(const Status& s);

// gRPC keeps its deadlines on the system clock, with its own timers: the point `timeout` from now
// there. (grpc.cc is the one file outside core/ that reads a clock: these deadlines cannot run on
// a core/clock.h Clock.)
std::chrono::system_clock::time_point DeadlineAfter(std::chrono::milliseconds timeout);
// A ClientContext deadline `timeout` from now.
void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds timeout);
// The time a server call has left before its caller's deadline (years when it set none).
std::chrono::nanoseconds TimeLeft(const grpc::ServerContextBase& ctx);

}  // namespace adam::net
