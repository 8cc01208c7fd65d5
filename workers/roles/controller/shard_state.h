// The controller's replicated state machine: the shard map (shard -> in-sync copies, primary
// first, plus copies being filled) and parameter-server membership, with its version.
//
// `Apply` is deterministic: every member applying the same commands holds the same state. The
// decisions that depend on timing (which server is dead, which copy is freshest) are made by the
// leader with the pure functions below and committed as explicit commands, applied only if the
// map is still at the version they were planned against.
//
// Thread-compatible: the Raft loop applies; readers take a copy under the owner's lock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "adam/v1/controller.pb.h"
#include "core/status.h"
#include "shard/shard_map.h"

namespace adam::controller {

class ShardState {
 public:
  const v1::ControllerState& state() const { return state_; }
  // Applies a committed command. Commands that no longer fit (a stale version, an unknown server
  // or shard) change nothing and return FailedPrecondition saying why.
  Status Apply(const v1::Command& command);
  std::string Serialize() const;
  Status Restore(const std::string& bytes);

 private:
  // A Resize: records for the servers that join, the count wanted, rebalancing on.
  Status ApplyResize(const v1::Resize& r);
  // One command of each kind (Apply).
  Status ApplyRegister(const v1::ServerRecord& in);
  Status ApplyReassign(const v1::Reassign& r);
  Status ApplyCopyDone(const v1::CopyDone& d);
  v1::ControllerState state_;
};

// The initial map for `num_servers` servers: each shard's primary is its server in `map`
// (hash-balanced), its secondaries the next `copies - 1` servers in index order.
v1::ControllerState MakeBootstrap(const shard::ShardMap& map, int copies);

// Of a shard's R in-sync copies, how many must be alive for one of them to hold every
// acknowledged push: R - floor(R/2).
int CopiesToServe(int replicas);

// Freshness reports from heartbeats: (shard, server) -> updates applied to that copy.
using CopyVersions = std::map<std::pair<uint32_t, uint32_t>, uint64_t>;
// Term reports from heartbeats: (shard, server) -> the term of that copy's state.
using CopyTerms = std::map<std::pair<uint32_t, uint32_t>, uint64_t>;

// Whether a copy whose state has `term` holds every push acknowledged by the shard's primaries
// so far: its term reaches the shard's primary_since (it took the current primary's state, which
// holds all the earlier primaries acknowledged). A copy not heard from counts as term 0.
bool HoldsAcknowledged(const v1::ShardRecord& record, uint32_t server, const CopyTerms& terms);

// The leader's decision when the servers in `dead` stopped heartbeating: they are marked dead and
// removed from every shard; a shard whose primary died gets the freshest surviving in-sync copy as
// primary; every shard below `copies` gets a new copy (state "copying") on the alive server that
// holds the fewest shards, never one that already holds it or whose host holds it, nor one in
// `on_probation` (a server back from the dead that has not yet beaten steadily).
// A push is acknowledged once the primary and floor(R/2) of the other R-1 in-sync copies hold it,
// so only CopiesToServe(R) survivors are sure to hold every acknowledged push between them. A
// shard whose primary died with fewer survivors than that (every copy died when the whole job
// restarted, or two of three servers stalled at once) keeps its in-sync copies, the dead primary
// first, and is not served until enough of them are back (PlanRepair): a lone survivor could be
// missing pushes the others acknowledged. The same holds when no survivor HoldsAcknowledged:
// a copy promoted a moment ago may be lost before its first forward reached the others, which
// then lack what its predecessor acknowledged with it (two failures within one recovery). The
// new primary is the freshest survivor by (term, version), and the shard's primary_since becomes
// the map version this plan makes, as it does whenever in-sync copies are cut: a push
// acknowledged with a lost copy may then be on the primary alone until its next forward.
// Returns nullopt when nothing changes.
std::optional<v1::Reassign> PlanFailover(const v1::ControllerState& state,
                                         const std::set<uint32_t>& dead,
                                         const CopyVersions& versions,
                                         const std::set<uint32_t>& on_probation = {},
                                         const CopyTerms& terms = {});

// Re-plans copies for under-replicated shards (e.g. after a server came back), on servers not
// in `on_probation`. With `drop_dead`, a shard that kept its copies on dead servers
// (PlanFailover) is served again once its primary is back, or CopiesToServe(R) of its R copies
// are and one of them HoldsAcknowledged, by those that are back (the primary first, else the
// freshest by (term, version)); the others are dropped and rebuilt as new copies.
// (The caller waits a while after it starts leading, so after a whole job restarts every copy is
// back first and the primaries stay spread.) A server that never registered (a bootstrap map's,
// not started yet) is not dead: it stays.
std::optional<v1::Reassign> PlanRepair(const v1::ControllerState& state,
                                       const std::set<uint32_t>& on_probation = {},
                                       bool drop_dead = true, const CopyVersions& versions = {},
                                       const CopyTerms& terms = {});

// How many servers the job wants: servers_wanted, or every server of an older state that has none.
// Servers with ids at or above it are leaving.
uint32_t ServersWanted(const v1::ControllerState& state);

// Elastic servers: the next steps of moving copies after the job's server count changed (while
// state.rebalancing: a Resize sets it), once no server holding a copy is dead (failover and
// repair go first). A failover or a repair never moves a primary by itself: handing one over
// leaves a short window (until the new primary has read the copies) in which a second failure
// could cost what the old one acknowledged, so it happens only when the job is resized.
// A move fills a copy on the new server first (copying, with move_from naming the copy to
// drop) and drops the old copy once the new one is in sync, so a shard never has fewer in-sync
// copies than before. Moves start for every copy on a leaving server, then from the member (an
// alive, wanted server off probation) holding the most copies to the one holding the fewest
// while they differ by more than one, at most `max_moves` filling at once: a change of N to N+1
// servers moves the ideal 1/(N+1) of the copies. A primary whose copy is dropped hands off to an
// in-sync copy, and primaries are spread over the members the same way (a handoff moves no
// data). Every primary change raises primary_since and records handoff_from. When nothing is
// left to do (no move in flight, every wanted server registered, nothing on a leaving server),
// the plan is an empty Reassign marked rebalanced, which ends state.rebalancing. Returns nullopt
// when nothing changes.
std::optional<v1::Reassign> PlanRebalance(const v1::ControllerState& state,
                                          const std::set<uint32_t>& on_probation = {},
                                          int max_moves = 8);

// No move in flight and no copy on a leaving server. (Counts balanced or not: PlanRebalance
// says whether anything is left to move.)
bool Balanced(const v1::ControllerState& state);

// The map as served to clients.
v1::ShardMap ToShardMap(const v1::ControllerState& state, const std::string& leader_address);

}  // namespace adam::controller
