// The promise, checked (`adam trainer --check-pushes N`): instead of training, a trainer makes N
// tagged pushes through the same routed client training uses, each adding exactly 1.0 to its own
// float of every shard (its tag), and records which were acknowledged. Then it reads its tags from
// every copy of every shard (ParameterService.ReadCopy) until the copies agree or `settle` has
// passed, and counts: acknowledged pushes missing on the primary (lost), tags above 1 (applied
// twice), and copies that still disagree with their primary. Faults are injected from outside
// (the multihost harness kills, pauses and partitions the servers meanwhile).
//
// Tags: round R, trainer T, push n use float (R * trainers + T) * N + n of every shard, so
// several rounds on one job never share a float. Adding 0 to the other floats is exact, so the
// other trainers' and rounds' pushes leave each tag as its own pushes made it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "core/clock.h"
#include "net/grpc.h"
#include "shard/shard_map.h"
#include "trainer/ps_client.h"

namespace adam::trainer {

struct PushCheckOptions {
  int pushes = 0;
  int round = 0;
  int trainers = 1;
  int index = 0;
  std::chrono::milliseconds every{20};      // pause between pushes
  std::chrono::milliseconds settle{30000};  // how long copies may take to agree
  std::vector<std::string> controller;      // members' addresses: the shard map
  std::shared_ptr<const net::Transport> transport = net::Transport::Plaintext();
  Clock* clock = Clock::Real();  // the pauses, the settle bound and the progress figures
};

// lost, twice and unacked_applied count shard updates: a push is one update of every shard.
struct PushCheckResult {
  int pushes = 0;
  int acked = 0;
  int lost = 0;             // of an acknowledged push, not on the shard's primary
  int twice = 0;            // applied more than once on the primary
  int unacked_applied = 0;  // of a push not acknowledged (it failed) but applied: allowed
  int disagree = 0;         // (shard, copy) pairs still unlike their primary after `settle`
  int unread = 0;           // (shard, copy) pairs that could not be read at the end
  int copies = 0;           // (shard, copy) pairs compared
  uint64_t map_version = 0;
};

// The first float of this trainer's tags in every shard, or an error when a shard is too small
// for every round's tags.
StatusOr<int64_t> PushCheckBase(const shard::ShardMap& map, const PushCheckOptions& o);

// Counts one primary's tags: `acked[n]` says whether push n was acknowledged, `tags[n]` is the
// primary's float for it. Adds to lost, twice and unacked_applied.
void CountTags(const std::vector<bool>& acked, const float* tags, PushCheckResult* r);

// Runs the pushes and the check; emits a "push_check" event with the result.
StatusOr<PushCheckResult> RunPushCheck(const shard::ShardMap& map, ParamServerClient* ps,
                                       const PushCheckOptions& o);

}  // namespace adam::trainer
