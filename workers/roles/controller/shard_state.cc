#include "controller/shard_state.h"

#include <algorithm>
#include <map>

namespace adam::controller {
namespace {

bool Holds(const v1::ShardRecord& r, uint32_t server) {
  return std::find(r.replicas().begin(), r.replicas().end(), server) != r.replicas().end() ||
         std::find(r.copying().begin(), r.copying().end(), server) != r.copying().end();
}

const v1::ServerRecord* Server(const v1::ControllerState& s, uint32_t id) {
  return id < uint32_t(s.servers_size()) ? &s.servers(int(id)) : nullptr;
}

bool Leaving(const v1::ControllerState& s, uint32_t id) { return id >= ServersWanted(s); }

// Adds copies to `r` until it has `copies` (in sync + copying), choosing alive servers that do
// not hold it, are not on probation and, when hosts are known, whose host holds no copy; fewest
// shards first.
void AddCopies(const v1::ControllerState& s, const std::set<uint32_t>& on_probation,
               v1::ShardRecord* r, std::vector<int>* load) {
  while (r->replicas_size() + r->copying_size() < int(s.copies())) {
    std::set<std::string> hosts;
    for (uint32_t id : r->replicas())
      if (auto* sv = Server(s, id); sv && !sv->host().empty()) hosts.insert(sv->host());
    for (uint32_t id : r->copying())
      if (auto* sv = Server(s, id); sv && !sv->host().empty()) hosts.insert(sv->host());
    int best = -1;
    for (int id = 0; id < s.servers_size(); ++id) {
      const v1::ServerRecord& sv = s.servers(id);
      if (!sv.alive() || Holds(*r, uint32_t(id)) || on_probation.count(uint32_t(id)) ||
          Leaving(s, uint32_t(id)))
        continue;
      if (!sv.host().empty() && hosts.count(sv.host())) continue;
      if (best < 0 || (*load)[size_t(id)] < (*load)[size_t(best)]) best = id;
    }
    if (best < 0) return;  // not enough distinct servers: stays under-replicated
    r->add_copying(uint32_t(best));
    ++(*load)[size_t(best)];
  }
}

std::vector<int> Load(const v1::ControllerState& s) {
  std::vector<int> load(size_t(s.servers_size()), 0);
  for (const auto& r : s.shards()) {
    for (uint32_t id : r.replicas())
      if (id < load.size()) ++load[id];
    for (uint32_t id : r.copying())
      if (id < load.size()) ++load[id];
  }
  return load;
}

}  // namespace

v1::ControllerState MakeBootstrap(const shard::ShardMap& map, int copies) {
  v1::ControllerState s;
  s.set_version(1);
  const int n = map.num_servers();
  s.set_copies(uint32_t(std::min(copies, n)));
  for (int i = 0; i < n; ++i) s.add_servers()->set_id(uint32_t(i));
  s.set_servers_wanted(uint32_t(n));
  for (const shard::Shard& sh : map.shards()) {
    v1::ShardRecord* r = s.add_shards();
    r->set_shard(sh.id);
    for (int server : map.InitialCopies(sh.id, int(s.copies()))) r->add_replicas(uint32_t(server));
  }
  return s;
}

Status ShardState::Apply(const v1::Command& c) {
  state_.set_applied_commands(state_.applied_commands() + 1);
  switch (c.op_case()) {
    case v1::Command::kBootstrap:
      if (state_.shards_size() > 0) return FailedPreconditionError("bootstrap: a map exists");
      {
        const uint64_t applied = state_.applied_commands();
        auto kv = state_.kv();
        state_ = c.bootstrap();
        state_.set_applied_commands(applied);
        state_.mutable_kv()->insert(kv.begin(), kv.end());
      }
      return OkStatus();
    case v1::Command::kRegister:
      return ApplyRegister(c.register_());
    case v1::Command::kReassign:
      return ApplyReassign(c.reassign());
    case v1::Command::kCopyDone:
      return ApplyCopyDone(c.copy_done());
    case v1::Command::kPut:
      (*state_.mutable_kv())[c.put().key()] = c.put().value();
      return OkStatus();
    case v1::Command::kResize:
      return ApplyResize(c.resize());
    case v1::Command::OP_NOT_SET:
      break;
  }
  return FailedPreconditionError("empty command");
}

Status ShardState::ApplyRegister(const v1::ServerRecord& in) {
  if (in.id() >= uint32_t(state_.servers_size()))
    return FailedPreconditionError("register: server " + std::to_string(in.id()) +
                                   " is not in the job");
  v1::ServerRecord* sv = state_.mutable_servers(int(in.id()));
  if (sv->alive() && sv->address() == in.address() &&
      sv->replication_address() == in.replication_address() && sv->host() == in.host() &&
      sv->incarnation() == in.incarnation())
    return OkStatus();  // a repeated registration changes nothing
  *sv = in;
  sv->set_alive(true);
  state_.set_version(state_.version() + 1);
  return OkStatus();
}

Status ShardState::ApplyReassign(const v1::Reassign& r) {
  if (r.expected_version() != state_.version())
    return FailedPreconditionError("reassign planned at version " +
                                   std::to_string(r.expected_version()) + ", map is at " +
                                   std::to_string(state_.version()));
  for (uint32_t id : r.dead())
    if (id < uint32_t(state_.servers_size())) state_.mutable_servers(int(id))->set_alive(false);
  for (const v1::ShardRecord& rec : r.shards()) {
    if (rec.shard() >= uint32_t(state_.shards_size()))
      return FailedPreconditionError("reassign: shard " + std::to_string(rec.shard()) + " unknown");
    *state_.mutable_shards(int(rec.shard())) = rec;
  }
  if (r.rebalanced()) state_.set_rebalancing(false);
  state_.set_version(state_.version() + 1);
  return OkStatus();
}

Status ShardState::ApplyCopyDone(const v1::CopyDone& d) {
  if (d.expected_version() != state_.version())
    return FailedPreconditionError("copy done planned at version " +
                                   std::to_string(d.expected_version()));
  if (d.shard() >= uint32_t(state_.shards_size()))
    return FailedPreconditionError("copy done: shard " + std::to_string(d.shard()) + " unknown");
  v1::ShardRecord* rec = state_.mutable_shards(int(d.shard()));
  auto* cp = rec->mutable_copying();
  auto it = std::find(cp->begin(), cp->end(), d.server());
  if (it == cp->end())
    return FailedPreconditionError("copy done: server " + std::to_string(d.server()) +
                                   " is not copying shard " + std::to_string(d.shard()));
  cp->erase(it);
  rec->add_replicas(d.server());
  state_.set_version(state_.version() + 1);
  return OkStatus();
}

Status ShardState::ApplyResize(const v1::Resize& r) {
  const uint32_t n = r.servers();
  if (n < 1 || n < state_.copies())
    return FailedPreconditionError("resize: " + std::to_string(n) + " servers cannot hold " +
                                   std::to_string(state_.copies()) + " copies of every shard");
  if (n == ServersWanted(state_)) return OkStatus();
  for (uint32_t id = uint32_t(state_.servers_size()); id < n; ++id)
    state_.add_servers()->set_id(id);
  state_.set_servers_wanted(n);
  state_.set_rebalancing(true);
  state_.set_version(state_.version() + 1);
  return OkStatus();
}

std::string ShardState::Serialize() const { return state_.SerializeAsString(); }

Status ShardState::Restore(const std::string& bytes) {
  v1::ControllerState s;
  if (!s.ParseFromString(bytes)) return DataLossError("controller snapshot: not a ControllerState");
  state_ = std::move(s);
  return OkStatus();
}

int CopiesToServe(int replicas) { return replicas - replicas / 2; }

uint32_t ServersWanted(const v1::ControllerState& s) {
  return s.servers_wanted() == 0 ? uint32_t(s.servers_size()) : s.servers_wanted();
}

bool HoldsAcknowledged(const v1::ShardRecord& record, uint32_t server, const CopyTerms& terms) {
  auto it = terms.find({record.shard(), server});
  return (it == terms.end() ? uint64_t{0} : it->second) >= record.primary_since();
}

namespace {

// Copies of `shard`, the freshest first by (term, version); ties keep their order.
void SortFreshestFirst(uint32_t shard, const CopyVersions& versions, const CopyTerms& terms,
                       std::vector<uint32_t>* ids) {
  auto key = [&](uint32_t id) {
    auto v = versions.find({shard, id});
    auto t = terms.find({shard, id});
    return std::make_pair(t == terms.end() ? uint64_t{0} : t->second,
                          v == versions.end() ? uint64_t{0} : v->second);
  };
  std::stable_sort(ids->begin(), ids->end(),
                   [&](uint32_t a, uint32_t b) { return key(a) > key(b); });
}

}  // namespace

std::optional<v1::Reassign> PlanFailover(const v1::ControllerState& s,
                                         const std::set<uint32_t>& dead,
                                         const CopyVersions& versions,
                                         const std::set<uint32_t>& on_probation,
                                         const CopyTerms& terms) {
  v1::Reassign out;
  out.set_expected_version(s.version());
  for (uint32_t id : dead)
    if (auto* sv = Server(s, id); sv && sv->alive()) out.add_dead(id);
  if (out.dead().empty()) return std::nullopt;
  v1::ControllerState after = s;
  for (uint32_t id : out.dead()) after.mutable_servers(int(id))->set_alive(false);
  std::vector<int> load = Load(after);
  for (uint32_t id : out.dead()) load[id] = 0;
  int lost = 0;  // shards waiting for copies to come back
  for (const v1::ShardRecord& rec : s.shards()) {
    bool touched = false;
    for (uint32_t id : rec.replicas()) touched |= dead.count(id) > 0;
    for (uint32_t id : rec.copying()) touched |= dead.count(id) > 0;
    if (!touched) continue;
    v1::ShardRecord next;
    next.set_shard(rec.shard());
    next.set_primary_since(rec.primary_since());
    // Surviving in-sync copies, the freshest first (ties keep their order): the new primary.
    std::vector<uint32_t> alive;
    for (uint32_t id : rec.replicas())
      if (!dead.count(id)) alive.push_back(id);
    const bool primary_died = !rec.replicas().empty() && dead.count(rec.replicas(0));
    // The primary and too many copies lost to be sure a survivor holds every acknowledged update
    // (a push is acknowledged on the primary and floor(R/2) others), or no survivor has taken
    // the current primary's state yet: they all stay, the dead primary first, and the shard
    // waits for enough of them to come back (PlanRepair). When every copy died (the whole job),
    // the freshest goes first: it serves once it is back.
    const bool sure = std::any_of(alive.begin(), alive.end(),
                                  [&](uint32_t id) { return HoldsAcknowledged(rec, id, terms); });
    const bool wait =
        primary_died && (int(alive.size()) < CopiesToServe(rec.replicas_size()) || !sure);
    const bool sort = primary_died && (!wait || alive.empty());
    if (wait) {
      alive.assign(rec.replicas().begin(), rec.replicas().end());
      ++lost;
    }
    if (sort) SortFreshestFirst(rec.shard(), versions, terms, &alive);
    for (uint32_t id : alive) next.add_replicas(id);
    // In-sync copies cut (the primary among them or not): a push acknowledged with a lost one
    // may be on the primary alone until its next forward, so the term starts again (this plan's
    // version) and the copies left count only once they have a forward of it.
    if (!wait && next.replicas_size() < rec.replicas_size())
      next.set_primary_since(s.version() + 1);
    for (uint32_t id : rec.copying())
      if (!dead.count(id)) next.add_copying(id);
    AddCopies(after, on_probation, &next, &load);
    *out.add_shards() = next;
  }
  out.set_reason(lost == 0 ? std::string("servers stopped heartbeating")
                           : "servers stopped heartbeating; " + std::to_string(lost) +
                                 " shard(s) lost too many copies and wait for them to come back");
  return out;
}

std::optional<v1::Reassign> PlanRepair(const v1::ControllerState& s,
                                       const std::set<uint32_t>& on_probation, bool drop_dead,
                                       const CopyVersions& versions, const CopyTerms& terms) {
  v1::Reassign out;
  out.set_expected_version(s.version());
  std::vector<int> load = Load(s);
  for (const v1::ShardRecord& rec : s.shards()) {
    v1::ShardRecord next = rec;
    bool back = false;  // a copy kept on a dead server is back: the dead ones go
    if (drop_dead) {
      next.clear_replicas();
      for (uint32_t id : rec.replicas()) {
        const v1::ServerRecord* sv = Server(s, id);
        const bool died = sv && !sv->alive() && (!sv->address().empty() || sv->incarnation() != 0);
        if (!died) next.add_replicas(id);
      }
      auto alive = [&](uint32_t id) {
        const v1::ServerRecord* sv = Server(s, id);
        return sv && sv->alive();
      };
      // Served again once the primary is back, or enough copies to hold every acknowledged
      // update, one of them holding the current primary's state (see PlanFailover).
      const int back_now = int(std::count_if(rec.replicas().begin(), rec.replicas().end(), alive));
      const bool primary_back = !rec.replicas().empty() && alive(rec.replicas(0));
      const bool sure = std::any_of(rec.replicas().begin(), rec.replicas().end(), [&](uint32_t id) {
        return alive(id) && HoldsAcknowledged(rec, id, terms);
      });
      const bool enough =
          !rec.replicas().empty() &&
          (primary_back || (back_now >= CopiesToServe(rec.replicas_size()) && sure));
      if (enough && back_now > 0 && next.replicas_size() != rec.replicas_size()) {
        back = true;
        if (!primary_back) {  // a new primary: the freshest of those back
          std::vector<uint32_t> ids(next.replicas().begin(), next.replicas().end());
          SortFreshestFirst(rec.shard(), versions, terms, &ids);
          next.clear_replicas();
          for (uint32_t id : ids) next.add_replicas(id);
          next.clear_handoff_from();  // taken from a dead one, not handed over
        }
        next.set_primary_since(s.version() + 1);  // copies cut: the term starts again
      } else {
        next = rec;
      }
    }
    if (next.replicas_size() + next.copying_size() < int(s.copies()))
      AddCopies(s, on_probation, &next, &load);
    if (back || next.copying_size() != rec.copying_size()) *out.add_shards() = next;
  }
  if (out.shards().empty()) return std::nullopt;
  out.set_reason("under-replicated shards");
  return out;
}

namespace {

// Planning state of PlanRebalance: the records it changed, and each server's copies (in sync and
// being filled) and primaries as they will be once the plan is applied.
struct Rebalance {
  const v1::ControllerState& s;
  std::map<uint32_t, v1::ShardRecord> changed;
  std::vector<int> load;
  std::vector<int> primaries;

  explicit Rebalance(const v1::ControllerState& state) : s(state), load(Load(state)) {
    primaries.assign(load.size(), 0);
    for (const auto& r : s.shards()) {
      if (!r.replicas().empty() && r.replicas(0) < primaries.size()) ++primaries[r.replicas(0)];
      // A move in flight counts as done: its old copy goes once the new one is in sync.
      if (r.has_move_from() && r.move_from() < load.size()) --load[r.move_from()];
    }
  }
  const v1::ShardRecord& Get(uint32_t shard) const {
    auto it = changed.find(shard);
    return it != changed.end() ? it->second : s.shards(int(shard));
  }
  v1::ShardRecord& Edit(uint32_t shard) {
    auto it = changed.find(shard);
    if (it == changed.end()) it = changed.emplace(shard, s.shards(int(shard))).first;
    return it->second;
  }
  static bool Moving(const v1::ShardRecord& r) { return r.has_move_from() || r.copying_size() > 0; }
  // Whether `to` may take a copy of `r`: it holds none, and (hosts known) its host holds none
  // but possibly the one on `from`, which the move drops.
  bool MayTake(const v1::ShardRecord& r, uint32_t to, uint32_t from) const {
    if (Holds(r, to)) return false;
    const std::string& host = s.servers(int(to)).host();
    if (host.empty()) return true;
    for (const auto* list : {&r.replicas(), &r.copying()})
      for (uint32_t id : *list)
        if (id != from && Server(s, id) && Server(s, id)->host() == host) return false;
    return true;
  }
  // Starts moving `r`'s copy on `from` to `to`: filled first, dropped once in sync.
  void Move(uint32_t shard, uint32_t from, uint32_t to) {
    v1::ShardRecord& r = Edit(shard);
    r.add_copying(to);
    r.set_move_from(from);
    ++load[to];
    --load[from];
  }
  // Makes the in-sync copy on `to` the primary (a handoff: the copy reads the shard from the
  // others once the old primary's lease has run out, routing.h).
  void Handoff(v1::ShardRecord* r, uint32_t to) {
    auto* reps = r->mutable_replicas();
    auto it = std::find(reps->begin(), reps->end(), to);
    if (it == reps->end() || it == reps->begin()) return;
    --primaries[reps->Get(0)];
    ++primaries[to];
    r->set_handoff_from(reps->Get(0));
    std::rotate(reps->begin(), it, it + 1);
    r->set_primary_since(s.version() + 1);
  }
};

}  // namespace

bool Balanced(const v1::ControllerState& s) {
  const uint32_t wanted = ServersWanted(s);
  for (const auto& r : s.shards()) {
    if (r.has_move_from() || r.copying_size() > 0) return false;
    for (uint32_t id : r.replicas())
      if (id >= wanted) return false;
  }
  return true;
}

namespace {

// 1. Moves whose new copy is in sync drop the old one; a primary hands off to the in-sync copy on
//    a server that stays with the fewest primaries.
void FinishMoves(Rebalance* p) {
  const v1::ControllerState& s = p->s;
  for (const auto& r : s.shards()) {
    if (!r.has_move_from() || r.copying_size() > 0) continue;
    v1::ShardRecord& next = p->Edit(r.shard());
    const uint32_t from = r.move_from();
    next.clear_move_from();
    auto* reps = next.mutable_replicas();
    auto it = std::find(reps->begin(), reps->end(), from);
    if (it == reps->end() || reps->size() <= int(s.copies())) {
      if (it != reps->end()) ++p->load[from];  // kept after all
      continue;
    }
    if (it == reps->begin()) {
      // The copy on a server that stays (not one leaving too) with the fewest primaries.
      auto rank = [&](uint32_t id) { return std::make_pair(Leaving(s, id), p->primaries[id]); };
      uint32_t best = reps->Get(1);
      for (int i = 2; i < reps->size(); ++i)
        if (rank(reps->Get(i)) < rank(best)) best = reps->Get(i);
      p->Handoff(&next, best);
      it = std::find(reps->begin(), reps->end(), from);
    }
    reps->erase(it);                          // (its load was taken off when the move started)
    next.set_primary_since(s.version() + 1);  // in-sync copies cut: the term starts again
  }
}

// 2. New moves while fewer than max_moves fill: copies on leaving servers first, then from the
//    member holding the most copies to the one holding the fewest while they differ by more than
//    one, secondary copies before primaries, each choice spread by a hash of (shard, target).
void StartMoves(Rebalance* p, const std::vector<uint32_t>& members, int max_moves, int* in_flight) {
  const v1::ControllerState& s = p->s;
  auto least_loaded = [&](const v1::ShardRecord& r, uint32_t from) {
    int best = -1;
    for (uint32_t id : members)
      if (p->MayTake(r, id, from) && (best < 0 || p->load[id] < p->load[size_t(best)]))
        best = int(id);
    return best;
  };
  for (const auto& r0 : s.shards()) {
    if (*in_flight >= max_moves) break;
    const v1::ShardRecord& r = p->Get(r0.shard());
    if (Rebalance::Moving(r) || r.replicas_size() > int(s.copies())) continue;
    for (uint32_t id : r.replicas()) {
      if (!Leaving(s, id)) continue;
      if (int to = least_loaded(r, id); to >= 0) {
        p->Move(r.shard(), id, uint32_t(to));
        ++*in_flight;
      }
      break;
    }
  }
  while (*in_flight < max_moves) {
    uint32_t hi = members[0], lo = members[0];
    for (uint32_t id : members) {
      if (p->load[id] > p->load[hi]) hi = id;
      if (p->load[id] < p->load[lo]) lo = id;
    }
    if (p->load[hi] - p->load[lo] <= 1) break;
    int pick = -1;
    uint64_t pick_key = 0;
    for (const auto& r0 : s.shards()) {
      const v1::ShardRecord& r = p->Get(r0.shard());
      if (Rebalance::Moving(r) || r.replicas_size() > int(s.copies())) continue;
      if (std::find(r.replicas().begin(), r.replicas().end(), hi) == r.replicas().end()) continue;
      if (!p->MayTake(r, lo, hi)) continue;
      // A secondary copy first: moving a primary's copy would hand the primary off as well.
      const uint64_t key = (shard::Mix64((uint64_t{r.shard()} << 32) | lo) >> 1) |
                           (uint64_t{r.replicas(0) == hi} << 63);
      if (pick < 0 || key < pick_key) {
        pick = int(r.shard());
        pick_key = key;
      }
    }
    if (pick < 0) break;
    p->Move(uint32_t(pick), hi, lo);
    ++*in_flight;
  }
}

// 3. Primaries spread over the members: a shard whose primary is on the member with the most
//    hands off to its in-sync copy on the member with the fewest, while they differ by more than
//    one. (A primary on a leaving server goes when its copy moves: FinishMoves.)
void SpreadPrimaries(Rebalance* p, const std::vector<uint32_t>& members) {
  const v1::ControllerState& s = p->s;
  for (size_t guard = 0; guard < size_t(s.shards_size()); ++guard) {
    uint32_t hi = members[0], lo = members[0];
    for (uint32_t id : members) {
      if (p->primaries[id] > p->primaries[hi]) hi = id;
      if (p->primaries[id] < p->primaries[lo]) lo = id;
    }
    if (p->primaries[hi] - p->primaries[lo] <= 1) return;
    bool moved = false;
    for (const auto& r0 : s.shards()) {
      const v1::ShardRecord& r = p->Get(r0.shard());
      if (r.replicas().empty() || r.replicas(0) != hi || r.has_move_from()) continue;
      if (std::find(r.replicas().begin(), r.replicas().end(), lo) == r.replicas().end()) continue;
      p->Handoff(&p->Edit(r.shard()), lo);
      moved = true;
      break;
    }
    if (!moved) return;
  }
}

}  // namespace

std::optional<v1::Reassign> PlanRebalance(const v1::ControllerState& s,
                                          const std::set<uint32_t>& on_probation, int max_moves) {
  if (!s.rebalancing()) return std::nullopt;
  const uint32_t wanted = ServersWanted(s);
  std::vector<uint32_t> members;  // servers that take copies
  for (const auto& sv : s.servers())
    if (sv.alive() && sv.id() < wanted && !on_probation.count(sv.id())) members.push_back(sv.id());
  if (members.empty()) return std::nullopt;
  int in_flight = 0;
  for (const auto& r : s.shards()) {
    for (const auto* list : {&r.replicas(), &r.copying()})
      for (uint32_t id : *list)
        if (!Server(s, id) || !Server(s, id)->alive()) return std::nullopt;  // failover first
    in_flight += r.copying_size() > 0;
  }
  Rebalance p(s);
  FinishMoves(&p);
  StartMoves(&p, members, max_moves, &in_flight);
  SpreadPrimaries(&p, members);
  v1::Reassign out;
  out.set_expected_version(s.version());
  if (p.changed.empty()) {
    // Nothing left to start or drop: once nothing moves, no leaving server holds a copy and
    // every wanted server is in the map, the resize is over.
    bool done = Balanced(s);
    for (const auto& sv : s.servers()) done = done && (sv.id() >= wanted || sv.alive());
    if (!done) return std::nullopt;
    out.set_rebalanced(true);
    out.set_reason("rebalanced over " + std::to_string(members.size()) + " servers");
    return out;
  }
  for (auto& [id, r] : p.changed) *out.add_shards() = std::move(r);
  out.set_reason("rebalancing over " + std::to_string(members.size()) + " servers");
  return out;
}

v1::ShardMap ToShardMap(const v1::ControllerState& s, const std::string& leader_address) {
  v1::ShardMap m;
  m.set_version(s.version());
  *m.mutable_servers() = s.servers();
  *m.mutable_shards() = s.shards();
  m.set_leader_address(leader_address);
  m.set_servers_wanted(ServersWanted(s));
  return m;
}

}  // namespace adam::controller
