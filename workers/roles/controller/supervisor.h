// The controller leader's failure detector and planner, apart from Raft, gRPC and threads: what
// a heartbeat means (register the server, a restart, a copy filled) and which command the leader
// commits next (fail over dead servers, repair under-replicated shards). The Controller runs it
// under its lock on the real clock; the failover simulation (tests/failover/sim.h) runs the same
// object on simulated time.
//
// All of its state is leader-local and starts afresh when a member starts to lead (Lead): the
// last heartbeat of each server, the copies' freshness and terms, restarted servers, and flapping
// servers' probation. A new leader first grants every server a full timeout, counted from the end
// of a grace during which its predecessor may still have renewed primaries' leases.
//
// Thread-compatible.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "adam/v1/controller.pb.h"
#include "controller/shard_state.h"
#include "core/clock.h"

namespace adam::controller {

// The defaults are `adam controller`'s: probation and the flap window four and twenty timeouts.
struct SupervisorOptions {
  std::chrono::milliseconds server_timeout{500};
  std::chrono::milliseconds server_probation{2000};
  std::chrono::milliseconds flap_window{10000};
  int max_moves = 8;  // copies being filled at once while servers join or leave (PlanRebalance)
};

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options = {}) : options_(options) {}

  // This member leads from `now`; failure detection counts from now + `grace`.
  void Lead(Clock::TimePoint now, Clock::Duration grace);

  // What a heartbeat from a server means (one whose id is not below state.servers_size(), from
  // a Resize this state does not have yet, is not accepted).
  struct Beat {
    // False: the server restarted under a new incarnation while the map has it alive; it is
    // answered without a lease until the supervisor has failed over its copies.
    bool accepted = false;
    bool restart_seen = false;              // that restart was first seen by this heartbeat
    bool register_server = false;           // commit a Register of the heartbeat's server record
    bool probation = false;                 // back from the dead again soon: on probation from now
    std::vector<v1::CopyDone> copies_done;  // copies it reports filled (expected_version unset)
  };
  Beat Heartbeat(const v1::ControllerState& state, const v1::HeartbeatRequest& request,
                 Clock::TimePoint now);

  // One round of the leader's judgement at `now`, against the committed `state` (which has a
  // map): `dead` are the servers whose heartbeats stopped for the timeout or that restarted;
  // `plan` is the failover for them, else the repair of under-replicated shards, else the next
  // steps of rebalancing after servers joined or left (nullopt: nothing to do). `judged` is false
  // during the new leader's grace, when nothing is decided.
  struct Round {
    bool judged = false;
    std::set<uint32_t> dead;
    std::optional<v1::Reassign> plan;
  };
  Round Judge(const v1::ControllerState& state, Clock::TimePoint now);

  // Seconds from `server`'s last heartbeat to `now`, if this leader heard from it.
  std::optional<double> SilentFor(uint32_t server, Clock::TimePoint now) const;

 private:
  SupervisorOptions options_;
  std::map<uint32_t, Clock::TimePoint> last_seen_;
  CopyVersions versions_;         // freshness reports
  CopyTerms terms_;               // the terms of the copies' states
  std::set<uint32_t> restarted_;  // alive in the map, heartbeating under a new incarnation
  std::map<uint32_t, Clock::TimePoint> returned_at_;  // each server's last return from the dead
  std::map<uint32_t, Clock::TimePoint> probation_until_;
  Clock::TimePoint leader_since_{};
};

}  // namespace adam::controller
