#include "param_server/replication.h"

#include <algorithm>

namespace adam::ps {

std::vector<std::string> DueCopies(const Routing::Target& target, uint64_t version,
                                   const SentVersions& sent) {
  std::vector<std::string> due;
  for (const auto& a : target.in_sync) {
    if (a.empty()) continue;  // on a server the map marks dead
    auto it = sent.find({target.shard, a});
    if (it == sent.end() || it->second < version) due.push_back(a);
  }
  // A copy being filled reports itself in sync only after a forward that reached it while its
  // map named it a copy: one it got before it was dropped and named again does not count. So it
  // is sent the shard every round until the controller's map has it in sync.
  for (const auto& a : target.copying)
    if (!a.empty()) due.push_back(a);
  return due;
}

void ForgetCopies(SentVersions* sent, const std::vector<std::string>& addresses) {
  for (const std::string& a : addresses) {
    if (a.empty()) continue;
    for (auto it = sent->begin(); it != sent->end();)
      it = it->first.second == a ? sent->erase(it) : std::next(it);
  }
}

void RecordForward(SentVersions* sent, uint32_t shard, const std::string& address, uint64_t version,
                   bool ok) {
  if (!ok) {
    sent->erase({shard, address});
    return;
  }
  uint64_t& held = (*sent)[{shard, address}];
  held = std::max(held, version);
}

Durability CheckDurable(const Routing& routing, const std::map<uint32_t, Routing::Target>& targets,
                        const SentVersions& sent,
                        const std::vector<std::pair<uint32_t, uint64_t>>& need, std::string* why) {
  bool durable = true;
  for (const auto& [shard, version] : need) {
    if (std::string refusal = routing.Refusal(shard); !refusal.empty()) {
      *why = std::move(refusal);
      return Durability::kRefused;
    }
    auto it = targets.find(shard);
    if (it == targets.end()) continue;  // no copies to wait for
    const Routing::Target& t = it->second;
    int holding = 0;
    for (const auto& a : t.in_sync) {
      auto s = sent.find({shard, a});
      holding += !a.empty() && s != sent.end() && s->second >= version;
    }
    if (holding < t.replicas / 2) durable = false;
  }
  return durable ? Durability::kDurable : Durability::kWaiting;
}

Status AcceptForward(uint32_t self, ParamStore* store, Routing* routing, uint32_t shard,
                     const float* values, int64_t count, const ShardMeta& meta, uint32_t epochs,
                     uint32_t from) {
  if (routing->IsPrimary(shard))
    return FailedPreconditionError("ps-" + std::to_string(self) + " is the primary of shard " +
                                   std::to_string(shard) + " at map version " +
                                   std::to_string(routing->version()));
  const int64_t n = store->ShardSize(shard);
  if (n < 0) return NotFoundError("forward: shard " + std::to_string(shard) + " is not held here");
  if (count != n)
    return InvalidArgumentError("forward: shard " + std::to_string(shard) +
                                " values: " + std::to_string(count * 4) + " bytes, expected " +
                                std::to_string(n * 4));
  ADAM_ASSIGN_OR_RETURN(SetResult set, store->SetState(shard, values, n, meta));
  if (set == SetResult::kStale)
    return FailedPreconditionError(
        "ps-" + std::to_string(self) + " holds shard " + std::to_string(shard) + " at term " +
        std::to_string(store->Term(shard)) + ", newer than the forward's " +
        std::to_string(meta.term) + ": ps-" + std::to_string(from) + " was deposed");
  // kHeld: this copy already holds that state or a later one of the same primary.
  store->RaiseEpochs(epochs);
  routing->MarkReceived(shard);
  return OkStatus();
}

StatusOr<bool> FinishCatchUp(ParamStore* store, Routing* routing, const Routing::CatchUp& c,
                             const std::vector<CopyState>& states) {
  const int64_t n = store->ShardSize(c.shard);
  if (n < 0)
    return NotFoundError("catch-up: shard " + std::to_string(c.shard) + " is not held here");
  const CopyState* best = nullptr;
  for (const CopyState& s : states) {
    if (int64_t(s.values.size()) != n)
      return InvalidArgumentError("catch-up: shard " + std::to_string(c.shard) + ": a copy sent " +
                                  std::to_string(s.values.size()) + " floats, expected " +
                                  std::to_string(n));
    if (!best || std::make_pair(s.meta.term, s.meta.version) >
                     std::make_pair(best->meta.term, best->meta.version))
      best = &s;
  }
  bool taken = false;
  if (best != nullptr) {
    ADAM_ASSIGN_OR_RETURN(SetResult set,
                          store->SetState(c.shard, best->values.data(), n, best->meta));
    store->RaiseEpochs(best->epochs);
    taken = set == SetResult::kApplied;
  }
  ADAM_RETURN_IF_ERROR(store->RaiseTerm(c.shard, c.term));
  routing->CaughtUp(c.shard, c.term);
  return taken;
}

v1::HeartbeatRequest MakeHeartbeat(uint32_t self, const ServerAddresses& addresses,
                                   uint64_t incarnation, const Routing& routing,
                                   const ParamStore& store) {
  v1::HeartbeatRequest req;
  req.mutable_server()->set_id(self);
  req.mutable_server()->set_address(addresses.address);
  req.mutable_server()->set_replication_address(addresses.replication_address);
  req.mutable_server()->set_host(addresses.host);
  req.mutable_server()->set_incarnation(incarnation);
  req.set_map_version(routing.version());
  const std::vector<uint32_t> copying = routing.Copying();
  for (uint32_t id : store.shard_ids()) {
    auto* v = req.add_shards();
    v->set_shard(id);
    v->set_version(store.Version(id));
    v->set_term(store.Term(id));
    v->set_in_sync(std::count(copying.begin(), copying.end(), id) > 0 && routing.Received(id));
  }
  return req;
}

bool TakeHeartbeatAnswer(Routing* routing, const v1::HeartbeatResponse& answer,
                         Clock::TimePoint sent) {
  const bool adopted = answer.has_map() && routing->Update(answer.map());
  routing->RenewLease(sent);
  return adopted;
}

}  // namespace adam::ps
