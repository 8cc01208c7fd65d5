// ParamStore: per-shard locked float vectors.
#include "param_server/param_store.h"

#include <algorithm>
#include <cstring>

namespace adam::ps {

ParamStore::ParamStore(const shard::ShardMap& map, int server, const float* initial) {
  for (const auto& s : map.shards()) {
    if (s.server != server) continue;
    auto sh = std::make_unique<Shard>();
    sh->values.assign(initial + s.offset, initial + s.offset + s.count);
    total_floats_ += s.count;
    shards_.emplace(s.id, std::move(sh));
  }
}

Status ParamStore::CheckDelta(uint32_t shard, int64_t count) const {
  auto it = shards_.find(shard);
  if (it == shards_.end())
    return Status(StatusCode::kNotFound, "shard " + std::to_string(shard) + " is not held here");
  const int64_t size = static_cast<int64_t>(it->second->values.size());
  if (count != size)
    return InvalidArgumentError("shard " + std::to_string(shard) + ": delta has " +
                                std::to_string(count) + " floats, shard has " +
                                std::to_string(size));
  return OkStatus();
}

Status ParamStore::Add(uint32_t shard, const float* delta, int64_t count) {
  ADAM_RETURN_IF_ERROR(CheckDelta(shard, count));
  Shard& s = *shards_.at(shard);
  std::lock_guard<std::mutex> lock(s.mu);
  float* v = s.values.data();
  for (int64_t i = 0; i < count; ++i) v[i] += delta[i];
  ++s.version;
  return OkStatus();
}

StatusOr<uint64_t> ParamStore::Read(uint32_t shard, float* out, int64_t count) const {
  ADAM_RETURN_IF_ERROR(CheckDelta(shard, count));
  const Shard& s = *shards_.at(shard);
  std::lock_guard<std::mutex> lock(s.mu);
  std::memcpy(out, s.values.data(), size_t(count) * sizeof(float));
  return s.version;
}

int64_t ParamStore::ShardSize(uint32_t shard) const {
  auto it = shards_.find(shard);
  return it == shards_.end() ? -1 : static_cast<int64_t>(it->second->values.size());
}

std::vector<uint32_t> ParamStore::shard_ids() const {
  std::vector<uint32_t> ids;
  for (const auto& [id, _] : shards_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace adam::ps
