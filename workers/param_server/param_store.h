// ParamStore: the shards one parameter server holds, with their current values.
//
// Pushes add a delta to a shard; pulls copy a shard out. Each shard has its own lock, so pushes
// to different shards run in parallel and concurrent pushes to one shard all land (no lost
// update). Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "shard/shard_map.h"

namespace adam::ps {

class ParamStore {
 public:
  // Holds the shards that `map` assigns to `server`, initialised from `initial` (the full
  // parameter vector, map.num_params() floats).
  ParamStore(const shard::ShardMap& map, int server, const float* initial);

  // Adds `delta` (count floats) to `shard`. Fails, changing nothing, when the shard is not held
  // here or the size is wrong.
  Status Add(uint32_t shard, const float* delta, int64_t count);
  // Checks what Add would check, without applying.
  Status CheckDelta(uint32_t shard, int64_t count) const;
  // Copies `shard` into `out` (its size in floats) and returns its version (pushes applied).
  StatusOr<uint64_t> Read(uint32_t shard, float* out, int64_t count) const;
  // Size in floats of a held shard, or -1.
  int64_t ShardSize(uint32_t shard) const;
  std::vector<uint32_t> shard_ids() const;
  int64_t total_floats() const { return total_floats_; }

 private:
  struct Shard {
    mutable std::mutex mu;
    std::vector<float> values;  // guarded by mu
    uint64_t version = 0;       // guarded by mu
  };
  std::unordered_map<uint32_t, std::unique_ptr<Shard>> shards_;  // immutable after construction
  int64_t total_floats_ = 0;
};

}  // namespace adam::ps
