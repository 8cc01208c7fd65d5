// The failover simulation's world (sim.h): setup, the simulated network and its faults, the steps,
// and the checks that no acknowledged update is lost. The roles' loops are in sim_roles.cc.
#include "failover/sim_parts.h"
#include "shard/shard_map.h"

namespace adam::failover_sim {

Sim::Sim(uint64_t seed, Options options)
    : seed_(seed), options_(options), rng_(seed * 0x9E3779B97F4A7C15ull + 7) {
  wanted_ = options_.servers - (options_.elastic ? 1 : 0);
  auto map = shard::ShardMap::Make(int64_t(options_.shards) * 16, 64, wanted_, seed);
  map_ = std::make_unique<shard::ShardMap>(std::move(*map));
  zeros_.assign(size_t(map_->num_params()), 0.f);
  controller_ = std::make_unique<Controller>();
  auto drift = [&] {
    return 1 + std::uniform_real_distribution<double>(-options_.faults.drift,
                                                      options_.faults.drift)(rng_);
  };
  controller_->rate = drift();
  v1::Command boot;
  *boot.mutable_bootstrap() = controller::MakeBootstrap(*map_, options_.copies);
  (void)controller_->machine.Apply(boot);
  controller_->leader = std::make_unique<controller::Supervisor>();
  controller_->lead_at = 0;
  for (int i = 0; i < options_.servers; ++i) {
    servers_.push_back(std::make_unique<Server>());
    servers_.back()->id = uint32_t(i);
    servers_.back()->rate = drift();
    if (i < wanted_) StartServer(i);
  }
  for (int t = 0; t < options_.trainers; ++t) {
    trainers_.push_back(std::make_unique<Trainer>());
    trainers_.back()->index = t;
    trainers_.back()->session = rng_() | 1;
  }
}

Sim::~Sim() = default;

void Sim::Fail(const std::string& why) {
  if (failure_.empty())
    failure_ = "tick " + std::to_string(now_) + " (" + std::to_string(now_ * kTick.count()) +
               " ms): " + why;
}

void Sim::Trace(const std::string& what) const {
  if (options_.trace) std::fprintf(stderr, "%6lld %s\n", (long long)now_, what.c_str());
}

uint64_t Sim::Life(int node) const {
  return node < options_.servers ? servers_[size_t(node)]->life : 0;
}

bool Sim::Running(int node) const {
  if (node >= options_.servers) return true;
  const Server& s = *servers_[size_t(node)];
  return s.up && s.paused_until <= now_;
}

void Sim::Send(int from, int to, uint64_t to_life, std::function<void()> deliver) {
  Message m;
  m.at = now_ + Uniform(1, std::max(1, options_.faults.max_delay));
  if (Chance(options_.faults.drop)) {  // a lost packet: TCP sends it again
    m.at += options_.any_partition ? Uniform(40, 80) : Uniform(20, 36);
    ++counts_.retransmits;
  }
  m.order = order_++;
  m.from = from;
  m.to = to;
  m.to_life = to_life;
  m.deliver = std::move(deliver);
  queue_.push(std::move(m));
}

// One message's fate folded into the digest, field by field (shard::Mix64, SplitMix64).
void Sim::Trace(const Message& m, int fate) {
  for (uint64_t v :
       {uint64_t(m.at), m.order, uint64_t(m.from), uint64_t(m.to), m.to_life, uint64_t(fate)})
    digest_ = shard::Mix64(digest_ ^ v);
}

void Sim::Deliver() {
  while (!queue_.empty() && queue_.top().at <= now_ && ok()) {
    Message m = queue_.top();
    queue_.pop();
    if (cut_.count({m.from, m.to})) {
      Trace(m, 1);
      ++counts_.dropped;
      continue;
    }
    if (m.to < options_.servers) {
      Server& s = *servers_[size_t(m.to)];
      if (!s.up || s.life != m.to_life) {  // the process it was sent to is gone
        Trace(m, 2);
        continue;
      }
      if (s.paused_until > now_) {  // frozen: it reads the message when it goes on
        Trace(m, 3);
        m.at = s.paused_until;
        m.order = order_++;
        queue_.push(std::move(m));
        continue;
      }
    }
    Trace(m, 0);
    m.deliver();
  }
}

// ---- faults ----

bool Sim::Healthy() const {
  if (!cut_.empty()) return false;
  const v1::ControllerState& st = controller_->machine.state();
  // Every server up and in touch: a server the controller has yet to notice is out counts.
  for (const auto& s : servers_)
    if (int(s->id) < wanted_ &&
        (!s->up || s->paused_until > now_ || now_ - s->accepted_at > 4 * kBeatTicks ||
         s->routing->version() != st.version()))
      return false;
  for (const auto& r : st.shards())
    if (r.replicas_size() < int(st.copies()) || r.copying_size() > 0) return false;
  // Every server registered as the process it is now (a restart has been failed over and the
  // new process given its copies).
  for (const auto& sv : st.servers())
    if (int(sv.id()) < wanted_ &&
        (!sv.alive() || sv.incarnation() != servers_[sv.id()]->incarnation))
      return false;
  return !st.rebalancing();
}

void Sim::Resize() {
  const int last = options_.servers - 1;
  wanted_ = wanted_ == last ? options_.servers : last;
  v1::Command c;
  c.mutable_resize()->set_servers(uint32_t(wanted_));
  ++counts_.resizes;
  Trace("resize to " + std::to_string(wanted_) + " servers");
  Commit(c);
  // A server that joins starts once the count says so (the launcher and the operator start it
  // after the manifest changed); one that leaves exits by itself once it holds nothing.
  if (wanted_ == options_.servers && !servers_[size_t(last)]->up) StartServer(last);
}

void Sim::StartServer(int i) {
  Server& s = *servers_[size_t(i)];
  s.store.reset();
  s.routing.reset();
  ++s.life;
  s.up = true;
  s.paused_until = 0;
  s.incarnation = rng_() | 1;
  s.routing = std::make_unique<ps::Routing>(uint32_t(i), ps::kPrimaryLease, &s.clock);
  auto here = map_->WithServers(std::vector<int>(map_->shards().size(), i), options_.servers);
  ps::StoreOptions so;
  so.threads = 1;
  s.store = std::make_unique<ps::ParamStore>(*here, i, zeros_.data(), so);
  s.sent.clear();
  s.beating = false;
  s.next_beat = now_ + Uniform(0, kBeatTicks);
  s.calls.clear();
  s.catching.clear();
  s.waiters.clear();
  Trace("ps-" + std::to_string(i) + " starts");
}

void Sim::CrashServer(int i) {
  Server& s = *servers_[size_t(i)];
  s.up = false;
  s.store.reset();
  s.routing.reset();
  s.calls.clear();
  s.catching.clear();
  s.waiters.clear();
  ++counts_.crashes;
  Trace("ps-" + std::to_string(i) + " crashes");
}

void Sim::InjectFaults() {
  const Faults& f = options_.faults;
  if (!cut_.empty() && now_ >= heal_at_) cut_.clear();
  const int nodes = Nodes();
  // A server fault (crash, pause, a partition that cuts a server off) starts only when the job
  // is healthy, so at most one server is out at a time; see the file comment. With
  // any_partition, partitions cut any set of nodes from the rest at any time.
  const bool healthy = Healthy();
  if (healthy) second_paused_ = false;  // a recovery ended: the next may have its second fault
  if (cut_.empty() && Chance(f.partition)) {
    std::vector<int> side;  // cut off from every other node
    if (options_.any_partition) {
      for (int n = 0; n < nodes; ++n)
        if (Chance(0.5)) side.push_back(n);
    } else if (Chance(0.25)) {
      side.push_back(TrainerNode(int(Uniform(0, options_.trainers - 1))));
    } else if (healthy) {
      side.push_back(int(Uniform(0, options_.servers - 1)));
    }
    if (!side.empty() && int(side.size()) < nodes) {
      const bool one_way = Chance(f.one_way);
      const bool out = Chance(0.5);
      // A server may lose only its link to the leader, or to the deposed leader.
      const bool controller_only =
          !options_.any_partition && side[0] < options_.servers && Chance(0.3);
      const int member = Chance(0.5) ? ControllerNode() : DeposedNode();
      for (int a : side)
        for (int b = 0; b < nodes; ++b) {
          if (std::count(side.begin(), side.end(), b)) continue;
          if (controller_only && b != member) continue;
          if (!one_way || out) cut_.insert({a, b});
          if (!one_way || !out) cut_.insert({b, a});
        }
      heal_at_ = now_ + Uniform(20, 300);
      std::string text;
      for (const auto& [a, b] : cut_) text += " " + std::to_string(a) + ">" + std::to_string(b);
      Trace("partition until " + std::to_string(heal_at_) + ":" + text);
      ++counts_.partitions;
      return;
    }
  }
  for (int i = 0; i < wanted_; ++i) {
    Server& s = *servers_[size_t(i)];
    if (!s.up && Chance(0.02)) StartServer(i);  // back after about a second
  }
  if (options_.elastic && healthy && Chance(f.resize)) return Resize();
  if (second_pause_at_ >= 0 && now_ >= second_pause_at_) {
    second_pause_at_ = -1;
    int up = 0;
    for (int i = 0; i < options_.servers; ++i) up += Running(i);
    std::vector<int> running;  // the copies just promoted
    for (int i : second_targets_)
      if (Running(i) && !std::count(running.begin(), running.end(), i)) running.push_back(i);
    // Two failures, not more: the first server still out, or just back, and no other frozen.
    if (!running.empty() && up + 1 >= options_.servers && !second_paused_) {
      second_paused_ = true;
      const int i = running[size_t(Uniform(0, int64_t(running.size()) - 1))];
      servers_[size_t(i)]->paused_until = now_ + Uniform(150, 400);  // past the failure timeout
      Trace("ps-" + std::to_string(i) + " paused (second fault) until " +
            std::to_string(servers_[size_t(i)]->paused_until));
      ++counts_.second_pauses;
      return;
    }
  }
  if (healthy && Chance(f.pause)) {
    const int i = int(Uniform(0, options_.servers - 1));
    Server& s = *servers_[size_t(i)];
    s.paused_until = now_ + Uniform(10, 200);  // 50 ms .. 1 s frozen
    Trace("ps-" + std::to_string(i) + " paused until " + std::to_string(s.paused_until));
    ++counts_.pauses;
    return;
  }
  if (healthy && Chance(f.crash)) {
    CrashServer(int(Uniform(0, options_.servers - 1)));
    return;
  }
  Controller& c = *controller_;
  if (c.leading && !c.deposed && Chance(f.leader_change)) {
    // The leader loses its quorum; a new one is elected after a gap. The old one still answers
    // heartbeats (renewing leases, with its last map, committing nothing) until check-quorum
    // deposes it, at most two election timeouts later.
    c.deposed = std::move(c.leader);
    c.deposed_state = c.machine.state();
    c.deposed_until = now_ + Uniform(0, 2 * kElectionTicks);
    c.leader = std::make_unique<controller::Supervisor>();
    c.leading = false;
    c.lead_at = now_ + Uniform(0, kElectionTicks);
    ++counts_.leader_changes;
    Trace("leader change: new leader at " + std::to_string(c.lead_at) + ", the old answers until " +
          std::to_string(c.deposed_until));
  }
}

// ---- the step ----

void Sim::Step() {
  ++now_;
  if (!converging_) InjectFaults();
  controller_->clock.Advance(
      std::chrono::duration_cast<Clock::Duration>(std::chrono::duration<double, std::nano>(
          double(std::chrono::nanoseconds(kTick).count()) * controller_->rate)));
  for (auto& s : servers_)
    s->clock.Advance(
        std::chrono::duration_cast<Clock::Duration>(std::chrono::duration<double, std::nano>(
            double(std::chrono::nanoseconds(kTick).count()) * s->rate)));
  ControllerTick();
  for (auto& s : servers_)
    if (s->up && s->paused_until <= now_) ServerTick(*s);
  for (auto& t : trainers_) TrainerTick(*t);
  Deliver();
  if (ok()) CheckOneWriter();
}

bool Sim::Converge(int max_ticks) {
  converging_ = true;
  cut_.clear();
  for (int i = 0; i < options_.servers; ++i) {
    Server& s = *servers_[size_t(i)];
    if (!s.up && i < wanted_) StartServer(i);
    s.paused_until = 0;
  }
  for (int t = 0; t < max_ticks && ok(); ++t) {
    Step();
    if (t % 20 == 19 && Converged()) return true;
  }
  return false;
}

// ---- checks ----

std::string Sim::Describe() const {
  std::string out = "map " + MapText(controller::ToShardMap(controller_->machine.state(), ""));
  for (const auto& s : servers_) {
    out += "\n  ps-" + std::to_string(s->id) + (s->up ? "" : " down");
    if (!s->up) continue;
    out += " map v" + std::to_string(s->routing->version());
    for (uint32_t sh = 0; sh < uint32_t(map_->shards().size()); ++sh) {
      const std::string why = s->routing->Refusal(sh);
      out += "\n    shard " + std::to_string(sh) + " version " +
             std::to_string(s->store->Version(sh)) + ": " + (why.empty() ? "serving" : why);
    }
  }
  for (const auto& t : trainers_)
    out += "\n  trainer " + std::to_string(t->index) + ": " +
           (t->pushing ? "push " + std::to_string(t->seq) + " to shard " +
                             std::to_string(t->shard_of[t->seq - 1]) + " unacknowledged"
                       : std::string("idle")) +
           ", map v" + (t->map ? std::to_string(t->map->version()) : std::string("-"));
  return out;
}

uint64_t Sim::Count(int trainer, uint32_t shard, uint64_t up_to_seq) const {
  const Trainer& t = *trainers_[size_t(trainer)];
  uint64_t n = 0;
  for (uint64_t k = 1; k <= up_to_seq && k <= t.shard_of.size(); ++k)
    n += t.shard_of[k - 1] == shard;
  return n;
}

std::optional<ps::CopyState> Sim::ReadChecked(Server& s, uint32_t shard, const char* where) {
  ps::CopyState st;
  const int64_t n = s.store->ShardSize(shard);
  st.values.resize(size_t(n));
  st.epochs = s.store->epochs();
  auto meta = s.store->ReadState(shard, st.values.data(), n);
  if (!meta.ok()) {
    Fail("ps-" + std::to_string(s.id) + " cannot read shard " + std::to_string(shard) + ": " +
         meta.status().message());
    return std::nullopt;
  }
  st.meta = std::move(*meta);
  for (int t = 0; t < options_.trainers && !options_.any_partition; ++t) {
    const ps::PushMark m =
        size_t(t) < st.meta.marks.size() ? st.meta.marks[size_t(t)] : ps::PushMark{};
    const uint64_t want = m.session == 0 ? 0 : Count(t, shard, m.seq);
    if (st.values[size_t(t)] != float(want)) {
      Fail("shard " + std::to_string(shard) + " at ps-" + std::to_string(s.id) + " (" + where +
           "): trainer " + std::to_string(t) +
           "'s pushes applied: " + std::to_string(st.values[size_t(t)]) +
           ", but its last push there is seq " + std::to_string(m.seq) + ", which makes " +
           std::to_string(want) + " (an update applied twice, or one lost before a later one)");
      return std::nullopt;
    }
  }
  return st;
}

void Sim::CheckHoldsAcked(const Server& s, uint32_t shard, const ps::CopyState& st,
                          const char* where) {
  for (int t = 0; t < options_.trainers && !options_.any_partition; ++t) {
    const uint64_t acked = Count(t, shard, trainers_[size_t(t)]->acked_seq);
    if (st.values[size_t(t)] < float(acked))
      Fail("lost acknowledged update: ps-" + std::to_string(s.id) + " " + where + " shard " +
           std::to_string(shard) + " holding " + std::to_string(uint64_t(st.values[size_t(t)])) +
           " of trainer " + std::to_string(t) + "'s pushes, " + std::to_string(acked) +
           " of which were acknowledged");
  }
}

void Sim::CheckOneWriter() {
  for (uint32_t shard = 0; shard < uint32_t(map_->shards().size()); ++shard) {
    std::vector<uint32_t> writers;
    for (auto& s : servers_)
      if (s->up && s->paused_until <= now_ && s->routing->Refusal(shard).empty())
        writers.push_back(s->id);
    if (writers.size() > 1) {
      std::string names;
      for (uint32_t w : writers) names += " ps-" + std::to_string(w);
      Fail("two servers accept updates for shard " + std::to_string(shard) + ":" + names);
    }
  }
}

bool Sim::Converged() {
  for (const auto& t : trainers_)
    if (t->pushing) return false;
  const v1::ControllerState& st = controller_->machine.state();
  if (st.rebalancing()) return false;
  for (const auto& r : st.shards()) {
    if (r.replicas_size() < int(st.copies()) || r.copying_size() > 0) return false;
    Server& p = *servers_[r.replicas(0)];
    if (!p.up || !p.routing->Refusal(r.shard()).empty()) return false;
    auto primary = ReadChecked(p, r.shard(), "converged primary");
    if (!primary) return false;
    for (int t = 0; t < options_.trainers && !options_.any_partition; ++t)
      if (primary->values[size_t(t)] != float(Count(t, r.shard(), trainers_[size_t(t)]->seq)))
        return false;
    for (int i = 1; i < r.replicas_size(); ++i) {
      Server& c = *servers_[r.replicas(i)];
      if (!c.up) return false;
      auto copy = ReadChecked(c, r.shard(), "converged copy");
      if (!copy || copy->values != primary->values || copy->meta.version != primary->meta.version)
        return false;
    }
  }
  return ok();
}

}  // namespace adam::failover_sim
