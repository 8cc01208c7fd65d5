// The primary/copy protocol's decisions (routing.h describes the protocol), apart from threads,
// timers and gRPC: which copies a primary still has to send a shard to, when a push is durable,
// what a copy does with a forwarded state, how a promoted primary takes its copies' states, and
// what a heartbeat says and what its answer changes. The Forwarder, ControllerLink and
// ReplicaService call them on real time; the failover simulation (tests/failover/sim.h) calls
// the same functions on simulated time and a simulated network.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "adam/v1/controller.pb.h"
#include "core/status.h"
#include "param_server/param_store.h"
#include "param_server/routing.h"

namespace adam::ps {

// What a primary knows its copies hold: (shard, copy's replication address) -> the version the
// copy acknowledged.
using SentVersions = std::map<std::pair<uint32_t, std::string>, uint64_t>;

// The copies of `target` on live servers that a forward of `version` is due to: the in-sync
// copies that do not yet hold it, and every copy being filled (until the map has it in sync).
std::vector<std::string> DueCopies(const Routing::Target& target, uint64_t version,
                                   const SentVersions& sent);

// Forgets what was sent to the copies at `addresses` (restarted processes, Routing::TakeRestarted):
// they are sent their shards again, and count for no push's durability until then.
void ForgetCopies(SentVersions* sent, const std::vector<std::string>& addresses);

// Records a forward's answer: `ok` raises what the copy holds to `version`; a refusal or a lost
// answer forgets it (a copy that restarted or refused holds an unknown state: it gets everything
// again).
void RecordForward(SentVersions* sent, uint32_t shard, const std::string& address, uint64_t version,
                   bool ok);

// Whether a push that brought each shard of `need` to its version is durable: every shard is still
// served here (else kRefused, `*why` saying why) and held by floor(R/2) of the shard's other
// in-sync copies. `targets`: routing.Targets() by shard.
enum class Durability { kDurable, kWaiting, kRefused };
Durability CheckDurable(const Routing& routing, const std::map<uint32_t, Routing::Target>& targets,
                        const SentVersions& sent,
                        const std::vector<std::pair<uint32_t, uint64_t>>& need, std::string* why);

// A copy's side of a forward: replaces server `self`'s copy of `shard` by the primary's state if
// it is newer by (term, version), then raises the job's epochs to `epochs` and marks the copy
// received. Refused with FAILED_PRECONDITION when `self` is the shard's primary or the state is
// of an older term than the copy's (its sender, `from`, was deposed); NOT_FOUND when the shard
// is not held here; INVALID_ARGUMENT when `count` is not the shard's size.
Status AcceptForward(uint32_t self, ParamStore* store, Routing* routing, uint32_t shard,
                     const float* values, int64_t count, const ShardMeta& meta, uint32_t epochs,
                     uint32_t from);

// A copy's state as read for a promoted primary (ReplicaService.ReadShard).
struct CopyState {
  std::vector<float> values;
  ShardMeta meta;
  uint32_t epochs = 0;
};

// A promoted primary's catch-up, once every other in-sync copy of `c` answered with its state:
// takes the freshest by (term, version) if newer than its own, raises the shard's term to the
// promotion's and marks the shard caught up (Routing::CaughtUp): it may be served. Returns
// whether a copy's state was taken.
StatusOr<bool> FinishCatchUp(ParamStore* store, Routing* routing, const Routing::CatchUp& c,
                             const std::vector<CopyState>& states);

// The heartbeat server `self` sends: its addresses, `incarnation`, the map version it routes by,
// and each held shard's version and term (in_sync: a copy being filled has received a forward).
v1::HeartbeatRequest MakeHeartbeat(uint32_t self, const ServerAddresses& addresses,
                                   uint64_t incarnation, const Routing& routing,
                                   const ParamStore& store);

// The leader accepted a heartbeat sent at `sent` (routing's clock): adopts its map if newer and
// renews the lease. Returns whether the map was adopted.
bool TakeHeartbeatAnswer(Routing* routing, const v1::HeartbeatResponse& answer,
                         Clock::TimePoint sent);

}  // namespace adam::ps
