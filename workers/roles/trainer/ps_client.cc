// ParamServerClient over gRPC with the callback stub API, fanning out to all servers at once.
#include "trainer/ps_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "adam/v1/controller.grpc.pb.h"
#include "adam/v1/ps.grpc.pb.h"
#include "core/mutex.h"
#include "core/thread_name.h"
#include "net/grpc.h"
#include "trainer/ps_wire.h"
#include "trainer/server_wait.h"
#include "update/codec.h"

namespace adam::trainer {
namespace {

class GrpcClient final : public ParamServerClient {
 public:
  GrpcClient(const shard::ShardMap& map, const update::UpdatePlan& plan,
             std::vector<std::string> addresses, GrpcParamServerClientOptions options)
      : map_(map),
        plan_(plan),
        addresses_(std::move(addresses)),
        options_(std::move(options)),
        slice_(options_.slice) {}

  Status Connect() {
    for (size_t i = 0; i < addresses_.size(); ++i) {
      auto ch = net::MakeChannel(*options_.transport, addresses_[i]);
      ADAM_RETURN_IF_ERROR(net::WaitForReady(ch.get(), "parameter server ps-" + std::to_string(i),
                                             addresses_[i], options_.connect_timeout));
      stubs_.push_back(adam::v1::ParameterService::NewStub(ch));
    }
    return OkStatus();
  }

  Status Push(const PushArgs& args) override {
    const int n = int(stubs_.size());
    std::vector<adam::v1::PushRequest> reqs(static_cast<size_t>(n));
    std::vector<adam::v1::PushResponse> resps(static_cast<size_t>(n));
    uint64_t bytes = 0, dense = 0;
    std::vector<float> cols;
    for (int i = 0; i < n; ++i) {
      auto& r = reqs[size_t(i)];
      r.set_trainer(options_.trainer_name);
      r.set_trainer_index(uint32_t(options_.trainer_index));
      r.set_clock(args.clock);
      r.set_leave(args.leave);
      if (args.delta != nullptr)
        for (const auto& range : plan_.DeltaRanges(i)) {
          const int64_t at = map_.shards()[range.shard].offset;
          slice_.ForEach(at + range.offset, range.count, [&](int64_t w, int64_t own, int64_t n) {
            bytes += AddDelta(&r, range.shard, w - at, args.delta + own, n, options_);
          });
        }
      for (const auto& b : args.dense) {
        const int k = plan_.DenseIndex(b.layer);
        if (k < 0 || b.images <= 0) continue;
        const auto& layer = plan_.dense()[size_t(k)];
        const auto& rows = plan_.Rows(i, k);
        if (rows.empty()) continue;
        auto* du = r.add_dense();
        du->set_layer(uint32_t(b.layer));
        du->set_images(uint32_t(b.images));
        du->set_float16(options_.format.float16);
        du->set_zstd(options_.format.zstd);
        update::EncodeFloats(b.activations, size_t(b.images) * size_t(layer.in), options_.format,
                             du->mutable_activations());
        // Only the errors of the rows this server holds.
        cols.resize(size_t(b.images) * rows.size());
        for (int img = 0; img < b.images; ++img)
          for (size_t j = 0; j < rows.size(); ++j)
            cols[size_t(img) * rows.size() + j] = b.errors[int64_t{img} * layer.units + rows[j]];
        update::EncodeFloats(cols.data(), cols.size(), options_.format, du->mutable_errors());
        dense += du->activations().size() + du->errors().size();
      }
    }
    std::vector<int> all(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) all[size_t(i)] = i;
    ADAM_RETURN_IF_ERROR(FanOut(
        std::move(all),
        [&](int i, grpc::ClientContext* ctx, auto done) {
          stubs_[size_t(i)]->async()->Push(ctx, &reqs[size_t(i)], &resps[size_t(i)], done);
        },
        "push"));
    pushed_ += bytes;
    dense_ += dense;
    return OkStatus();
  }

  Status Pull(float* out, uint64_t clock) override {
    const int n = int(stubs_.size());
    std::vector<adam::v1::PullRequest> reqs(static_cast<size_t>(n));
    std::vector<adam::v1::PullResponse> resps(static_cast<size_t>(n));
    for (const auto& s : map_.shards()) slice_.Ask(&reqs[size_t(s.server)], s);
    // Only the servers holding something asked for (a request for nothing would mean all).
    std::vector<int> asked;
    for (int i = 0; i < n; ++i) {
      auto& r = reqs[size_t(i)];
      if (r.shards().empty() && r.ranges().empty()) continue;
      asked.push_back(i);
      r.set_trainer_index(uint32_t(options_.trainer_index));
      r.set_clock(clock);
      r.set_float16(options_.format.float16);
      r.set_zstd(options_.format.zstd);
    }
    ADAM_RETURN_IF_ERROR(FanOut(
        asked,
        [&](int i, grpc::ClientContext* ctx, auto done) {
          stubs_[size_t(i)]->async()->Pull(ctx, &reqs[size_t(i)], &resps[size_t(i)], done);
        },
        "pull"));
    uint64_t bytes = 0;
    uint32_t epochs = UINT32_MAX;
    for (int i : asked) {
      epochs = std::min(epochs, resps[size_t(i)].epochs());
      for (const auto& sd : resps[size_t(i)].shards()) {
        if (sd.shard() >= map_.shards().size())
          return DataLossError("pull from ps-" + std::to_string(i) + ": unknown shard " +
                               std::to_string(sd.shard()));
        if (Status st = slice_.Read(sd, map_.shards()[sd.shard()], out); !st.ok())
          return DataLossError("pull from ps-" + std::to_string(i) + ": " + st.message());
        versions_.Read(sd.shard(), sd.version(), i);
        bytes += sd.values().size();
      }
    }
    pulled_ += bytes;
    if (!asked.empty()) epochs_ = epochs;
    return OkStatus();
  }

  uint64_t pushed_bytes() const override { return pushed_; }
  uint64_t dense_bytes() const override { return dense_; }
  uint64_t pulled_bytes() const override { return pulled_; }
  uint32_t epochs() const override { return epochs_; }

 private:
  // Starts `start(i, ctx, done)` for every server i in `todo` and waits for all. Servers that were
  // unreachable are asked again, every 100 ms, until options_.server_wait has passed; any other
  // error ends the call at once.
  template <typename Start>
  Status FanOut(std::vector<int> todo, Start start, const char* what) {
    const int n = int(stubs_.size());
    ServerWait wait(options_.server_wait, options_.waits, options_.waiting, options_.clock);
    for (;;) {
      Mutex mu;
      std::condition_variable cv;
      size_t left = todo.size();
      std::vector<grpc::Status> results(static_cast<size_t>(n));
      std::vector<grpc::ClientContext> ctxs(static_cast<size_t>(n));
      for (int i : todo) {
        net::SetDeadline(&ctxs[size_t(i)], options_.rpc_timeout);
        start(i, &ctxs[size_t(i)], [&, i](grpc::Status s) {
          MutexLock lock(mu);
          results[size_t(i)] = std::move(s);
          if (--left == 0) cv.notify_all();
        });
      }
      {
        MutexLock lock(mu);
        lock.Await(cv, [&] { return left == 0; });
      }
      std::vector<int> again;
      for (int i : todo) {
        const grpc::Status& s = results[size_t(i)];
        if (s.ok()) continue;
        if (s.error_code() != grpc::StatusCode::UNAVAILABLE)
          return net::FromGrpc(s, std::string(what) + " to parameter server " + Name(i));
        again.push_back(i);
      }
      if (again.empty()) {
        if (wait.waited()) wait.Reached("parameter server " + Name(todo.front()));
        return OkStatus();
      }
      const grpc::Status& last = results[size_t(again.front())];
      if (!wait.Again("parameter server " + Name(again.front()), last.error_message()))
        return net::FromGrpc(last, std::string(what) + " to parameter server " +
                                       Name(again.front()) + ": " + wait.Expired());
      todo = std::move(again);
    }
  }

  std::string Name(int i) const {
    return "ps-" + std::to_string(i) + " at " + addresses_[size_t(i)];
  }

  const shard::ShardMap map_;
  const update::UpdatePlan plan_;
  const std::vector<std::string> addresses_;
  const GrpcParamServerClientOptions options_;
  const SliceView slice_;
  ReadVersions versions_{options_};
  std::vector<std::unique_ptr<adam::v1::ParameterService::Stub>> stubs_;
  // Statistics, and a value read on its own: nothing else is ordered by them.
  std::atomic<uint64_t> pushed_{0};
  std::atomic<uint64_t> dense_{0};
  std::atomic<uint64_t> pulled_{0};
  std::atomic<uint32_t> epochs_{0};
};

uint64_t RandomSession() {
  std::random_device rd;
  uint64_t s = 0;
  while (s == 0) s = (uint64_t(rd()) << 32) ^ rd();
  return s;
}

bool Retryable(grpc::StatusCode c) {
  return c == grpc::StatusCode::UNAVAILABLE || c == grpc::StatusCode::FAILED_PRECONDITION ||
         c == grpc::StatusCode::DEADLINE_EXCEEDED || c == grpc::StatusCode::CANCELLED ||
         c == grpc::StatusCode::UNKNOWN;
}

class RoutedClient final : public ParamServerClient {
 public:
  RoutedClient(const shard::ShardMap& base, const model::ModelLayout& layout, int push_every,
               const std::vector<std::string>& controller, GrpcParamServerClientOptions options)
      : base_(base),
        layout_(layout),
        push_every_(push_every),
        options_(std::move(options)),
        slice_(options_.slice) {
    for (const auto& m : controller)
      members_.push_back(adam::v1::Controller::NewStub(net::MakeChannel(*options_.transport, m)));
  }

  ~RoutedClient() override {
    {
      MutexLock l(watch_mu_);
      stop_ = true;
      if (watch_ctx_) watch_ctx_->TryCancel();
    }
    watch_cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
  }

  // Keeps a WatchShardMap stream open (to each member in turn when one fails) and routes by
  // every newer map it brings.
  void StartWatching() {
    watcher_ = NamedThread("shard-map-watch", [this] {
      for (size_t i = 0; !members_.empty();) {
        grpc::ClientContext ctx;
        {
          MutexLock l(watch_mu_);
          if (stop_) return;
          watch_ctx_ = &ctx;
        }
        adam::v1::GetShardMapRequest req;
        req.set_min_version(shard_map_version());
        auto reader = members_[i % members_.size()]->WatchShardMap(&ctx, req);
        adam::v1::ShardMap map;
        while (reader->Read(&map)) {
          StatusOr<std::shared_ptr<const Route>> r = MakeRoute(map);
          if (!r.ok()) continue;  // e.g. a shard without a live primary yet: a later map will do
          MutexLock l(mu_);
          if (!route_ || (*r)->version > route_->version) route_ = *r;
        }
        (void)reader->Finish();
        MutexLock l(watch_mu_);
        watch_ctx_ = nullptr;
        if (stop_) return;
        ++i;  // that member failed or went away: the next one, after a pause
        options_.clock->AwaitFor(l, watch_cv_, std::chrono::milliseconds(100),
                                 [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_) { return stop_; });
      }
    });
  }

  uint64_t shard_map_version() const override {
    MutexLock l(mu_);
    return route_ ? route_->version : 0;
  }

  // Waits for a map newer than `min_version` in which every shard has a live primary.
  Status Refresh(uint64_t min_version, std::chrono::milliseconds wait) {
    const auto deadline = options_.clock->Now() + wait;
    std::string why = "no controller member answered";
    for (;;) {
      std::optional<adam::v1::ShardMap> best;
      for (auto& m : members_) {
        adam::v1::GetShardMapRequest req;
        adam::v1::ShardMap map;
        grpc::ClientContext ctx;
        net::SetDeadline(&ctx, std::chrono::milliseconds(300));
        if (m->GetShardMap(&ctx, req, &map).ok() && (!best || map.version() > best->version()))
          best = std::move(map);
      }
      if (best && best->version() > min_version) {
        StatusOr<std::shared_ptr<const Route>> r = MakeRoute(*best);
        if (r.ok()) {
          MutexLock l(mu_);
          if (!route_ || (*r)->version > route_->version) route_ = *r;
          return OkStatus();
        }
        why = r.status().message();
      } else if (best) {
        why = "shard map still at version " + std::to_string(best->version());
      }
      if (options_.clock->Now() >= deadline)
        return UnavailableError("no usable shard map from the controller within " +
                                std::to_string(wait.count()) + " ms: " + why);
      options_.clock->SleepFor(std::chrono::milliseconds(20));
    }
  }

  Status Push(const PushArgs& args) override {
    if (!args.dense.empty())
      return InvalidArgumentError("routed push: dense layers must travel as weight deltas");
    // A push without deltas (its clock alone) goes to every shard's primary.
    std::set<uint32_t> pending;
    for (const auto& s : base_.shards())
      if (args.delta == nullptr || slice_.Touches(s.offset, s.count)) pending.insert(s.id);
    uint64_t bytes = 0;
    // Every attempt of this push carries the same identity: a server drops a part it has.
    const uint64_t seq = seq_.fetch_add(1, std::memory_order_relaxed) + 1;
    return Retry(
        "push", &pending,
        [&](const Route& r, int server, const std::set<uint32_t>& shards, grpc::ClientContext* ctx,
            const std::function<void(grpc::Status)>& done) {
          auto call = std::make_shared<std::pair<adam::v1::PushRequest, adam::v1::PushResponse>>();
          auto& req = call->first;
          req.set_trainer(options_.trainer_name);
          req.set_trainer_index(uint32_t(options_.trainer_index));
          req.set_clock(args.clock);
          req.set_leave(args.leave);
          req.set_session(session_);
          req.set_seq(seq);
          if (args.delta != nullptr)
            for (const auto& range : r.plan.DeltaRanges(server)) {
              if (!shards.count(range.shard)) continue;
              const int64_t at = base_.shards()[range.shard].offset;
              slice_.ForEach(
                  at + range.offset, range.count, [&](int64_t w, int64_t own, int64_t n) {
                    bytes += AddDelta(&req, range.shard, w - at, args.delta + own, n, options_);
                  });
            }
          r.stubs[size_t(server)]->async()->Push(
              ctx, &call->first, &call->second,
              [call, done](grpc::Status s) { done(std::move(s)); });
        },
        [&] { pushed_ += bytes; });
  }

  Status Pull(float* out, uint64_t clock) override {
    std::set<uint32_t> pending;
    for (const auto& s : base_.shards())
      if (slice_.Touches(s.offset, s.count)) pending.insert(s.id);
    Mutex out_mu;  // guards the three below (locals: the analysis covers members only)
    Status bad;
    uint64_t bytes = 0;
    uint32_t epochs = UINT32_MAX;
    Status st = Retry(
        "pull", &pending,
        [&](const Route& r, int server, const std::set<uint32_t>& shards, grpc::ClientContext* ctx,
            const std::function<void(grpc::Status)>& done) {
          auto call = std::make_shared<std::pair<adam::v1::PullRequest, adam::v1::PullResponse>>();
          call->first.set_trainer_index(uint32_t(options_.trainer_index));
          call->first.set_clock(clock);
          call->first.set_float16(options_.format.float16);
          call->first.set_zstd(options_.format.zstd);
          for (uint32_t id : shards) slice_.Ask(&call->first, base_.shards()[id]);
          auto on_done = [&, call, done, server](const grpc::Status& s) {
            if (s.ok()) {
              MutexLock l(out_mu);
              epochs = std::min(epochs, call->second.epochs());
              for (const auto& sd : call->second.shards()) {
                if (sd.shard() >= base_.shards().size()) {
                  bad = DataLossError("pull: unknown shard " + std::to_string(sd.shard()));
                  continue;
                }
                if (Status rs = slice_.Read(sd, base_.shards()[sd.shard()], out); !rs.ok()) {
                  bad = DataLossError("pull: " + rs.message());
                  continue;
                }
                versions_.Read(sd.shard(), sd.version(), server);
                bytes += sd.values().size();
              }
            }
            done(s);
          };
          r.stubs[size_t(server)]->async()->Pull(ctx, &call->first, &call->second, on_done);
        },
        [] {});
    if (!st.ok()) return st;
    if (!bad.ok()) return bad;
    pulled_ += bytes;
    if (epochs != UINT32_MAX) epochs_ = epochs;
    return OkStatus();
  }

  uint64_t pushed_bytes() const override { return pushed_; }
  uint64_t dense_bytes() const override { return 0; }
  uint64_t pulled_bytes() const override { return pulled_; }
  uint32_t epochs() const override { return epochs_; }

 private:
  struct Route {
    uint64_t version = 0;
    shard::ShardMap map;
    update::UpdatePlan plan;
    std::vector<std::string> addresses;  // by server id
    std::vector<std::shared_ptr<adam::v1::ParameterService::Stub>> stubs;
  };

  StatusOr<std::shared_ptr<const Route>> MakeRoute(const adam::v1::ShardMap& m) {
    if (m.shards_size() != int(base_.shards().size()))
      return FailedPreconditionError("the controller's map has " + std::to_string(m.shards_size()) +
                                     " shards, the job " + std::to_string(base_.shards().size()));
    std::vector<int> primary;
    for (const auto& r : m.shards()) {
      if (r.replicas().empty())
        return FailedPreconditionError("shard " + std::to_string(r.shard()) + " has no primary");
      const uint32_t p = r.replicas(0);
      if (int(p) >= m.servers_size() || m.servers(int(p)).address().empty())
        return FailedPreconditionError("the primary of shard " + std::to_string(r.shard()) +
                                       ", ps-" + std::to_string(p) + ", has not registered");
      primary.push_back(int(p));
    }
    // Servers that joined the job have ids past the count the trainer started with.
    ADAM_ASSIGN_OR_RETURN(
        shard::ShardMap routed,
        base_.WithServers(primary, std::max(base_.num_servers(), m.servers_size())));
    update::UpdatePlan plan =
        update::UpdatePlan::Make(layout_, routed, push_every_, spec::DenseUpdates::kWeights);
    auto r =
        std::make_shared<Route>(Route{m.version(), std::move(routed), std::move(plan), {}, {}});
    MutexLock l(stub_mu_);
    for (const auto& sv : m.servers()) {
      r->addresses.push_back(sv.address());
      auto& stub = stubs_[sv.address()];
      if (!stub && !sv.address().empty())
        stub = adam::v1::ParameterService::NewStub(
            net::MakeChannel(*options_.transport, sv.address()));
      r->stubs.push_back(stub);
    }
    return std::shared_ptr<const Route>(std::move(r));
  }

  std::shared_ptr<const Route> current() {
    MutexLock l(mu_);
    return route_;
  }

  using Start = std::function<void(const Route&, int server, const std::set<uint32_t>& shards,
                                   grpc::ClientContext*, std::function<void(grpc::Status)>)>;

  // Waits until every call of a round (to the servers of `by_server`, by route `r`) is answered.
  // A call to a server that a newer map no longer names as the primary of all its shards is
  // cancelled: a dead server may never answer (the address of a pod or container that is gone
  // answers nothing, not even a reset) and a frozen one answers only once it runs again, both
  // long after the failover named new primaries. Retry re-sends its shards by the new map (a push
  // the old primary applied and forwarded is dropped there as a repeat).
  void AwaitRound(const Route& r, const std::map<int, std::set<uint32_t>>& by_server,
                  const std::map<int, std::unique_ptr<grpc::ClientContext>>& ctxs, Mutex& mu,
                  std::condition_variable& cv, const size_t& left,
                  const std::map<int, grpc::Status>& results) {
    std::set<int> cancelled;
    for (;;) {
      std::vector<grpc::ClientContext*> cancel;
      {
        MutexLock lock(mu);
        // Real time, not the clock's: the calls it waits for are gRPC's, on gRPC's time.
        if (lock.AwaitFor(cv, kRouteCheck, [&] { return left == 0; })) return;
        const std::shared_ptr<const Route> now = current();
        if (now->version == r.version) continue;
        for (const auto& [server, shards] : by_server) {
          if (results.count(server) || cancelled.count(server)) continue;
          for (uint32_t id : shards)
            if (now->map.shards()[id].server != server) {
              cancel.push_back(ctxs.at(server).get());
              cancelled.insert(server);
              break;
            }
        }
      }
      for (grpc::ClientContext* c : cancel) c->TryCancel();  // its callback takes `mu`
    }
  }

  // How often a round's wait looks for a newer map.
  static constexpr std::chrono::milliseconds kRouteCheck{20};

  // Sends the `pending` shards to their primaries (one call per server, in parallel) until every
  // one succeeded, re-routing the failed servers' shards by newer maps.
  Status Retry(const char* what, std::set<uint32_t>* pending, const Start& start,
               const std::function<void()>& on_success) {
    const auto deadline = options_.clock->Now() + options_.rpc_timeout;
    for (;;) {
      std::shared_ptr<const Route> r = current();
      std::map<int, std::set<uint32_t>> by_server;
      for (uint32_t id : *pending) by_server[r->map.shards()[id].server].insert(id);
      Mutex mu;
      std::condition_variable cv;
      size_t left = by_server.size();
      std::map<int, grpc::Status> results;
      std::map<int, std::unique_ptr<grpc::ClientContext>> ctxs;
      for (const auto& entry : by_server) {
        const int server = entry.first;  // clang: structured bindings cannot be captured
        auto& ctx = ctxs[server] = std::make_unique<grpc::ClientContext>();
        net::SetDeadline(ctx.get(), options_.rpc_timeout);
        start(*r, server, entry.second, ctx.get(), [&, server](grpc::Status s) {
          MutexLock lock(mu);
          results[server] = std::move(s);
          if (--left == 0) cv.notify_all();
        });
      }
      AwaitRound(*r, by_server, ctxs, mu, cv, left, results);
      std::set<uint32_t> failed;
      std::string last;
      for (const auto& [server, s] : results) {
        if (s.ok()) continue;
        if (!Retryable(s.error_code()))
          return net::FromGrpc(s, std::string(what) + " to ps-" + std::to_string(server));
        failed.insert(by_server[server].begin(), by_server[server].end());
        last = "ps-" + std::to_string(server) + ": " + s.error_message();
      }
      if (failed.empty()) {
        on_success();
        return OkStatus();
      }
      *pending = std::move(failed);
      const auto now = options_.clock->Now();
      if (now >= deadline)
        return UnavailableError(std::string(what) + " failed until the deadline; last: " + last);
      // Wait briefly for the controller to move the shards, then retry (the new primary may
      // simply not have heard of its promotion yet).
      const auto wait = std::min<Clock::Duration>(deadline - now, std::chrono::milliseconds(50));
      (void)Refresh(r->version, std::chrono::duration_cast<std::chrono::milliseconds>(wait));
    }
  }

  const shard::ShardMap base_;
  const model::ModelLayout layout_;
  const int push_every_;
  const GrpcParamServerClientOptions options_;
  const SliceView slice_;
  ReadVersions versions_{options_};
  std::vector<std::unique_ptr<adam::v1::Controller::Stub>> members_;
  mutable Mutex mu_;
  std::shared_ptr<const Route> route_ ABSL_GUARDED_BY(mu_);
  Mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool stop_ ABSL_GUARDED_BY(watch_mu_) = false;
  grpc::ClientContext* watch_ctx_ ABSL_GUARDED_BY(watch_mu_) = nullptr;
  std::thread watcher_;
  Mutex stub_mu_;
  std::map<std::string, std::shared_ptr<adam::v1::ParameterService::Stub>> stubs_
      ABSL_GUARDED_BY(stub_mu_);
  // Statistics, and a value read on its own: nothing else is ordered by them.
  std::atomic<uint64_t> pushed_{0};
  std::atomic<uint64_t> pulled_{0};
  std::atomic<uint32_t> epochs_{0};
  // This process's pushes: a random session and a sequence number per push (fetch_add hands out
  // each number once; nothing is published through it).
  const uint64_t session_ = RandomSession();
  std::atomic<uint64_t> seq_{0};
};

}  // namespace

StatusOr<std::unique_ptr<ParamServerClient>> ConnectRoutedParamServers(
    const shard::ShardMap& map, const model::ModelLayout& layout, int push_every,
    const std::vector<std::string>& controller, const GrpcParamServerClientOptions& options) {
  if (controller.empty()) return InvalidArgumentError("--controller lists no member");
  auto c = std::make_unique<RoutedClient>(map, layout, push_every, controller, options);
  ADAM_RETURN_IF_ERROR(c->Refresh(0, options.connect_timeout));
  c->StartWatching();
  return std::unique_ptr<ParamServerClient>(std::move(c));
}

StatusOr<std::unique_ptr<ParamServerClient>> ConnectParamServers(
    const shard::ShardMap& map, const update::UpdatePlan& plan,
    const std::vector<std::string>& addresses, const GrpcParamServerClientOptions& options) {
  if (int(addresses.size()) != map.num_servers())
    return InvalidArgumentError("--ps lists " + std::to_string(addresses.size()) +
                                " parameter servers, the job has " +
                                std::to_string(map.num_servers()));
  auto c = std::make_unique<GrpcClient>(map, plan, addresses, options);
  ADAM_RETURN_IF_ERROR(c->Connect());
  return std::unique_ptr<ParamServerClient>(std::move(c));
}

}  // namespace adam::trainer
