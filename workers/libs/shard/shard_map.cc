// ShardMap construction.
#include "shard/shard_map.h"

#include <algorithm>
#include <numeric>

namespace adam::shard {

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

StatusOr<ShardMap> ShardMap::Make(int64_t num_params, int64_t shard_bytes, int num_servers,
                                  uint64_t salt) {
  if (num_params < 1) return InvalidArgumentError("shard map: num_params must be >= 1");
  if (shard_bytes < 4 || shard_bytes % 4 != 0)
    return InvalidArgumentError("shard map: shard_bytes must be a positive multiple of 4, got " +
                                std::to_string(shard_bytes));
  if (num_servers < 1) return InvalidArgumentError("shard map: num_servers must be >= 1");
  ShardMap map;
  map.num_servers_ = num_servers;
  map.num_params_ = num_params;
  const int64_t per = shard_bytes / 4;
  for (int64_t off = 0; off < num_params; off += per) {
    Shard s;
    s.id = static_cast<uint32_t>(map.shards_.size());
    s.offset = off;
    s.count = std::min(per, num_params - off);
    map.shards_.push_back(s);
  }
  std::vector<uint32_t> order(map.shards_.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    uint64_t ha = Mix64(salt ^ Mix64(a)), hb = Mix64(salt ^ Mix64(b));
    return ha != hb ? ha < hb : a < b;
  });
  for (size_t rank = 0; rank < order.size(); ++rank)
    map.shards_[order[rank]].server = static_cast<int>(rank % num_servers);
  return map;
}

std::vector<uint32_t> ShardMap::ShardsOf(int server) const {
  std::vector<uint32_t> ids;
  for (const auto& s : shards_)
    if (s.server == server) ids.push_back(s.id);
  return ids;
}

std::vector<int> ShardMap::InitialCopies(uint32_t shard, int copies) const {
  std::vector<int> out;
  if (shard >= shards_.size()) return out;
  const int n = std::min(copies, num_servers_);
  for (int c = 0; c < n; ++c) out.push_back((shards_[shard].server + c) % num_servers_);
  return out;
}

StatusOr<ShardMap> ShardMap::WithServers(const std::vector<int>& server_of, int num_servers) const {
  if (server_of.size() != shards_.size())
    return InvalidArgumentError("shard map: " + std::to_string(server_of.size()) +
                                " servers given for " + std::to_string(shards_.size()) + " shards");
  ShardMap m = *this;
  if (num_servers > 0) m.num_servers_ = num_servers;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (server_of[i] < 0 || server_of[i] >= m.num_servers_)
      return InvalidArgumentError("shard map: shard " + std::to_string(i) + " on server " +
                                  std::to_string(server_of[i]) + ", not in [0, " +
                                  std::to_string(m.num_servers_) + ")");
    m.shards_[i].server = server_of[i];
  }
  return m;
}

}  // namespace adam::shard
