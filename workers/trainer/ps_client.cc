// ParamServerClient over gRPC with the callback stub API, fanning out to all servers at once.
#include "trainer/ps_client.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "adam/v1/ps.grpc.pb.h"
#include "net/grpc.h"

namespace adam::trainer {
namespace {

class GrpcClient final : public ParamServerClient {
 public:
  GrpcClient(const shard::ShardMap& map, const update::UpdatePlan& plan,
             std::vector<std::string> addresses, GrpcParamServerClientOptions options)
      : map_(map), plan_(plan), addresses_(std::move(addresses)), options_(std::move(options)) {}

  Status Connect() {
    for (size_t i = 0; i < addresses_.size(); ++i) {
      auto ch = net::MakeChannel(addresses_[i]);
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
          auto* d = r.add_deltas();
          d->set_shard(range.shard);
          d->set_offset(uint64_t(range.offset));
          const float* from = args.delta + map_.shards()[range.shard].offset + range.offset;
          d->set_values(reinterpret_cast<const char*>(from), size_t(range.count) * 4);
          bytes += uint64_t(range.count) * 4;
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
        du->set_activations(reinterpret_cast<const char*>(b.activations),
                            size_t(b.images) * size_t(layer.in) * 4);
        // Only the errors of the rows this server holds.
        cols.resize(size_t(b.images) * rows.size());
        for (int img = 0; img < b.images; ++img)
          for (size_t j = 0; j < rows.size(); ++j)
            cols[size_t(img) * rows.size() + j] = b.errors[int64_t{img} * layer.units + rows[j]];
        du->set_errors(reinterpret_cast<const char*>(cols.data()), cols.size() * 4);
        dense += du->activations().size() + du->errors().size();
      }
    }
    ADAM_RETURN_IF_ERROR(FanOut(n, [&](int i, grpc::ClientContext* ctx, auto done) {
      stubs_[size_t(i)]->async()->Push(ctx, &reqs[size_t(i)], &resps[size_t(i)], done);
    }, "push"));
    pushed_ += bytes;
    dense_ += dense;
    return OkStatus();
  }

  Status Pull(float* out, uint64_t clock) override {
    const int n = int(stubs_.size());
    std::vector<adam::v1::PullRequest> reqs(static_cast<size_t>(n));
    std::vector<adam::v1::PullResponse> resps(static_cast<size_t>(n));
    for (const auto& s : map_.shards()) reqs[size_t(s.server)].add_shards(s.id);
    for (auto& r : reqs) {
      r.set_trainer_index(uint32_t(options_.trainer_index));
      r.set_clock(clock);
    }
    ADAM_RETURN_IF_ERROR(FanOut(n, [&](int i, grpc::ClientContext* ctx, auto done) {
      stubs_[size_t(i)]->async()->Pull(ctx, &reqs[size_t(i)], &resps[size_t(i)], done);
    }, "pull"));
    uint64_t bytes = 0;
    for (int i = 0; i < n; ++i) {
      for (const auto& sd : resps[size_t(i)].shards()) {
        if (sd.shard() >= map_.shards().size())
          return DataLossError("pull from ps-" + std::to_string(i) + ": unknown shard " +
                               std::to_string(sd.shard()));
        const auto& s = map_.shards()[sd.shard()];
        if (sd.values().size() != size_t(s.count) * 4)
          return DataLossError("pull from ps-" + std::to_string(i) + ": shard " +
                               std::to_string(s.id) + " has " + std::to_string(sd.values().size()) +
                               " bytes, expected " + std::to_string(s.count * 4));
        std::memcpy(out + s.offset, sd.values().data(), sd.values().size());
        bytes += sd.values().size();
      }
    }
    pulled_ += bytes;
    return OkStatus();
  }

  uint64_t pushed_bytes() const override { return pushed_; }
  uint64_t dense_bytes() const override { return dense_; }
  uint64_t pulled_bytes() const override { return pulled_; }

 private:
  // Starts `start(i, ctx, done)` for every server i and waits for all; the first error wins.
  template <typename Start>
  Status FanOut(int n, Start start, const char* what) {
    std::mutex mu;
    std::condition_variable cv;
    int left = n;
    std::vector<grpc::Status> results(static_cast<size_t>(n));
    std::vector<grpc::ClientContext> ctxs(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      net::SetDeadline(&ctxs[size_t(i)], options_.rpc_timeout);
      start(i, &ctxs[size_t(i)], [&, i](grpc::Status s) {
        std::lock_guard<std::mutex> lock(mu);
        results[size_t(i)] = std::move(s);
        if (--left == 0) cv.notify_all();
      });
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return left == 0; });
    for (int i = 0; i < n; ++i)
      if (!results[size_t(i)].ok())
        return net::FromGrpc(results[size_t(i)], std::string(what) + " to parameter server ps-" +
                                                     std::to_string(i) + " at " +
                                                     addresses_[size_t(i)]);
    return OkStatus();
  }

  const shard::ShardMap map_;
  const update::UpdatePlan plan_;
  const std::vector<std::string> addresses_;
  const GrpcParamServerClientOptions options_;
  std::vector<std::unique_ptr<adam::v1::ParameterService::Stub>> stubs_;
  std::atomic<uint64_t> pushed_{0};  // statistics only: relaxed ordering suffices
  std::atomic<uint64_t> dense_{0};
  std::atomic<uint64_t> pulled_{0};
};

}  // namespace

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
