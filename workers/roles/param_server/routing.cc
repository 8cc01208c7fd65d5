#include "param_server/routing.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>

#include "core/role_events.h"
#include "core/thread_name.h"
#include "net/grpc.h"
#include "param_server/replica_service.h"
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

// ---- ControllerLink ----

ControllerLink::ControllerLink(std::shared_ptr<const net::Transport> transport, uint32_t self,
                               std::vector<std::string> members, Routing* routing,
                               const ParamStore* store)
    : transport_(std::move(transport)),
      self_(self),
      routing_(routing),
      store_(store),
      members_(std::move(members)),
      incarnation_(std::random_device{}() | (uint64_t{std::random_device{}()} << 32) | 1),
      beat_(
          std::chrono::milliseconds(50), [this] { Beat(); }, routing->clock()) {}

void ControllerLink::SetAddresses(const ServerAddresses& addresses) {
  MutexLock l(mu_);
  addresses_ = addresses;
}

void ControllerLink::Beat() {
  if (stubs_.empty())
    for (const auto& m : members_)
      stubs_.push_back(v1::Controller::NewStub(net::MakeChannel(*transport_, m)));
  ServerAddresses addr;
  {
    MutexLock l(mu_);
    if (!addresses_) return;
    addr = *addresses_;
  }
  const v1::HeartbeatRequest req = MakeHeartbeat(self_, addr, incarnation_, *routing_, *store_);
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  net::SetDeadline(&ctx, std::chrono::milliseconds(500));
  const auto sent = routing_->clock()->Now();
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
  if (TakeHeartbeatAnswer(routing_, resp, sent))
    events::Emit(events::ShardMap{.version = resp.map().version()});
  if (int(self_) >= wanted_.load() && routing_->Retired()) {
    std::function<void()> retired;
    {
      MutexLock l(mu_);
      retired.swap(on_retired_);
    }
    if (retired) retired();
  }
}

// ---- Forwarder ----

Forwarder::Forwarder(std::shared_ptr<const net::Transport> transport, uint32_t self,
                     Routing* routing, ParamStore* store, std::chrono::milliseconds interval)
    : transport_(std::move(transport)),
      self_(self),
      routing_(routing),
      store_(store),
      interval_(interval),
      in_sync_at_ns_(NowNs()),
      thread_(NamedThread("forward", [this] { Loop(); })) {}

int64_t Forwarder::NowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             routing_->clock()->Now().time_since_epoch())
      .count();
}

void Forwarder::Stop() {
  {
    MutexLock l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

double Forwarder::lag_seconds() const {
  const int64_t now = NowNs();
  const int64_t started = round_started_ns_.load();
  const bool stuck =
      started != 0 &&
      now - started >
          std::chrono::duration_cast<std::chrono::nanoseconds>(kForwardDeadline).count();
  if (in_sync_.load() && !stuck) return 0;
  return double(now - in_sync_at_ns_.load()) * 1e-9;
}

void Forwarder::WhenDurable(std::vector<std::pair<uint32_t, uint64_t>> need,
                            std::function<void(const grpc::Status&)> done) {
  {
    MutexLock l(mu_);
    if (!stop_) {
      waiters_.push_back({std::move(need), std::move(done)});
      kicked_ = true;
      cv_.notify_all();
      return;
    }
  }
  done(grpc::Status(grpc::StatusCode::UNAVAILABLE, "parameter server is shutting down"));
}

size_t Forwarder::waiting() const {
  MutexLock l(mu_);
  return waiters_.size();
}

void Forwarder::Loop() {
  bool busy = false;  // the last round sent something, or a promotion is being caught up
  Clock* const clock = routing_->clock();
  auto last_round = clock->Now() - interval_;
  for (;;) {
    bool waiting = false;
    {
      MutexLock l(mu_);
      // Back to back while pushes wait (a short pause when a round had nothing to send, e.g.
      // waiting for a copy the controller has yet to drop); otherwise a round every interval,
      // looking for promotions to catch up every 20 ms.
      const auto pause = !waiters_.empty()
                             ? (busy ? std::chrono::milliseconds(0) : std::chrono::milliseconds(5))
                             : std::chrono::milliseconds(20);
      clock->AwaitFor(l, cv_, pause,
                      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || kicked_; });
      kicked_ = false;
      if (stop_) break;
      waiting = !waiters_.empty();
    }
    const std::vector<Routing::CatchUp> catch_ups = routing_->CatchUps();
    const bool catching = !catch_ups.empty();
    if (catching) CatchUp(catch_ups);
    const auto now = clock->Now();
    if (!waiting && !catching && now - last_round < interval_) continue;
    last_round = now;
    busy = Round() || catching;
    Settle();
  }
  std::vector<Waiter> left;
  {
    MutexLock l(mu_);
    left.swap(waiters_);
  }
  for (auto& w : left)
    w.done(grpc::Status(grpc::StatusCode::UNAVAILABLE, "parameter server is shutting down"));
}

v1::ReplicaService::Stub* Forwarder::Stub(const std::string& address) {
  auto& stub = stubs_[address];
  if (!stub) stub = v1::ReplicaService::NewStub(net::MakeChannel(*transport_, address));
  return stub.get();
}

namespace {

// A copy's answer to a catching-up shard's ReadShard (`n` values of `shard`, from `from`) added to
// `states`; false, with a warning, when it has no state yet or the wrong size.
bool AddCopyState(uint32_t shard, int64_t n, const std::string& from, const grpc::Status& status,
                  const v1::ForwardRequest& resp, std::vector<CopyState>* states) {
  StatusOr<ShardMeta> meta = status.ok()
                                 ? MetaFromProto(resp)
                                 : StatusOr<ShardMeta>(UnavailableError(status.error_message()));
  if (!meta.ok() || resp.values().size() != size_t(n) * 4) {
    spdlog::warn("shard {}: no state from its copy at {} yet: {}", shard, from,
                 meta.ok() ? std::string("wrong size") : meta.status().message());
    return false;
  }
  CopyState& st = states->emplace_back();
  st.meta = std::move(*meta);
  st.epochs = resp.epochs();
  st.values.resize(static_cast<size_t>(n));
  std::memcpy(st.values.data(), resp.values().data(), resp.values().size());
  return true;
}

}  // namespace

void Forwarder::CatchUp(const std::vector<Routing::CatchUp>& catch_ups) {
  for (const Routing::CatchUp& c : catch_ups) {
    const int64_t n = store_->ShardSize(c.shard);
    if (n < 0) continue;
    // Every other in-sync copy, in parallel; the freshest (term, version) wins.
    struct Call {
      grpc::ClientContext ctx;
      v1::ReadShardRequest req;
      v1::ForwardRequest resp;
      grpc::Status status;
    };
    std::vector<std::unique_ptr<Call>> calls;
    Mutex mu;
    std::condition_variable cv;
    size_t left = c.from.size();
    for (const auto& a : c.from) {
      calls.push_back(std::make_unique<Call>());
      Call* call = calls.back().get();
      net::SetDeadline(&call->ctx, kCatchUpDeadline);
      call->req.set_shard(c.shard);
      Stub(a)->async()->ReadShard(&call->ctx, &call->req, &call->resp, [&, call](grpc::Status s) {
        MutexLock l(mu);
        call->status = std::move(s);
        if (--left == 0) cv.notify_all();
      });
    }
    {
      MutexLock l(mu);
      l.Await(cv, [&] { return left == 0; });
    }
    std::vector<CopyState> states;
    bool all = true;
    for (size_t i = 0; i < calls.size(); ++i)
      all = AddCopyState(c.shard, n, c.from[i], calls[i]->status, calls[i]->resp, &states) && all;
    if (!all) continue;  // asked again next time, or the next map drops that copy
    StatusOr<bool> taken = FinishCatchUp(store_, routing_, c, states);
    if (!taken.ok()) {
      spdlog::warn("shard {}: catching up: {}", c.shard, taken.status().message());
      continue;
    }
    if (*taken)
      spdlog::info("shard {}: took its copy's newer state (version {})", c.shard,
                   store_->Version(c.shard));
    events::Emit(
        events::CaughtUp{.shard = c.shard, .term = c.term, .version = store_->Version(c.shard)});
  }
}

struct Forwarder::Call {
  std::string address;
  uint32_t shard = 0;
  uint64_t version = 0;
  std::shared_ptr<v1::ForwardRequest> req;
  grpc::ClientContext ctx;
  v1::ForwardResponse resp;
  grpc::Status status;
};

bool Forwarder::Round() {
  round_started_ns_ = NowNs();
  ForgetCopies(&sent_, routing_->TakeRestarted());
  std::vector<std::unique_ptr<Call>> calls;
  const bool read_all = PrepareCalls(&calls);
  const bool sent_all = SendCalls(calls);
  const bool behind = !read_all || !sent_all;  // a copy this round could not bring up to date
  if (!behind) in_sync_at_ns_ = NowNs();
  in_sync_ = !behind;
  round_started_ns_ = 0;
  return !calls.empty();
}

bool Forwarder::PrepareCalls(std::vector<std::unique_ptr<Call>>* calls) {
  bool all = true;
  for (const Routing::Target& t : routing_->Targets()) {
    if (t.catching_up) {  // its copies may not hold what this server will serve
      all = false;
      continue;
    }
    const std::vector<std::string> due = DueCopies(t, store_->Version(t.shard), sent_);
    if (due.empty()) continue;
    const int64_t n = store_->ShardSize(t.shard);
    if (n <= 0) continue;
    auto req = std::make_shared<v1::ForwardRequest>();
    req->set_epochs(store_->epochs());  // before the state: see ParamStore::RaiseEpochs
    std::string* bytes = req->mutable_values();
    bytes->resize(size_t(n) * 4);
    StatusOr<ShardMeta> read =
        store_->ReadState(t.shard, reinterpret_cast<float*>(bytes->data()), n);
    if (!read.ok()) {
      all = false;
      continue;
    }
    req->set_shard(t.shard);
    MetaToProto(*read, req.get());
    req->set_from_server(self_);
    req->set_map_version(routing_->version());
    for (const auto& a : due) {
      calls->push_back(std::make_unique<Call>());
      Call& c = *calls->back();
      c.address = a;
      c.shard = t.shard;
      c.version = read->version;
      c.req = req;
    }
  }
  return all;
}

bool Forwarder::SendCalls(const std::vector<std::unique_ptr<Call>>& calls) {
  // Every forward of the round at once; each copy's answer records what it holds, and the pushes
  // it completes a quorum for are answered then, not when the slowest copy answers.
  bool all = true;
  Mutex mu;
  std::condition_variable cv;
  size_t left = calls.size();
  std::vector<Call*> answered;
  for (const auto& cp : calls) {
    Call* c = cp.get();
    net::SetDeadline(&c->ctx, kForwardDeadline);
    Stub(c->address)->async()->Forward(&c->ctx, c->req.get(), &c->resp, [&, c](grpc::Status s) {
      MutexLock l(mu);
      c->status = std::move(s);
      answered.push_back(c);
      --left;
      cv.notify_all();
    });
  }
  for (bool more = !calls.empty(); more;) {
    std::vector<Call*> batch;
    {
      MutexLock l(mu);
      l.Await(cv, [&] { return !answered.empty(); });
      batch.swap(answered);
      more = left > 0;
    }
    for (Call* c : batch) {
      RecordForward(&sent_, c->shard, c->address, c->version, c->status.ok());
      if (c->status.ok()) {
        bytes_.fetch_add(uint64_t(c->req->values().size()));
      } else {
        all = false;
      }
    }
    Settle();
  }
  return all;
}

void Forwarder::Settle() {
  std::vector<Waiter> mine;
  {
    MutexLock l(mu_);
    if (waiters_.empty()) return;
    mine.swap(waiters_);
  }
  std::map<uint32_t, Routing::Target> targets;
  for (auto& t : routing_->Targets()) targets[t.shard] = std::move(t);
  std::vector<Waiter> keep;
  for (auto& w : mine) {
    std::string refused;
    const Durability d = CheckDurable(*routing_, targets, sent_, w.need, &refused);
    if (d == Durability::kRefused) {
      w.done(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "update applied but not acknowledged by a quorum of copies: " + refused));
    } else if (d == Durability::kDurable) {
      w.done(grpc::Status::OK);
    } else {
      keep.push_back(std::move(w));
    }
  }
  MutexLock l(mu_);
  for (auto& w : keep) waiters_.push_back(std::move(w));
}

}  // namespace adam::ps
