// What the parameter-server clients (ps_client.cc) put on the wire and read back: pushes
// deltas in the job's format, pulled shards into place, the part of the vector a client moves,
// and the versions it has read. Not a public header.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "adam/v1/ps.pb.h"
#include "core/mutex.h"
#include "core/status.h"
#include "model/partition.h"
#include "shard/shard_map.h"
#include "trainer/ps_client.h"

namespace adam::trainer {

// One range of weight deltas as a ShardData of `r`, in `options`' format; with sparse_pushes,
// only its nonzero entries and their indices where that is smaller, and nothing at all when
// every entry is zero. Returns the bytes added.
uint64_t AddDelta(adam::v1::PushRequest* r, uint32_t shard, int64_t offset, const float* from,
                  int64_t count, const GrpcParamServerClientOptions& options);

// A pulled shard of `count` floats into `out`, in whatever format it travelled (DecodeFloats
// refuses any other number of them); an error names the shard and what was wrong.
Status ReadPulled(const adam::v1::ShardData& sd, int64_t count, float* out);

// The part of the whole vector a client moves (GrpcParamServerClientOptions::slice), sorted by
// place in the whole vector; no ranges: all of it, where it lies.
class SliceView {
 public:
  explicit SliceView(std::vector<model::SliceRange> ranges) : ranges_(std::move(ranges)) {
    std::sort(ranges_.begin(), ranges_.end(),
              [](const auto& a, const auto& b) { return a.whole < b.whole; });
  }
  bool whole() const { return ranges_.empty(); }
  // fn(whole, own, count) for every part of [begin, begin + count) of the whole vector that the
  // slice holds, in order.
  template <typename Fn>
  void ForEach(int64_t begin, int64_t count, Fn fn) const {
    if (whole()) {
      fn(begin, begin, count);
      return;
    }
    const int64_t end = begin + count;
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), begin,
                               [](int64_t v, const auto& r) { return v < r.whole; });
    if (it != ranges_.begin()) --it;
    for (; it != ranges_.end() && it->whole < end; ++it) {
      const int64_t from = std::max(begin, it->whole);
      const int64_t to = std::min(end, it->whole + it->count);
      if (from < to) fn(from, it->own + (from - it->whole), to - from);
    }
  }
  bool Touches(int64_t begin, int64_t count) const {
    bool any = false;
    ForEach(begin, count, [&](int64_t, int64_t, int64_t) { any = true; });
    return any;
  }
  // What to ask of shard `s` in a pull: the whole shard, or the parts the slice holds.
  void Ask(adam::v1::PullRequest* r, const shard::Shard& s) const {
    if (whole()) {
      r->add_shards(s.id);
      return;
    }
    ForEach(s.offset, s.count, [&](int64_t w, int64_t, int64_t n) {
      auto* range = r->add_ranges();
      range->set_shard(s.id);
      range->set_offset(uint64_t(w - s.offset));
      range->set_count(uint64_t(n));
    });
  }
  // A pulled part of shard `s` (all of it, or one that Ask asked for) into its place in `out`.
  Status Read(const adam::v1::ShardData& sd, const shard::Shard& s, float* out) const;

 private:
  std::vector<model::SliceRange> ranges_;
};

// The highest version of each shard a client has read, and the falls below it
// (GrpcParamServerClientOptions::missing). Thread-safe.
class ReadVersions {
 public:
  explicit ReadVersions(const GrpcParamServerClientOptions& options) : options_(options) {}

  // Shard `shard` read from ps-`server` at `version`.
  void Read(uint32_t shard, uint64_t version, int server);

 private:
  const GrpcParamServerClientOptions& options_;
  Mutex mu_;
  std::map<uint32_t, uint64_t> highest_ ABSL_GUARDED_BY(mu_);
};

}  // namespace adam::trainer
