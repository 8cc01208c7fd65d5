// ControllerLink: a parameter server's heartbeats to the controller leader (routing.h describes
// the protocol): every 50 ms its addresses and each copy's version, and every newer shard map the
// leader answers with adopted. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "adam/v1/controller.grpc.pb.h"
#include "core/mutex.h"
#include "core/periodic.h"
#include "net/grpc.h"
#include "param_server/param_store.h"
#include "param_server/routing.h"

namespace adam::ps {

class ControllerLink {
 public:
  // `members`: every controller member's address. Heartbeats start once SetAddresses is called,
  // every 50 ms of `routing`'s clock.
  ControllerLink(std::shared_ptr<const net::Transport> transport, uint32_t self,
                 std::vector<std::string> members, Routing* routing, const ParamStore* store);
  void SetAddresses(const ServerAddresses& addresses);
  // Elastic servers: the parameter-server count the job's manifest asks for now, and what to do
  // (once, on the heartbeat thread) when both it and the map say this server is leaving and the
  // map has moved every copy off it (Routing::Retired). Both the manifest and the map must say
  // so: a server that joins before the controller has read the new count is not sent away.
  void SetServersWanted(int servers) { wanted_.store(servers); }
  void OnRetired(std::function<void()> retired) {
    MutexLock l(mu_);
    on_retired_ = std::move(retired);
  }
  void Stop() { beat_.Stop(); }
  uint64_t heartbeats() const { return heartbeats_.load(); }

 private:
  const std::shared_ptr<const net::Transport> transport_;
  void Beat();
  const uint32_t self_;
  Routing* routing_;
  const ParamStore* store_;
  std::vector<std::unique_ptr<v1::Controller::Stub>> stubs_;
  std::vector<std::string> members_;
  Mutex mu_;
  std::optional<ServerAddresses> addresses_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_retired_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> wanted_{std::numeric_limits<int>::max()};
  const uint64_t incarnation_;  // random, nonzero: tells the controller this process restarted
  size_t target_ = 0;           // the member believed to lead (beat thread only)
  std::atomic<uint64_t> heartbeats_{0};  // a counter; ordering nothing
  Periodic beat_;                        // last: runs Beat every 50 ms once everything above exists
};

}  // namespace adam::ps
