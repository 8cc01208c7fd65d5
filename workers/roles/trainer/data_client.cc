// DataClient over gRPC stubs, one per data-server replica.
#include "trainer/data_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>

#include "adam/v1/data.grpc.pb.h"
#include "net/grpc.h"
#include "trainer/server_wait.h"

namespace adam::trainer {
namespace {

// Every replica serves the same seeded shuffles, so any of them answers a request as the one in
// use would: calls go to one replica (`first` to begin with) and move to the next when it cannot
// be reached; the trainer never goes back on its own. Each replica keeps its own epoch bookkeeping,
// so an epoch's end and the job's stop are also told to the others, once each (best effort: one
// that is down learns the first from the next epoch's requests, and a trainer that moves to it
// was told the second by the replica it came from).
class GrpcDataClient final : public DataClient {
 public:
  using Stub = adam::v1::DataService::Stub;

  GrpcDataClient(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                 DataClientOptions options)
      : o_(std::move(options)) {
    for (const auto& ch : channels) stubs_.push_back(adam::v1::DataService::NewStub(ch));
    o_.addresses.resize(stubs_.size());
    current_ = stubs_.empty() ? 0 : o_.first % stubs_.size();
    if (o_.in_use) o_.in_use->Set(double(current_.load()));
  }

  Status GetInfo(adam::v1::DatasetInfo* info) override {
    return Call("GetInfo",
                [&](Stub& s, grpc::ClientContext* ctx) { return s.GetInfo(ctx, {}, info); });
  }
  Status GetBatch(const adam::v1::GetBatchRequest& req, adam::v1::Batch* out) override {
    return Call("GetBatch",
                [&](Stub& s, grpc::ClientContext* ctx) { return s.GetBatch(ctx, req, out); });
  }
  Status GetTestBatch(const adam::v1::GetTestBatchRequest& req, adam::v1::Batch* out) override {
    return Call("GetTestBatch",
                [&](Stub& s, grpc::ClientContext* ctx) { return s.GetTestBatch(ctx, req, out); });
  }
  Status FinishEpoch(const adam::v1::FinishEpochRequest& req,
                     adam::v1::FinishEpochResponse* out) override {
    adam::v1::FinishEpochResponse others;
    return CallAll("FinishEpoch", [&](Stub& s, grpc::ClientContext* ctx, bool in_use) {
      return s.FinishEpoch(ctx, req, in_use ? out : &others);
    });
  }
  Status AskEpoch(const adam::v1::FinishEpochRequest& req, adam::v1::FinishEpochResponse* out,
                  std::chrono::milliseconds wait) override {
    return Call(
        "FinishEpoch",
        [&](Stub& s, grpc::ClientContext* ctx) { return s.FinishEpoch(ctx, req, out); }, wait);
  }
  Status StopJob() override {
    adam::v1::StopJobResponse resp;
    return CallAll("StopJob", [&](Stub& s, grpc::ClientContext* ctx, bool) {
      return s.StopJob(ctx, {}, &resp);
    });
  }

 private:
  // Runs `rpc` with a fresh deadline on the replica in use. While it cannot be reached
  // (UNAVAILABLE, or no answer within answer_timeout): the next replica at once, and after a round
  // of them all, again every 100 ms until o_.server_wait (or `bound`, if shorter) has passed (a
  // lone data server restarting under its old address). No try outlasts `bound` either.
  template <typename Rpc>
  Status Call(const char* what, const Rpc& rpc,
              std::chrono::milliseconds bound = std::chrono::milliseconds::max()) {
    bound = std::max(std::chrono::milliseconds(1), std::min(bound, o_.server_wait));
    ServerWait wait(bound, o_.waits, o_.waiting, o_.clock);
    size_t tried = 0;
    for (;;) {
      size_t at = current_.load();
      grpc::ClientContext ctx;
      net::SetDeadline(&ctx, std::min({o_.timeout, o_.answer_timeout, bound}));
      const grpc::Status s = rpc(*stubs_[at], &ctx);
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
          s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        if (wait.waited()) wait.Reached(Server(at));
        return net::FromGrpc(s, std::string("data server ") + what);
      }
      if (stubs_.size() > 1) {
        const size_t next = (at + 1) % stubs_.size();
        if (current_.compare_exchange_strong(at, next)) {
          spdlog::warn("{} cannot be reached ({}): going on with {}", Server(at), s.error_message(),
                       Server(next));
          if (o_.switches) o_.switches->Increment();
          if (o_.in_use) o_.in_use->Set(double(next));
        }
        if (++tried < stubs_.size()) continue;
        tried = 0;
      }
      if (!wait.Again(Servers(), s.error_message())) {
        const std::string where = Addresses();
        return net::FromGrpc(s, std::string("data server ") + what +
                                    (where.empty() ? "" : " at " + where) + ": " + wait.Expired());
      }
    }
  }

  // Call, then `rpc` once to every other replica, each with a short deadline; what they answer
  // is not waited for beyond it. `rpc`'s last argument says whether it calls the replica in use;
  // returns what that one answered.
  template <typename Rpc>
  Status CallAll(const char* what, const Rpc& rpc) {
    const size_t used = current_.load();
    Status st =
        Call(what, [&](Stub& s, grpc::ClientContext* ctx) { return rpc(s, ctx, /*in_use=*/true); });
    for (size_t i = 0; i < stubs_.size(); ++i) {
      if (i == used) continue;
      grpc::ClientContext ctx;
      net::SetDeadline(&ctx, std::min(o_.timeout, o_.tell_timeout));
      const grpc::Status s = rpc(*stubs_[i], &ctx, /*in_use=*/false);
      if (!s.ok()) spdlog::debug("{}: {}", Server(i), s.error_message());
    }
    return st;
  }

  std::string Server(size_t i) const {
    return "the data server" + (o_.addresses[i].empty() ? std::string() : " at " + o_.addresses[i]);
  }
  // For the wait: the one server, or all of them.
  std::string Servers() const {
    const std::string where = Addresses();
    return stubs_.size() == 1 || where.empty() ? Server(0) : "every data server (" + where + ")";
  }
  std::string Addresses() const {
    std::string out;
    for (const auto& a : o_.addresses)
      if (!a.empty()) out += (out.empty() ? "" : ", ") + a;
    return out;
  }

  std::vector<std::unique_ptr<Stub>> stubs_;
  DataClientOptions o_;
  std::atomic<size_t> current_{0};
};

}  // namespace

std::unique_ptr<DataClient> MakeGrpcDataClient(
    const std::vector<std::shared_ptr<grpc::Channel>>& channels, DataClientOptions options) {
  return std::make_unique<GrpcDataClient>(channels, std::move(options));
}

Status CheckBatchSizes(const adam::v1::Batch& b, int64_t image_bytes, const char* what) {
  if (b.pixels().size() == size_t(b.count()) * size_t(image_bytes) &&
      b.labels().size() == b.count())
    return OkStatus();
  return DataLossError(std::string("data server sent ") + what +
                       " whose sizes do not match its count (" + std::to_string(b.count()) +
                       " images, " + std::to_string(b.pixels().size()) + " pixel bytes, " +
                       std::to_string(b.labels().size()) + " labels)");
}

}  // namespace adam::trainer
