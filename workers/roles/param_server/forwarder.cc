#include "param_server/forwarder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/role_events.h"
#include "core/thread_name.h"
#include "param_server/replica_service.h"
#include "param_server/replication.h"

namespace adam::ps {

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
