#include "param_server/routing.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "core/event.h"
#include "net/grpc.h"

namespace adam::ps {

bool Routing::Update(const v1::ShardMap& map) {
  std::lock_guard<std::mutex> l(mu_);
  if (known_ && map.version() <= map_.version()) return false;
  if (known_) {
    for (const auto& r : map.shards()) {
      const bool now = !r.replicas().empty() && r.replicas(0) == self_;
      const bool before = int(r.shard()) < map_.shards_size() &&
                          !map_.shards(int(r.shard())).replicas().empty() &&
                          map_.shards(int(r.shard())).replicas(0) == self_;
      if (now && !before) {
        promoted_.insert(r.shard());
        spdlog::warn("primary of shard {} from map version {}", r.shard(), map.version());
      }
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
  map_ = map;
  known_ = true;
  return true;
}

uint64_t Routing::version() const {
  std::lock_guard<std::mutex> l(mu_);
  return map_.version();
}

bool Routing::IsPrimary(uint32_t shard) const {
  std::lock_guard<std::mutex> l(mu_);
  return known_ && int(shard) < map_.shards_size() && !map_.shards(int(shard)).replicas().empty() &&
         map_.shards(int(shard)).replicas(0) == self_;
}

int Routing::primaries() const {
  std::lock_guard<std::mutex> l(mu_);
  int n = 0;
  for (const auto& r : map_.shards()) n += !r.replicas().empty() && r.replicas(0) == self_;
  return n;
}

void Routing::RenewLease(std::chrono::steady_clock::time_point sent) {
  std::lock_guard<std::mutex> l(mu_);
  lease_until_ = std::max(lease_until_, sent + lease_);
}

std::string Routing::RefusalLocked(uint32_t shard) const {
  if (!known_) return "ps-" + std::to_string(self_) + " has no shard map yet";
  if (std::chrono::steady_clock::now() > lease_until_)
    return "ps-" + std::to_string(self_) + " has not heard from the controller leader for " +
           std::to_string(lease_.count()) + " ms (map version " + std::to_string(map_.version()) +
           ")";
  if (int(shard) >= map_.shards_size())
    return "shard " + std::to_string(shard) + " is not in the shard map";
  const auto& r = map_.shards(int(shard));
  if (!r.replicas().empty() && r.replicas(0) == self_) return {};
  return "ps-" + std::to_string(self_) + " is not the primary of shard " + std::to_string(shard) +
         " at shard map version " + std::to_string(map_.version()) +
         (r.replicas().empty() ? std::string(" (no primary)")
                               : "; the primary is ps-" + std::to_string(r.replicas(0)));
}

std::string Routing::Refusal(uint32_t shard) const {
  std::lock_guard<std::mutex> l(mu_);
  return RefusalLocked(shard);
}

std::string Routing::Admit(const std::vector<uint32_t>& shards, std::vector<uint32_t>* promoted) {
  std::lock_guard<std::mutex> l(mu_);
  for (uint32_t id : shards)
    if (std::string why = RefusalLocked(id); !why.empty()) return why;
  if (promoted != nullptr && !promoted_.empty())
    for (uint32_t id : shards)
      if (promoted_.erase(id) > 0) promoted->push_back(id);
  return {};
}

std::vector<std::pair<uint32_t, std::vector<std::string>>> Routing::ForwardTargets() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::pair<uint32_t, std::vector<std::string>>> out;
  if (!known_) return out;
  auto address = [&](uint32_t id) {
    return int(id) < map_.servers_size() && map_.servers(int(id)).alive()
               ? map_.servers(int(id)).replication_address()
               : std::string();
  };
  for (const auto& r : map_.shards()) {
    if (r.replicas().empty() || r.replicas(0) != self_) continue;
    std::vector<std::string> to;
    for (int i = 1; i < r.replicas_size(); ++i)
      if (auto a = address(r.replicas(i)); !a.empty()) to.push_back(a);
    for (uint32_t id : r.copying())
      if (auto a = address(id); !a.empty()) to.push_back(a);
    if (!to.empty()) out.emplace_back(r.shard(), std::move(to));
  }
  return out;
}

std::vector<uint32_t> Routing::Copying() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<uint32_t> out;
  for (const auto& r : map_.shards())
    if (std::count(r.copying().begin(), r.copying().end(), self_)) out.push_back(r.shard());
  return out;
}

void Routing::MarkReceived(uint32_t shard) {
  std::lock_guard<std::mutex> l(mu_);
  received_.insert(shard);
}

bool Routing::Received(uint32_t shard) const {
  std::lock_guard<std::mutex> l(mu_);
  return received_.count(shard) > 0;
}

bool Routing::TakePromotion(uint32_t shard) {
  std::lock_guard<std::mutex> l(mu_);
  return promoted_.erase(shard) > 0;
}

// ---- ControllerLink ----

ControllerLink::ControllerLink(uint32_t self, std::vector<std::string> members, Routing* routing,
                               const ParamStore* store)
    : self_(self),
      routing_(routing),
      store_(store),
      members_(std::move(members)),
      beat_(std::chrono::milliseconds(50), [this] { Beat(); }) {}

void ControllerLink::SetAddresses(const ServerAddresses& addresses) {
  std::lock_guard<std::mutex> l(mu_);
  addresses_ = addresses;
}

void ControllerLink::Beat() {
  if (stubs_.empty())
    for (const auto& m : members_) stubs_.push_back(v1::Controller::NewStub(net::MakeChannel(m)));
  ServerAddresses addr;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!addresses_) return;
    addr = *addresses_;
  }
  v1::HeartbeatRequest req;
  req.mutable_server()->set_id(self_);
  req.mutable_server()->set_address(addr.address);
  req.mutable_server()->set_replication_address(addr.replication_address);
  req.mutable_server()->set_host(addr.host);
  req.set_map_version(routing_->version());
  const std::vector<uint32_t> copying = routing_->Copying();
  for (uint32_t id : store_->shard_ids()) {
    auto* v = req.add_shards();
    v->set_shard(id);
    v->set_version(store_->Version(id));
    v->set_in_sync(std::count(copying.begin(), copying.end(), id) > 0 && routing_->Received(id));
  }
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  net::SetDeadline(&ctx, std::chrono::milliseconds(500));
  const auto sent = std::chrono::steady_clock::now();
  const grpc::Status s = stubs_[target_]->Heartbeat(&ctx, req, &resp);
  if (!s.ok() || !resp.accepted()) {
    // Follow the leader's address when given, otherwise try the next member.
    size_t next = (target_ + 1) % stubs_.size();
    for (size_t i = 0; i < members_.size(); ++i)
      if (!resp.leader_address().empty() && members_[i] == resp.leader_address()) next = i;
    target_ = next;
    return;
  }
  heartbeats_.fetch_add(1);
  if (resp.has_map() && routing_->Update(resp.map()))
    EmitEvent({{"event", "shard_map"}, {"version", resp.map().version()}});
  routing_->RenewLease(sent);
}

// ---- Forwarder ----

Forwarder::Forwarder(uint32_t self, Routing* routing, ParamStore* store,
                     std::chrono::milliseconds interval)
    : self_(self), routing_(routing), store_(store), rounds_(interval, [this] { Round(); }) {}

namespace {
int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

double Forwarder::lag_seconds() const {
  const int64_t now = SteadyNs();
  const int64_t started = round_started_ns_.load();
  const bool stuck = started != 0 && now - started >
      std::chrono::duration_cast<std::chrono::nanoseconds>(kForwardDeadline).count();
  if (in_sync_.load() && !stuck) return 0;
  return double(now - in_sync_at_ns_.load()) * 1e-9;
}

void Forwarder::Round() {
  round_started_ns_ = SteadyNs();
  std::vector<float> values;
  bool behind = false;  // a copy this round could not bring to the version it read
  std::set<std::string> failed;  // copies that missed a forward's deadline in this round
  for (const auto& [shard, targets] : routing_->ForwardTargets()) {
    const uint64_t version = store_->Version(shard);
    std::vector<std::string> due;
    for (const auto& a : targets) {
      auto it = sent_.find({shard, a});
      if (it != sent_.end() && it->second == version) continue;
      if (failed.count(a)) {
        behind = true;
        continue;
      }
      due.push_back(a);
    }
    if (due.empty()) continue;
    const int64_t n = store_->ShardSize(shard);
    values.resize(size_t(std::max<int64_t>(n, 0)));
    StatusOr<uint64_t> read = n > 0 ? store_->Read(shard, values.data(), n)
                                    : StatusOr<uint64_t>(NotFoundError("no such shard"));
    if (!read.ok()) {
      behind = true;
      continue;
    }
    v1::ForwardRequest req;
    req.set_shard(shard);
    req.set_version(*read);
    req.set_values(reinterpret_cast<const char*>(values.data()), size_t(n) * 4);
    req.set_from_server(self_);
    req.set_map_version(routing_->version());
    for (const auto& a : due) {
      auto& stub = stubs_[a];
      if (!stub) stub = v1::ReplicaService::NewStub(net::MakeChannel(a));
      v1::ForwardResponse resp;
      grpc::ClientContext ctx;
      net::SetDeadline(&ctx, kForwardDeadline);
      if (stub->Forward(&ctx, req, &resp).ok()) {
        sent_[{shard, a}] = *read;
        bytes_.fetch_add(uint64_t(n) * 4);
      } else {
        behind = true;
        failed.insert(a);
      }
    }
  }
  if (!behind) in_sync_at_ns_ = SteadyNs();
  in_sync_ = !behind;
  round_started_ns_ = 0;
}

}  // namespace adam::ps
