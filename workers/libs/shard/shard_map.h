// The shard map: how a model's flat parameter vector is cut into shards and which parameter
// server holds each.
//
// Shards are contiguous ranges of `shard_bytes / 4` floats (the last may be shorter). Each shard's
// server comes from a deterministic hash: shards are ordered by a 64-bit mix of their id and the
// job's salt, then dealt round-robin, so servers hold counts that differ by at most one and every
// process that builds the map from the same inputs gets the same map. With a controller, the
// controller's versioned map moves primaries; WithServers gives clients the same cut routed to
// them. Immutable after construction: thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace adam::shard {

struct Shard {
  uint32_t id = 0;
  int64_t offset = 0;  // first parameter (float index) of the shard
  int64_t count = 0;   // number of floats
  int server = 0;      // index of the parameter server that holds it
};

class ShardMap {
 public:
  // Requires num_params >= 1, shard_bytes >= 4 and a multiple of 4, num_servers >= 1.
  static StatusOr<ShardMap> Make(int64_t num_params, int64_t shard_bytes, int num_servers,
                                 uint64_t salt);

  const std::vector<Shard>& shards() const { return shards_; }
  int num_servers() const { return num_servers_; }
  int64_t num_params() const { return num_params_; }
  // The ids of the shards held by `server`, ascending.
  std::vector<uint32_t> ShardsOf(int server) const;
  // The initial copies of `shard` when every shard has `copies` copies: its server, then the
  // next servers in index order (at most num_servers copies). The controller's bootstrap map.
  std::vector<int> InitialCopies(uint32_t shard, int copies) const;
  // The same cut with shard i on server `server_of[i]` (e.g. the controller's current primaries),
  // over `num_servers` servers (0: this map's; more when servers joined the job). Fails unless
  // there is one entry per shard, each in [0, num_servers).
  StatusOr<ShardMap> WithServers(const std::vector<int>& server_of, int num_servers = 0) const;

 private:
  std::vector<Shard> shards_;
  int num_servers_ = 0;
  int64_t num_params_ = 0;
};

// SplitMix64: a fast, well-mixed 64-bit hash, stable across platforms and releases.
uint64_t Mix64(uint64_t x);

}  // namespace adam::shard
