#include "trainer/push_check.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "adam/v1/controller.grpc.pb.h"
#include "adam/v1/ps.grpc.pb.h"
#include "core/role_events.h"
#include "net/grpc.h"

namespace adam::trainer {

StatusOr<int64_t> PushCheckBase(const shard::ShardMap& map, const PushCheckOptions& o) {
  if (o.pushes <= 0 || o.round < 0 || o.trainers <= 0 || o.index < 0 || o.index >= o.trainers)
    return InvalidArgumentError(
        "--check-pushes needs a positive count, --check-round >= 0 and a "
        "trainer index below the job's trainers");
  int64_t smallest = INT64_MAX;
  for (const auto& s : map.shards()) smallest = std::min(smallest, s.count);
  const int64_t base = (int64_t{o.round} * o.trainers + o.index) * o.pushes;
  const int64_t need = (int64_t{o.round} + 1) * o.trainers * o.pushes;
  if (need > smallest)
    return InvalidArgumentError("--check-pushes " + std::to_string(o.pushes) + " at round " +
                                std::to_string(o.round) + " needs " + std::to_string(need) +
                                " floats in every shard; the smallest shard has " +
                                std::to_string(smallest));
  return base;
}

void CountTags(const std::vector<bool>& acked, const float* tags, PushCheckResult* r) {
  for (size_t n = 0; n < acked.size(); ++n) {
    const float v = tags[n];
    if (acked[n] && v < 0.5f) ++r->lost;
    if (v > 1.5f) ++r->twice;
    if (!acked[n] && v > 0.5f) ++r->unacked_applied;
  }
}

namespace {

StatusOr<adam::v1::ShardMap> NewestMap(const net::Transport& transport,
                                       const std::vector<std::string>& members) {
  std::optional<adam::v1::ShardMap> best;
  for (const auto& m : members) {
    auto stub = adam::v1::Controller::NewStub(net::MakeChannel(transport, m));
    grpc::ClientContext ctx;
    net::SetDeadline(&ctx, std::chrono::milliseconds(500));
    adam::v1::ShardMap map;
    if (stub->GetShardMap(&ctx, adam::v1::GetShardMapRequest(), &map).ok() &&
        (!best || map.version() > best->version()))
      best = std::move(map);
  }
  if (!best) return UnavailableError("no controller member answered GetShardMap");
  return *best;
}

// One copy's tags of one shard.
struct CopyRead {
  uint32_t shard = 0;
  uint32_t server = 0;
  bool primary = false;
  bool ok = false;
  std::vector<float> tags;
};

// Pushes `o.pushes` tagged updates (push n adds 1 at float `base + n` of every shard) and returns
// which were acknowledged, counted in `r`.
std::vector<bool> PushTagged(const shard::ShardMap& map, ParamServerClient* ps,
                             const PushCheckOptions& o, int64_t base, PushCheckResult* r) {
  std::vector<float> delta(size_t(map.num_params()), 0.f);
  std::vector<bool> acked(size_t(o.pushes), false);
  const auto t0 = o.clock->Now();
  for (int n = 0; n < o.pushes; ++n) {
    for (const auto& s : map.shards()) delta[size_t(s.offset + base + n)] = 1.f;
    PushArgs args;
    args.delta = delta.data();
    args.clock = uint64_t(n) + 1;
    const Status st = ps->Push(args);
    for (const auto& s : map.shards()) delta[size_t(s.offset + base + n)] = 0.f;
    acked[size_t(n)] = st.ok();
    r->acked += st.ok();
    if (!st.ok()) spdlog::warn("push {} of {} not acknowledged: {}", n + 1, o.pushes, st.message());
    if ((n + 1) % 50 == 0 || n + 1 == o.pushes)
      spdlog::info("check: {} of {} pushes, {} acknowledged ({:.1f} s)", n + 1, o.pushes, r->acked,
                   o.clock->SecondsSince(t0));
    o.clock->SleepFor(o.every);
  }
  return acked;
}

// Reads the tags of every copy of every shard in a shard map, through one stub per server.
class CopyReader {
 public:
  CopyReader(const net::Transport& transport, int64_t base, int pushes)
      : transport_(transport), base_(base), pushes_(pushes) {}

  // The in-sync copies of every shard of `m` into `reads`; whether each was read and agrees with
  // its primary (copies being filled are compared once they are in sync, not before).
  bool ReadAll(const adam::v1::ShardMap& m, std::vector<CopyRead>* reads) {
    bool settled = true;
    for (const auto& rec : m.shards()) {
      std::vector<uint32_t> holders(rec.replicas().begin(), rec.replicas().end());
      holders.insert(holders.end(), rec.copying().begin(), rec.copying().end());
      std::optional<std::vector<float>> primary;
      for (size_t i = 0; i < holders.size(); ++i) {
        CopyRead c = Read(m, rec.shard(), holders[i]);
        c.primary = i == 0;
        const bool in_sync = int(i) < rec.replicas_size();
        if (c.primary && c.ok) primary = c.tags;
        if (in_sync && (!c.ok || (primary && c.tags != *primary))) settled = false;
        if (in_sync) reads->push_back(std::move(c));
      }
      if (!primary) settled = false;
    }
    return settled;
  }

 private:
  CopyRead Read(const adam::v1::ShardMap& m, uint32_t shard, uint32_t server) {
    CopyRead c;
    c.shard = shard;
    c.server = server;
    const std::string address =
        int(server) < m.servers_size() ? m.servers(int(server)).address() : "";
    if (address.empty()) return c;
    auto& stub = stubs_[address];
    if (!stub) stub = adam::v1::ParameterService::NewStub(net::MakeChannel(transport_, address));
    adam::v1::ReadCopyRequest req;
    req.set_shard(shard);
    req.set_offset(uint64_t(base_));
    req.set_count(uint64_t(pushes_));
    adam::v1::ReadCopyResponse resp;
    grpc::ClientContext ctx;
    net::SetDeadline(&ctx, std::chrono::milliseconds(1000));
    if (stub->ReadCopy(&ctx, req, &resp).ok() && resp.values().size() == size_t(pushes_) * 4) {
      c.ok = true;
      c.tags.resize(size_t(pushes_));
      std::memcpy(c.tags.data(), resp.values().data(), resp.values().size());
    }
    return c;
  }

  const net::Transport& transport_;
  int64_t base_;
  int pushes_;
  std::map<std::string, std::unique_ptr<adam::v1::ParameterService::Stub>> stubs_;
};

// Counts into `r`, from the copies read: the acknowledged pushes each primary lost or applied
// twice, and the copies unlike their primary or unreadable.
void Compare(const std::vector<CopyRead>& reads, const std::vector<bool>& acked,
             PushCheckResult* r) {
  std::map<uint32_t, const CopyRead*> primaries;
  for (const auto& c : reads)
    if (c.primary && c.ok) primaries[c.shard] = &c;
  for (const auto& [shard, p] : primaries) CountTags(acked, p->tags.data(), r);
  for (const auto& c : reads) {
    if (c.primary) {
      if (!c.ok) ++r->unread;
      continue;
    }
    ++r->copies;
    auto p = primaries.find(c.shard);
    if (!c.ok || p == primaries.end()) {
      ++r->unread;
    } else if (c.tags != p->second->tags) {
      ++r->disagree;
    }
  }
}

void Report(const PushCheckOptions& o, const PushCheckResult& r) {
  events::Emit(events::PushCheck{.trainer = o.index,
                                 .round = o.round,
                                 .pushes = r.pushes,
                                 .acked = r.acked,
                                 .lost = r.lost,
                                 .twice = r.twice,
                                 .unacked_applied = r.unacked_applied,
                                 .disagree = r.disagree,
                                 .unread = r.unread,
                                 .copies = r.copies,
                                 .map_version = r.map_version});
  spdlog::info(
      "check: {} pushes, {} acknowledged; shard updates lost {}, applied twice {}; "
      "copies unlike their primary {} of {}, unreadable {}; {} shard updates of "
      "unacknowledged pushes applied",
      r.pushes, r.acked, r.lost, r.twice, r.disagree, r.copies, r.unread, r.unacked_applied);
}

}  // namespace

StatusOr<PushCheckResult> RunPushCheck(const shard::ShardMap& map, ParamServerClient* ps,
                                       const PushCheckOptions& o) {
  ADAM_ASSIGN_OR_RETURN(const int64_t base, PushCheckBase(map, o));
  PushCheckResult r;
  r.pushes = o.pushes;
  const std::vector<bool> acked = PushTagged(map, ps, o, base, &r);
  // Read the tags from every copy until they agree with their primaries (forwards and a
  // failover may still be under way) or `settle` has passed.
  const auto deadline = o.clock->Now() + o.settle;
  CopyReader reader(*o.transport, base, o.pushes);
  std::vector<CopyRead> reads;
  for (int attempt = 0;; ++attempt) {
    reads.clear();
    bool settled = false;
    if (StatusOr<adam::v1::ShardMap> m = NewestMap(*o.transport, o.controller); m.ok()) {
      r.map_version = m->version();
      settled = reader.ReadAll(*m, &reads);
    }
    if (settled || o.clock->Now() >= deadline) break;
    if (attempt % 10 == 9) spdlog::info("check: waiting for every copy to agree");
    o.clock->SleepFor(std::chrono::milliseconds(200));
  }
  Compare(reads, acked, &r);
  Report(o, r);
  return r;
}

}  // namespace adam::trainer
