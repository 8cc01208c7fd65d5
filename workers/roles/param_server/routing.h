// A parameter server's part in a controller-managed job (spec.roles.parameterServer.copies > 1):
//
// - Routing: this server's view of the controller's shard map: which shards it is the primary
//   of (it accepts trainers' pushes and pulls only for those), which it holds as a secondary or is
//   being copied.
// - ControllerLink (controller_link.h): heartbeats the controller leader every 50 ms with the
//   server's addresses and each copy's version (updates applied), and adopts every newer map the
//   leader returns.
// - Forwarder (forwarder.h): every `interval` sends each shard it is the primary of, when changed,
// to the
//   shard's other copies over their replication addresses (ReplicaService.Forward: the whole
//   shard and its version). A new copy is filled by the same call, sent every round until the map
//   has it in sync; once one arrived, the copy reports in sync. The decisions (which copies are
//   due, when a push is durable, what a copy accepts, a catch-up) are in replication.h.
//
// Acknowledgement: a trainer's push is acknowledged once a quorum of the shard's in-sync copies
// holds it: the primary applies it, then answers when forwards of a version that includes it
// reached floor(R/2) of the R-1 other in-sync copies (one of two others with three copies),
// while it is still the primary with a live lease. Forward rounds run back to back while pushes
// wait, so one round acknowledges every push applied before it began. A newly promoted primary
// reads the shard from every other in-sync copy before it serves it and starts from the freshest
// state (ordered by (term, version), term being the map version a primary was promoted at), so
// any quorum's update is in it. A primary handed a shard by one that is still alive (servers
// joining or leaving: controller/shard_state.h, PlanRebalance) reads the copies only once the old
// primary's lease and its margin have run out, since until then the old one may still
// acknowledge pushes. Each state carries the last push applied per trainer, so a push
// re-sent after its answer was lost is applied once. A copy refuses forwards of an older term:
// a deposed primary cannot overwrite its successor's state, nor count as acknowledged.
// A server that is not the primary of a shard (or has no map yet) refuses pushes and pulls for
// it with FAILED_PRECONDITION naming its map version. A primary cut off from the controller
// stops serving when its lease (300 ms after its last accepted heartbeat) runs out, before the
// controller (500 ms) promotes another copy: two primaries of one shard never serve at once.
//
// All classes are thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "adam/v1/controller.pb.h"
#include "core/clock.h"
#include "core/mutex.h"
#include "spec/leases.h"

namespace adam::ps {

// How long a primary serves after the last heartbeat the controller leader accepted, and the
// margin the controller's failure timeout must leave beyond it (spec/leases.h).
using spec::kLeaseMargin;
using spec::kPrimaryLease;

class Routing {
 public:
  // A primary serves only while its lease lasts: `lease` after its last heartbeat the leader
  // accepted. It must be shorter than the controller's server timeout, so a server that lost
  // touch with the controller stops serving before the controller promotes another copy.
  // The lease is measured on `clock` (not owned).
  explicit Routing(uint32_t self, std::chrono::milliseconds lease = kPrimaryLease,
                   Clock* clock = Clock::Real())
      : self_(self), lease_(lease), clock_(clock) {}
  // Called when the leader accepted a heartbeat sent at `sent` (a time of clock()).
  void RenewLease(Clock::TimePoint sent);
  Clock* clock() const { return clock_; }
  // Adopts `map` if it is newer; returns whether it did.
  bool Update(const v1::ShardMap& map);
  // The replication addresses of servers the maps adopted since the last call name under a new
  // incarnation (a restarted process: it holds none of what was sent to its predecessor).
  std::vector<std::string> TakeRestarted();
  uint64_t version() const;
  bool IsPrimary(uint32_t shard) const;
  // Shards this server is the primary of.
  int primaries() const;
  // Why a push or pull for `shard` is refused here, or empty when this server is its primary.
  std::string Refusal(uint32_t shard) const;
  // Shards this server is the primary of, with the replication addresses of their other copies.
  std::vector<std::pair<uint32_t, std::vector<std::string>>> ForwardTargets() const;
  // This server's primary shards and their other copies: in sync (replicas[1..]), being filled
  // (copying), and the shard's replicas count R (the quorum is floor(R/2) others). A copy on a
  // server the map marks dead has an empty address.
  struct Target {
    uint32_t shard = 0;
    std::vector<std::string> in_sync;
    std::vector<std::string> copying;
    int replicas = 0;
    bool catching_up = false;  // promoted, not yet caught up from its copies
  };
  std::vector<Target> Targets() const;
  // Shards this server was promoted to primary of and must catch up before serving: the map
  // version of the promotion and the replication addresses of the other in-sync copies.
  struct CatchUp {
    uint32_t shard = 0;
    uint64_t term = 0;
    std::vector<std::string> from;
  };
  std::vector<CatchUp> CatchUps() const;
  // The shard is caught up for the promotion at `term`: it may be served.
  void CaughtUp(uint32_t shard, uint64_t term);
  // Shards being copied to this server.
  std::vector<uint32_t> Copying() const;
  // The job no longer wants this server (its id is at or above the map's servers_wanted) and the
  // map has moved every copy off it: it may exit.
  bool Retired() const;
  // Records that a forward of `shard` arrived.
  void MarkReceived(uint32_t shard);
  bool Received(uint32_t shard) const;
  // True once per shard this server became the primary of through a map change (not the initial
  // map): the caller reports the first update it accepts as the new primary.
  bool TakePromotion(uint32_t shard);
  // One check for a whole request (one lock): the refusal for the first of `shards` this server
  // may not serve, or empty; then, if `promoted` is given, the shards whose first update as new
  // primary this request is (TakePromotion for each).
  std::string Admit(const std::vector<uint32_t>& shards, std::vector<uint32_t>* promoted);

 private:
  std::string RefusalLocked(uint32_t shard) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const uint32_t self_;
  const std::chrono::milliseconds lease_;
  Clock* const clock_;
  mutable Mutex mu_;
  Clock::TimePoint lease_until_ ABSL_GUARDED_BY(mu_){};
  v1::ShardMap map_ ABSL_GUARDED_BY(mu_);
  bool known_ ABSL_GUARDED_BY(mu_) = false;
  std::set<uint32_t> received_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> restarted_ ABSL_GUARDED_BY(mu_);  // TakeRestarted's
  std::set<uint32_t> promoted_ ABSL_GUARDED_BY(mu_);
  // Shard -> the map version it was promoted at.
  std::map<uint32_t, uint64_t> catching_up_ ABSL_GUARDED_BY(mu_);
  // Shard -> when the lease of the primary that handed it here (the map's handoff_from: it still
  // ran, it was not failed over) has surely run out: its copies are read from then on.
  std::map<uint32_t, Clock::TimePoint> handoff_until_ ABSL_GUARDED_BY(mu_);
};

struct ServerAddresses {
  std::string address;              // trainer-facing host:port
  std::string replication_address;  // second NIC host:port
  std::string host;                 // machine name
};

}  // namespace adam::ps
