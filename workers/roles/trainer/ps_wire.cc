// The parameter-server clients' wire pieces (ps_wire.h).
#include "trainer/ps_wire.h"

#include <prometheus/counter.h>
#include <spdlog/spdlog.h>

#include "core/role_events.h"
#include "update/codec.h"

namespace adam::trainer {

// One range of weight deltas as a ShardData of `r`, in `options`' format; with sparse_pushes,
// only its nonzero entries and their indices where that is smaller, and nothing at all when
// every entry is zero. Returns the bytes added.
uint64_t AddDelta(adam::v1::PushRequest* r, uint32_t shard, int64_t offset, const float* from,
                  int64_t count, const GrpcParamServerClientOptions& options) {
  const update::WireFormat& f = options.format;
  if (!options.sparse_pushes && f == update::WireFormat{}) {
    auto* d = r->add_deltas();
    d->set_shard(shard);
    d->set_offset(uint64_t(offset));
    d->set_values(reinterpret_cast<const char*>(from), size_t(count) * 4);
    return uint64_t(count) * 4;
  }
  thread_local std::vector<uint32_t> idx;
  thread_local std::vector<float> nonzero;
  idx.clear();
  nonzero.clear();
  if (options.sparse_pushes) {
    for (int64_t i = 0; i < count; ++i)
      if (from[i] != 0.f) {
        idx.push_back(uint32_t(i));
        nonzero.push_back(from[i]);
      }
    if (idx.empty()) return 0;
  }
  const bool sparse =
      options.sparse_pushes && idx.size() * (f.value_bytes() + 4) < size_t(count) * f.value_bytes();
  auto* d = r->add_deltas();
  d->set_shard(shard);
  d->set_offset(uint64_t(offset));
  d->set_float16(f.float16);
  d->set_zstd(f.zstd);
  if (sparse) {
    update::EncodeFloats(nonzero.data(), nonzero.size(), f, d->mutable_values());
    update::EncodeIndices(idx.data(), idx.size(), f.zstd, d->mutable_indices());
  } else {
    update::EncodeFloats(from, size_t(count), f, d->mutable_values());
  }
  return d->values().size() + d->indices().size();
}

// A pulled shard of `count` floats into `out`, in whatever format it travelled (DecodeFloats
// refuses any other number of them); an error names the shard and what was wrong.
Status ReadPulled(const adam::v1::ShardData& sd, int64_t count, float* out) {
  const Status st =
      update::DecodeFloats(sd.values(), {sd.float16(), sd.zstd()}, size_t(count), out);
  if (!st.ok()) return DataLossError("shard " + std::to_string(sd.shard()) + ": " + st.message());
  return OkStatus();
}

Status SliceView::Read(const adam::v1::ShardData& sd, const shard::Shard& s, float* out) const {
  if (whole()) {
    if (sd.offset() != 0)
      return DataLossError("shard " + std::to_string(s.id) + " came back from float " +
                           std::to_string(sd.offset()) + ", not whole");
    return ReadPulled(sd, s.count, out + s.offset);
  }
  const int64_t w = s.offset + int64_t(std::min<uint64_t>(sd.offset(), uint64_t(s.count)));
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), w,
                             [](int64_t v, const auto& r) { return v < r.whole; });
  const int64_t n =
      it == ranges_.begin()
          ? 0
          : std::min(std::prev(it)->whole + std::prev(it)->count, s.offset + s.count) - w;
  if (n <= 0 || sd.offset() >= uint64_t(s.count))
    return DataLossError("shard " + std::to_string(s.id) + " came back from float " +
                         std::to_string(sd.offset()) + ", which this slice does not hold");
  return ReadPulled(sd, n, out + std::prev(it)->own + (w - std::prev(it)->whole));
}

void ReadVersions::Read(uint32_t shard, uint64_t version, int server) {
  uint64_t before = 0;
  {
    MutexLock l(mu_);
    uint64_t& highest = highest_[shard];
    if (version >= highest) {
      highest = version;
      return;
    }
    before = highest;
    highest = version;  // what is missing is counted once
  }
  const uint64_t missing = before - version;
  if (options_.missing) options_.missing->Increment(double(missing));
  spdlog::warn(
      "shard {} read from ps-{} at version {}: {} updates fewer than this trainer read before "
      "(version {}); the servers no longer hold them",
      shard, server, version, missing, before);
  events::Emit(events::ShardFellBack{.trainer = options_.trainer_index,
                                     .shard = shard,
                                     .server = server,
                                     .version = version,
                                     .before = before,
                                     .updates = missing});
}

}  // namespace adam::trainer
