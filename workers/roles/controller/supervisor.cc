#include "controller/supervisor.h"

#include <algorithm>

namespace adam::controller {

void Supervisor::Lead(Clock::TimePoint now, Clock::Duration grace) {
  leader_since_ = now + grace;
  last_seen_.clear();
  versions_.clear();
  terms_.clear();
  restarted_.clear();
  returned_at_.clear();
  probation_until_.clear();
}

Supervisor::Beat Supervisor::Heartbeat(const v1::ControllerState& state,
                                       const v1::HeartbeatRequest& request, Clock::TimePoint now) {
  Beat out;
  const v1::ServerRecord& in = request.server();
  // A server this map does not have yet (it joined after a Resize this state predates).
  if (in.id() >= uint32_t(state.servers_size())) return out;
  const v1::ServerRecord& have = state.servers(int(in.id()));
  if (have.alive() && state.copies() > 1 && have.incarnation() != 0 &&
      in.incarnation() != have.incarnation()) {
    // The process restarted since it registered: what it held in memory is gone, so its copies
    // are failed over (by Judge) before it may register again.
    out.restart_seen = restarted_.insert(in.id()).second;
    return out;
  }
  out.accepted = true;
  last_seen_[in.id()] = now;
  out.register_server = !have.alive() || have.address() != in.address() ||
                        have.replication_address() != in.replication_address() ||
                        have.host() != in.host() || have.incarnation() != in.incarnation();
  if (!have.alive()) {
    restarted_.erase(in.id());  // failed over: this registration is its new start
    // Back from the dead (it registered before). Back again soon after its last return, it
    // flaps: on probation before it gets new copies.
    if (!have.address().empty() || have.incarnation() != 0) {
      auto it = returned_at_.find(in.id());
      if (it != returned_at_.end() && now - it->second < options_.flap_window) {
        probation_until_[in.id()] = now + options_.server_probation;
        out.probation = true;
      }
      returned_at_[in.id()] = now;
    }
  }
  for (const v1::ShardVersion& v : request.shards()) {
    versions_[{v.shard(), in.id()}] = v.version();
    terms_[{v.shard(), in.id()}] = v.term();
    if (!v.in_sync() || v.shard() >= uint32_t(state.shards_size())) continue;
    const auto& cp = state.shards(int(v.shard())).copying();
    if (std::find(cp.begin(), cp.end(), in.id()) == cp.end()) continue;
    v1::CopyDone d;
    d.set_shard(v.shard());
    d.set_server(in.id());
    out.copies_done.push_back(d);
  }
  return out;
}

Supervisor::Round Supervisor::Judge(const v1::ControllerState& state, Clock::TimePoint now) {
  Round out;
  if (now - leader_since_ < options_.server_timeout) return out;
  out.judged = true;
  for (const v1::ServerRecord& sv : state.servers()) {
    if (!sv.alive()) {
      restarted_.erase(sv.id());  // failed over: it may register again
      continue;
    }
    auto it = last_seen_.find(sv.id());
    const auto seen = it == last_seen_.end() ? leader_since_ : std::max(it->second, leader_since_);
    if (now - seen > options_.server_timeout || restarted_.count(sv.id())) out.dead.insert(sv.id());
  }
  std::set<uint32_t> probation;
  for (auto it = probation_until_.begin(); it != probation_until_.end();) {
    if (it->second <= now) {
      it = probation_until_.erase(it);
    } else {
      probation.insert(it->first);
      ++it;
    }
  }
  // Copies kept on dead servers by a whole-job loss are dropped only once this leader has led
  // for four timeouts, so servers restarting together are all back first.
  out.plan = out.dead.empty()
                 ? PlanRepair(state, probation,
                              /*drop_dead=*/now - leader_since_ >= 4 * options_.server_timeout,
                              versions_, terms_)
                 : PlanFailover(state, out.dead, versions_, probation, terms_);
  if (!out.plan && out.dead.empty()) out.plan = PlanRebalance(state, probation, options_.max_moves);
  return out;
}

std::optional<double> Supervisor::SilentFor(uint32_t server, Clock::TimePoint now) const {
  auto it = last_seen_.find(server);
  if (it == last_seen_.end()) return std::nullopt;
  return std::chrono::duration<double>(now - it->second).count();
}

}  // namespace adam::controller
