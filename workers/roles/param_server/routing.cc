#include "param_server/routing.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "core/role_events.h"
#include "param_server/replication.h"

namespace adam::ps {

bool Routing::Update(const v1::ShardMap& map) {
  MutexLock l(mu_);
  if (known_ && map.version() <= map_.version()) return false;
  for (const auto& r : map.shards()) {
    const bool now = !r.replicas().empty() && r.replicas(0) == self_;
    const bool before = known_ && int(r.shard()) < map_.shards_size() &&
                        !map_.shards(int(r.shard())).replicas().empty() &&
                        map_.shards(int(r.shard())).replicas(0) == self_;
    // Every shard this server becomes the primary of, in its first map too (a server restarted
    // before anyone noticed holds only its checkpoint), is read from its other copies first. So
    // is one whose in-sync copies the controller cut (its primary_since rose): its term rises to
    // this map's version, and the copies left count as holding every acknowledged push only once
    // a forward of that term reached them (controller/shard_state.h, HoldsAcknowledged).
    const bool cut = before && r.primary_since() > map_.shards(int(r.shard())).primary_since();
    if (now && (!before || cut)) catching_up_[r.shard()] = map.version();
    if (!now) {
      catching_up_.erase(r.shard());
      handoff_until_.erase(r.shard());
    }
    // Handed over by a primary that still runs (servers joining or leaving): it may serve until
    // its lease runs out, and forward what it acknowledges to the copies meanwhile, so the copies
    // are read only after that. The map says so: this server may have missed the map in which
    // the old one became primary.
    if (now && !before && r.has_handoff_from() && r.handoff_from() != self_)
      handoff_until_[r.shard()] = clock_->Now() + lease_ + kLeaseMargin;
    if (known_ && now && !before) {
      promoted_.insert(r.shard());
      spdlog::warn("primary of shard {} from map version {}", r.shard(), map.version());
    }
  }
  // A copy this server is no longer assigned must be filled afresh if it is assigned again.
  for (auto it = received_.begin(); it != received_.end();) {
    bool holds = false;
    if (int(*it) < map.shards_size()) {
      const auto& r = map.shards(int(*it));
      holds = std::count(r.replicas().begin(), r.replicas().end(), self_) > 0 ||
              std::count(r.copying().begin(), r.copying().end(), self_) > 0;
    }
    it = holds ? std::next(it) : received_.erase(it);
  }
  if (known_)
    for (const auto& sv : map.servers()) {
      if (int(sv.id()) >= map_.servers_size()) continue;
      const auto& was = map_.servers(int(sv.id()));
      if (was.incarnation() != 0 && sv.incarnation() != was.incarnation()) {
        restarted_.push_back(was.replication_address());
        if (sv.replication_address() != was.replication_address())
          restarted_.push_back(sv.replication_address());
      }
    }
  map_ = map;
  known_ = true;
  return true;
}

std::vector<std::string> Routing::TakeRestarted() {
  MutexLock l(mu_);
  std::vector<std::string> out;
  out.swap(restarted_);
  return out;
}

uint64_t Routing::version() const {
  MutexLock l(mu_);
  return map_.version();
}

bool Routing::IsPrimary(uint32_t shard) const {
  MutexLock l(mu_);
  return known_ && int(shard) < map_.shards_size() && !map_.shards(int(shard)).replicas().empty() &&
         map_.shards(int(shard)).replicas(0) == self_;
}

int Routing::primaries() const {
  MutexLock l(mu_);
  int n = 0;
  for (const auto& r : map_.shards()) n += !r.replicas().empty() && r.replicas(0) == self_;
  return n;
}

void Routing::RenewLease(Clock::TimePoint sent) {
  MutexLock l(mu_);
  lease_until_ = std::max(lease_until_, sent + lease_);
}

std::string Routing::RefusalLocked(uint32_t shard) const {
  if (!known_) return "ps-" + std::to_string(self_) + " has no shard map yet";
  if (clock_->Now() > lease_until_)
    return "ps-" + std::to_string(self_) + " has not heard from the controller leader for " +
           std::to_string(lease_.count()) + " ms (map version " + std::to_string(map_.version()) +
           ")";
  if (int(shard) >= map_.shards_size())
    return "shard " + std::to_string(shard) + " is not in the shard map";
  const auto& r = map_.shards(int(shard));
  if (!r.replicas().empty() && r.replicas(0) == self_) {
    if (auto it = catching_up_.find(shard); it != catching_up_.end())
      return "ps-" + std::to_string(self_) + " is reading shard " + std::to_string(shard) +
             " from its other copies before serving it (primary from map version " +
             std::to_string(it->second) + ")";
    return {};
  }
  return "ps-" + std::to_string(self_) + " is not the primary of shard " + std::to_string(shard) +
         " at shard map version " + std::to_string(map_.version()) +
         (r.replicas().empty() ? std::string(" (no primary)")
                               : "; the primary is ps-" + std::to_string(r.replicas(0)));
}

std::string Routing::Refusal(uint32_t shard) const {
  MutexLock l(mu_);
  return RefusalLocked(shard);
}

std::string Routing::Admit(const std::vector<uint32_t>& shards, std::vector<uint32_t>* promoted) {
  MutexLock l(mu_);
  for (uint32_t id : shards)
    if (std::string why = RefusalLocked(id); !why.empty()) return why;
  if (promoted != nullptr && !promoted_.empty())
    for (uint32_t id : shards)
      if (promoted_.erase(id) > 0) promoted->push_back(id);
  return {};
}

std::vector<std::pair<uint32_t, std::vector<std::string>>> Routing::ForwardTargets() const {
  std::vector<std::pair<uint32_t, std::vector<std::string>>> out;
  for (const Target& t : Targets()) {
    if (t.catching_up) continue;
    std::vector<std::string> to;
    for (const auto* list : {&t.in_sync, &t.copying})
      for (const auto& a : *list)
        if (!a.empty()) to.push_back(a);
    if (!to.empty()) out.emplace_back(t.shard, std::move(to));
  }
  return out;
}

std::vector<Routing::Target> Routing::Targets() const {
  MutexLock l(mu_);
  std::vector<Target> out;
  if (!known_) return out;
  auto address = [&](uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return int(id) < map_.servers_size() && map_.servers(int(id)).alive()
               ? map_.servers(int(id)).replication_address()
               : std::string();
  };
  for (const auto& r : map_.shards()) {
    if (r.replicas().empty() || r.replicas(0) != self_) continue;
    Target t;
    t.shard = r.shard();
    t.replicas = r.replicas_size();
    t.catching_up = catching_up_.count(r.shard()) > 0;
    for (int i = 1; i < r.replicas_size(); ++i) t.in_sync.push_back(address(r.replicas(i)));
    for (uint32_t id : r.copying()) t.copying.push_back(address(id));
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<Routing::CatchUp> Routing::CatchUps() const {
  MutexLock l(mu_);
  std::vector<CatchUp> out;
  const auto now = clock_->Now();
  for (const auto& [shard, term] : catching_up_) {
    if (auto it = handoff_until_.find(shard); it != handoff_until_.end() && it->second > now)
      continue;  // the old primary's lease has not run out yet
    CatchUp c{shard, term, {}};
    const auto& r = map_.shards(int(shard));
    for (int i = 1; i < r.replicas_size(); ++i) {
      const uint32_t id = r.replicas(i);
      if (int(id) < map_.servers_size() && map_.servers(int(id)).alive() &&
          !map_.servers(int(id)).replication_address().empty())
        c.from.push_back(map_.servers(int(id)).replication_address());
    }
    out.push_back(std::move(c));
  }
  return out;
}

void Routing::CaughtUp(uint32_t shard, uint64_t term) {
  MutexLock l(mu_);
  if (auto it = catching_up_.find(shard); it != catching_up_.end() && it->second == term) {
    catching_up_.erase(it);
    handoff_until_.erase(shard);
  }
}

bool Routing::Retired() const {
  MutexLock l(mu_);
  if (!known_ || map_.servers_wanted() == 0 || self_ < map_.servers_wanted()) return false;
  for (const auto& r : map_.shards())
    if (std::count(r.replicas().begin(), r.replicas().end(), self_) > 0 ||
        std::count(r.copying().begin(), r.copying().end(), self_) > 0)
      return false;
  return true;
}

std::vector<uint32_t> Routing::Copying() const {
  MutexLock l(mu_);
  std::vector<uint32_t> out;
  for (const auto& r : map_.shards())
    if (std::count(r.copying().begin(), r.copying().end(), self_)) out.push_back(r.shard());
  return out;
}

void Routing::MarkReceived(uint32_t shard) {
  MutexLock l(mu_);
  received_.insert(shard);
}

bool Routing::Received(uint32_t shard) const {
  MutexLock l(mu_);
  return received_.count(shard) > 0;
}

bool Routing::TakePromotion(uint32_t shard) {
  MutexLock l(mu_);
  return promoted_.erase(shard) > 0;
}

}  // namespace adam::ps
