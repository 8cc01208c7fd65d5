#include "failover/sim.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace adam::failover_sim {

struct Sim::Server {
  uint32_t id = 0;
  bool up = false;
  int64_t paused_until = 0;
  uint64_t life = 0;         // +1 on every start: messages to an earlier process are lost
  uint64_t incarnation = 0;  // as the controller sees it
  FakeClock clock;
  double rate = 1;
  std::unique_ptr<ps::Routing> routing;
  std::unique_ptr<ps::ParamStore> store;
  ps::SentVersions sent;
  // The heartbeat in flight (ControllerLink beats one at a time).
  uint64_t beat = 0;
  bool beating = false;
  int64_t beat_deadline = 0, next_beat = 0;
  Clock::TimePoint beat_sent{};
  int64_t accepted_at = -1000;  // tick of the last heartbeat the leader accepted
  // The forward round in flight: call id -> (shard, copy address, version).
  struct Call {
    uint32_t shard = 0;
    std::string address;
    uint64_t version = 0;
  };
  uint64_t round = 0;
  std::map<std::string, Call> calls;  // by copy address + shard
  int64_t round_deadline = 0;
  // Promotions being caught up, by shard.
  struct CatchUp {
    ps::Routing::CatchUp c;
    uint64_t call = 0;
    std::map<std::string, std::optional<ps::CopyState>> answers;  // by address
    int64_t deadline = 0;
  };
  std::map<uint32_t, CatchUp> catching;
  uint64_t next_call = 0;
  // Pushes applied, waiting for a quorum (Forwarder::WhenDurable).
  struct Waiter {
    int trainer = 0;
    uint64_t trainer_life = 0, attempt = 0, seq = 0;
    uint32_t shard = 0;
    uint64_t version = 0;
  };
  std::vector<Waiter> waiters;
};

struct Sim::Trainer {
  int index = 0;
  uint64_t session = 0;
  uint64_t seq = 0;                // pushes started
  std::vector<uint32_t> shard_of;  // the shard of push seq (index seq - 1)
  uint64_t acked_seq = 0;          // every push up to it was acknowledged
  bool pushing = false;            // push `seq` not yet acknowledged
  uint64_t attempt = 0;
  int64_t push_deadline = 0;
  bool sent = false;  // the current attempt is on the wire
  std::optional<v1::ShardMap> map;
  bool fetching = false;
  int64_t fetch_deadline = 0;
  uint64_t fetch = 0;
  bool pulling = false;
  int64_t pull_deadline = 0;
};

struct Sim::Controller {
  FakeClock clock;
  double rate = 1;
  controller::ShardState machine;
  std::unique_ptr<controller::Supervisor> leader;
  int64_t lead_at = 0;  // when `leader` starts to lead
  bool leading = false;
  std::unique_ptr<controller::Supervisor> deposed;  // still answering heartbeats until then
  v1::ControllerState deposed_state;
  int64_t deposed_until = 0;
};

namespace {

std::string Address(uint32_t server) { return "r" + std::to_string(server); }
int ServerOf(const std::string& address) { return std::stoi(address.substr(1)); }

// A push of one trainer to one shard: 1.0 added to the trainer's float, identified by (session,
// seq), as ParamService queues it. Returns the shard's version once the push is in it.
uint64_t ApplyPush(ps::ParamStore& store, uint32_t shard, uint32_t trainer, uint64_t session,
                   uint64_t seq) {
  const int64_t n = store.ShardSize(shard);
  std::vector<float> delta(size_t(n), 0.f);
  delta[trainer] = 1.f;
  uint64_t applied = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  ps::Completion completion(1, [&] {
    std::lock_guard<std::mutex> l(mu);
    done = true;
    cv.notify_all();
  });
  ps::Op op;
  op.kind = ps::Op::Kind::kAdd;
  op.shard = shard;
  op.offset = 0;
  op.count = n;
  op.values = delta.data();
  op.trainer = trainer;
  op.session = session;
  op.seq = seq;
  op.part = 0;
  op.applied_version = &applied;
  op.done = &completion;
  store.Submit(&op, 1);
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done; });
  return applied;
}

}  // namespace

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

namespace {
std::string MapText(const v1::ShardMap& m) {
  std::string out = "v" + std::to_string(m.version()) + " [";
  for (const auto& r : m.shards()) {
    out += " " + std::to_string(r.shard()) + ":";
    for (uint32_t x : r.replicas()) out += std::to_string(x);
    if (r.copying_size()) out += "+";
    for (uint32_t x : r.copying()) out += std::to_string(x);
  }
  out += " ] alive ";
  for (const auto& sv : m.servers()) out += sv.alive() ? "1" : "0";
  return out;
}
}  // namespace

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

void Sim::Deliver() {
  while (!queue_.empty() && queue_.top().at <= now_ && ok()) {
    Message m = queue_.top();
    queue_.pop();
    if (cut_.count({m.from, m.to})) {
      ++counts_.dropped;
      continue;
    }
    if (m.to < options_.servers) {
      Server& s = *servers_[size_t(m.to)];
      if (!s.up || s.life != m.to_life) continue;  // the process it was sent to is gone
      if (s.paused_until > now_) {                 // frozen: it reads the message when it goes on
        m.at = s.paused_until;
        m.order = order_++;
        queue_.push(std::move(m));
        continue;
      }
    }
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

// ---- parameter servers ----

void Sim::ServerTick(Server& s) {
  ServerBeat(s);
  ServerCatchUp(s);
  ServerRound(s);
  ServerSettle(s);
}

void Sim::ServerBeat(Server& s) {
  if (s.beating && now_ >= s.beat_deadline) s.beating = false;  // answer lost or late
  if (s.beating || now_ < s.next_beat) return;
  s.beating = true;
  s.beat_deadline = now_ + kBeatDeadline;
  s.next_beat = now_ + kBeatTicks;
  s.beat_sent = s.clock.Now();
  const uint64_t beat = ++s.beat;
  const int i = int(s.id);
  const ps::ServerAddresses addr{"p" + std::to_string(i), Address(s.id), "h" + std::to_string(i)};
  v1::HeartbeatRequest req = ps::MakeHeartbeat(s.id, addr, s.incarnation, *s.routing, *s.store);
  const uint64_t life = s.life;
  // While a deposed leader still believes it leads, a server may still be talking to it.
  const bool to_deposed = controller_->deposed && Chance(0.5);
  Send(i, to_deposed ? DeposedNode() : ControllerNode(), 0,
       [this, i, life, beat, to_deposed, req = std::move(req)] {
         OnHeartbeat(i, life, beat, to_deposed, req);
       });
}

void Sim::ServerCatchUp(Server& s) {
  const std::vector<ps::Routing::CatchUp> want = s.routing->CatchUps();
  // Forget catch-ups of promotions that are over (deposed again, or a newer promotion) or late.
  for (auto it = s.catching.begin(); it != s.catching.end();) {
    const bool wanted = std::any_of(want.begin(), want.end(), [&](const ps::Routing::CatchUp& c) {
      return c.shard == it->first && c.term == it->second.c.term;
    });
    it = !wanted || now_ >= it->second.deadline ? s.catching.erase(it) : std::next(it);
  }
  for (const ps::Routing::CatchUp& c : want) {
    if (s.catching.count(c.shard)) continue;
    Server::CatchUp& cu = s.catching[c.shard];
    cu.c = c;
    cu.call = ++s.next_call;
    cu.deadline = now_ + kCatchUpDeadline;
    if (c.from.empty()) {
      // No other copy alive: what this server holds is the shard.
      auto taken = ps::FinishCatchUp(s.store.get(), s.routing.get(), c, {});
      Trace("ps-" + std::to_string(s.id) + " caught up shard " + std::to_string(c.shard) +
            " alone, version " + std::to_string(s.store->Version(c.shard)));
      if (!taken.ok()) Fail("catch-up: " + taken.status().message());
      ++counts_.catch_ups;
      s.catching.erase(c.shard);
      continue;
    }
    for (const std::string& a : c.from) {
      cu.answers[a] = std::nullopt;
      const int to = ServerOf(a);
      const int i = int(s.id);
      const uint64_t life = s.life, call = cu.call;
      const uint32_t shard = c.shard;
      Send(i, to, Life(to),
           [this, to, i, life, call, shard] { OnReadShard(to, i, life, call, shard); });
    }
  }
}

void Sim::OnReadShard(int i, int from, uint64_t from_life, uint64_t call, uint32_t shard) {
  Server& s = *servers_[size_t(i)];
  std::optional<ps::CopyState> st = ReadChecked(s, shard, "read by a promoted primary");
  if (!st) return;
  auto shared = std::make_shared<const ps::CopyState>(std::move(*st));
  const std::string address = Address(s.id);
  Send(i, from, from_life, [this, from, call, shard, address, shared] {
    Server& p = *servers_[size_t(from)];
    auto it = p.catching.find(shard);
    if (it == p.catching.end() || it->second.call != call) return;
    Server::CatchUp& cu = it->second;
    cu.answers[address] = *shared;
    std::vector<ps::CopyState> states;
    for (const auto& [a, answer] : cu.answers) {
      if (!answer) return;  // more to come
      states.push_back(*answer);
    }
    auto taken = ps::FinishCatchUp(p.store.get(), p.routing.get(), cu.c, states);
    Trace("ps-" + std::to_string(from) + " caught up shard " + std::to_string(shard) + " term " +
          std::to_string(cu.c.term) + " from " + std::to_string(states.size()) +
          " copies -> version " + std::to_string(p.store->Version(shard)));
    if (!taken.ok())
      Fail("catch-up of shard " + std::to_string(shard) + ": " + taken.status().message());
    ++counts_.catch_ups;
    p.catching.erase(it);
  });
}

void Sim::ServerRound(Server& s) {
  if (!s.calls.empty()) {
    if (now_ < s.round_deadline) return;
    // A copy that missed the deadline: it holds an unknown state.
    for (const auto& [key, c] : s.calls)
      ps::RecordForward(&s.sent, c.shard, c.address, c.version, false);
    s.calls.clear();
  }
  ps::ForgetCopies(&s.sent, s.routing->TakeRestarted());
  const uint64_t round = ++s.round;
  s.round_deadline = now_ + kForwardDeadline;
  for (const ps::Routing::Target& t : s.routing->Targets()) {
    if (t.catching_up) continue;
    const std::vector<std::string> due = ps::DueCopies(t, s.store->Version(t.shard), s.sent);
    if (due.empty()) continue;
    std::optional<ps::CopyState> st = ReadChecked(s, t.shard, "forwarding");
    if (!st) return;
    auto shared = std::make_shared<const ps::CopyState>(std::move(*st));
    for (const std::string& a : due) {
      s.calls[a + "/" + std::to_string(t.shard)] = {t.shard, a, shared->meta.version};
      const int to = ServerOf(a);
      const int i = int(s.id);
      const uint64_t life = s.life;
      const uint32_t shard = t.shard;
      Send(i, to, Life(to), [this, to, i, life, round, shard, shared] {
        OnForward(to, i, life, round, shard, shared);
      });
    }
  }
}

void Sim::OnForward(int i, int from, uint64_t from_life, uint64_t round, uint32_t shard,
                    std::shared_ptr<const ps::CopyState> state) {
  Server& s = *servers_[size_t(i)];
  ++counts_.forwards;
  const Status st =
      ps::AcceptForward(s.id, s.store.get(), s.routing.get(), shard, state->values.data(),
                        int64_t(state->values.size()), state->meta, state->epochs, uint32_t(from));
  if (st.ok()) (void)ReadChecked(s, shard, "forwarded to");
  Trace("ps-" + std::to_string(i) + " forward of shard " + std::to_string(shard) + " from ps-" +
        std::to_string(from) + " version " + std::to_string(state->meta.version) + " term " +
        std::to_string(state->meta.term) + ": " + (st.ok() ? "ok" : st.message()));
  const bool accepted = st.ok();
  const std::string address = Address(s.id);
  Send(i, from, from_life, [this, from, round, shard, address, accepted] {
    Server& p = *servers_[size_t(from)];
    if (p.round != round) return;
    auto it = p.calls.find(address + "/" + std::to_string(shard));
    if (it == p.calls.end()) return;
    ps::RecordForward(&p.sent, shard, address, it->second.version, accepted);
    p.calls.erase(it);
    ServerSettle(p);
  });
}

void Sim::ServerSettle(Server& s) {
  if (s.waiters.empty()) return;
  std::map<uint32_t, ps::Routing::Target> targets;
  for (auto& t : s.routing->Targets()) targets[t.shard] = std::move(t);
  std::vector<Server::Waiter> keep;
  for (const Server::Waiter& w : s.waiters) {
    std::string why;
    const ps::Durability d =
        ps::CheckDurable(*s.routing, targets, s.sent, {{w.shard, w.version}}, &why);
    if (d == ps::Durability::kWaiting) {
      keep.push_back(w);
      continue;
    }
    const bool ok = d == ps::Durability::kDurable;
    Trainer& t = *trainers_[size_t(w.trainer)];
    Trace("ps-" + std::to_string(s.id) + (ok ? " acknowledges" : " refuses") + " push " +
          std::to_string(w.trainer) + "/" + std::to_string(w.seq) + " (shard " +
          std::to_string(w.shard) + " version " + std::to_string(w.version) + ") " + why);
    if (ok) {
      // Acknowledged: from here on, every state served must hold it.
      t.acked_seq = std::max(t.acked_seq, w.seq);
      ++counts_.pushes_acked;
    } else {
      ++counts_.pushes_refused;
    }
    const uint64_t attempt = w.attempt;
    Send(int(s.id), TrainerNode(w.trainer), 0, [this, &t, attempt, ok] {
      if (!t.pushing || t.attempt != attempt) return;
      if (ok) {
        t.pushing = false;
      } else {
        t.sent = false;  // re-routed once a newer map is fetched
        TrainerFetchMap(t);
      }
    });
  }
  s.waiters = std::move(keep);
}

void Sim::OnPush(int i, int trainer, uint64_t trainer_life, uint64_t attempt, uint64_t seq,
                 uint32_t shard) {
  Server& s = *servers_[size_t(i)];
  Trainer& t = *trainers_[size_t(trainer)];
  std::vector<uint32_t> promoted;
  const std::string why = s.routing->Admit({shard}, &promoted);
  if (!why.empty()) {
    ++counts_.pushes_refused;
    Send(i, TrainerNode(trainer), trainer_life, [this, &t, attempt] {
      if (!t.pushing || t.attempt != attempt) return;
      t.sent = false;
      TrainerFetchMap(t);
    });
    return;
  }
  std::optional<ps::CopyState> before = ReadChecked(s, shard, "accepting a push");
  if (!before) return;
  CheckHoldsAcked(s, shard, *before, "accepted a push for");
  const uint64_t version = ApplyPush(*s.store, shard, uint32_t(trainer), t.session, seq);
  Trace("ps-" + std::to_string(i) + " applies push " + std::to_string(trainer) + "/" +
        std::to_string(seq) + " to shard " + std::to_string(shard) + " -> version " +
        std::to_string(version) + " term " + std::to_string(s.store->Term(shard)));
  s.waiters.push_back({trainer, trainer_life, attempt, seq, shard, version});
}

void Sim::OnPull(int i, int trainer, uint64_t trainer_life, uint32_t shard) {
  Server& s = *servers_[size_t(i)];
  if (s.routing->Admit({shard}, nullptr).empty()) {
    std::optional<ps::CopyState> st = ReadChecked(s, shard, "pulled");
    if (!st) return;
    CheckHoldsAcked(s, shard, *st, "served a pull of");
    ++counts_.pulls_served;
  }
  Trainer& t = *trainers_[size_t(trainer)];
  Send(i, TrainerNode(trainer), trainer_life, [&t] { t.pulling = false; });
}

// ---- the controller ----

void Sim::Commit(const v1::Command& c) {
  const v1::ControllerState before = controller_->machine.state();
  const Status s = controller_->machine.Apply(c);
  if (s.ok())
    Trace("commit " +
          std::string(c.has_reassign()    ? "reassign"
                      : c.has_register_() ? "register"
                      : c.has_resize()    ? "resize"
                                          : "copy_done") +
          " -> " + MapText(controller::ToShardMap(controller_->machine.state(), "")));
  if (s.ok() && c.has_reassign()) {
    if (c.reassign().dead_size() > 0) {
      ++counts_.failovers;
      // Between a promotion and the new primary's first forward to the other copies.
      second_targets_.clear();
      for (const v1::ShardRecord& r : controller_->machine.state().shards()) {
        if (!options_.second_pause) break;
        const v1::ShardRecord& old = before.shards(int(r.shard()));
        if (!r.replicas().empty() && !old.replicas().empty() && r.replicas(0) != old.replicas(0))
          second_targets_.push_back(int(r.replicas(0)));
      }
      if (options_.second_pause && !converging_ && !second_targets_.empty() && Chance(0.7))
        second_pause_at_ = now_ + Uniform(0, 6);
    } else {
      ++counts_.repairs;
      for (const v1::ShardRecord& r : controller_->machine.state().shards()) {
        const v1::ShardRecord& old = before.shards(int(r.shard()));
        if (!r.replicas().empty() && !old.replicas().empty() && r.replicas(0) != old.replicas(0))
          ++counts_.handoffs;
      }
    }
  }
}

void Sim::ControllerTick() {
  Controller& c = *controller_;
  if (c.deposed && now_ >= c.deposed_until) c.deposed.reset();
  if (!c.leading && now_ >= c.lead_at) {
    c.leader->Lead(c.clock.Now(), 2 * kElection);
    c.leading = true;
  }
  if (!c.leading || now_ % kJudgeTicks != 0) return;
  controller::Supervisor::Round round = c.leader->Judge(c.machine.state(), c.clock.Now());
  if (round.plan) {
    v1::Command cmd;
    *cmd.mutable_reassign() = std::move(*round.plan);
    Commit(cmd);
  }
}

void Sim::OnHeartbeat(int i, uint64_t server_life, uint64_t beat, bool to_deposed,
                      v1::HeartbeatRequest req) {
  Controller& c = *controller_;
  v1::HeartbeatResponse resp;
  if (to_deposed) {
    if (!c.deposed) return;  // it stepped down: no answer
    // The deposed leader: it renews the lease, answers with the map it has, commits nothing.
    auto b = c.deposed->Heartbeat(c.deposed_state, req, c.clock.Now());
    resp.set_accepted(b.accepted && !b.register_server);
    if (resp.accepted() && c.deposed_state.version() > req.map_version())
      *resp.mutable_map() = controller::ToShardMap(c.deposed_state, "old");
  } else if (c.leading) {
    auto b = c.leader->Heartbeat(c.machine.state(), req, c.clock.Now());
    resp.set_accepted(b.accepted);
    if (b.accepted) {
      if (b.register_server) {
        v1::Command cmd;
        *cmd.mutable_register_() = req.server();
        cmd.mutable_register_()->set_alive(true);
        Commit(cmd);
      }
      for (v1::CopyDone d : b.copies_done) {
        d.set_expected_version(c.machine.state().version());
        v1::Command cmd;
        *cmd.mutable_copy_done() = d;
        Commit(cmd);
      }
      if (c.machine.state().version() > req.map_version())
        *resp.mutable_map() = controller::ToShardMap(c.machine.state(), "leader");
    }
  }
  Send(to_deposed ? DeposedNode() : ControllerNode(), i, server_life,
       [this, i, beat, resp = std::move(resp)] {
         Server& s = *servers_[size_t(i)];
         if (!s.beating || s.beat != beat) return;
         s.beating = false;
         if (resp.accepted()) s.accepted_at = now_;
         if (resp.accepted() && ps::TakeHeartbeatAnswer(s.routing.get(), resp, s.beat_sent))
           Trace("ps-" + std::to_string(i) + " adopts " + MapText(resp.map()));
         // A server the job no longer wants exits once the map moved its copies off it (the
         // process's ControllerLink does the same).
         if (i >= wanted_ && s.routing->Retired()) {
           CrashServer(i);
           --counts_.crashes;
           ++counts_.retired;
           Trace("ps-" + std::to_string(i) + " retires");
         }
       });
}

// ---- trainers ----

void Sim::TrainerFetchMap(Trainer& t) {
  if (t.fetching && now_ < t.fetch_deadline) return;
  t.fetching = true;
  t.fetch_deadline = now_ + kBeatDeadline;
  const uint64_t fetch = ++t.fetch;
  Send(TrainerNode(t.index), ControllerNode(), 0, [this, &t, fetch] {
    // Any member answers with the map it has applied; the newest wins at the trainer.
    v1::ShardMap m = controller::ToShardMap(controller_->machine.state(), "");
    Send(ControllerNode(), TrainerNode(t.index), 0, [this, &t, fetch, m = std::move(m)] {
      if (t.fetch != fetch) return;
      t.fetching = false;
      if (!t.map || m.version() > t.map->version()) t.map = m;
    });
  });
}

void Sim::TrainerSend(Trainer& t) {
  if (!t.map) return TrainerFetchMap(t);
  const uint32_t shard = t.shard_of[t.seq - 1];
  const auto& r = t.map->shards(int(shard));
  if (r.replicas().empty()) return TrainerFetchMap(t);
  const int to = int(r.replicas(0));
  t.attempt++;
  t.sent = true;
  t.push_deadline = now_ + kPushDeadline;
  const int trainer = t.index;
  const uint64_t attempt = t.attempt, seq = t.seq;
  Send(TrainerNode(trainer), to, Life(to),
       [this, to, trainer, attempt, seq, shard] { OnPush(to, trainer, 0, attempt, seq, shard); });
}

void Sim::TrainerTick(Trainer& t) {
  if (t.fetching && now_ >= t.fetch_deadline) t.fetching = false;
  if (!t.map && !t.fetching) TrainerFetchMap(t);
  if (t.pushing) {
    if (t.sent && now_ >= t.push_deadline) {  // no answer: re-route on a fresh map
      t.sent = false;
      TrainerFetchMap(t);
    }
    if (!t.sent && !t.fetching) TrainerSend(t);
  } else if (!converging_ && Chance(0.3)) {
    t.seq++;
    t.shard_of.push_back(uint32_t(Uniform(0, int64_t(map_->shards().size()) - 1)));
    t.pushing = true;
    t.sent = false;
    if (!t.fetching) TrainerSend(t);
  }
  if (t.pulling && now_ >= t.pull_deadline) t.pulling = false;
  if (!t.pulling && t.map && Chance(0.1)) {
    const uint32_t shard = uint32_t(Uniform(0, int64_t(map_->shards().size()) - 1));
    const auto& r = t.map->shards(int(shard));
    if (r.replicas().empty()) return;
    const int to = int(r.replicas(0));
    t.pulling = true;
    t.pull_deadline = now_ + kBeatDeadline;
    const int trainer = t.index;
    Send(TrainerNode(trainer), to, Life(to),
         [this, to, trainer, shard] { OnPull(to, trainer, 0, shard); });
  }
}

}  // namespace adam::failover_sim
