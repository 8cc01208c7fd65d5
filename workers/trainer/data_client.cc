// DataClient over a gRPC stub.
#include "trainer/data_client.h"

#include <thread>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <spdlog/spdlog.h>

#include "adam/v1/data.grpc.pb.h"
#include "net/grpc.h"

namespace adam::trainer {
namespace {

using Clock = std::chrono::steady_clock;

class GrpcDataClient final : public DataClient {
 public:
  GrpcDataClient(std::shared_ptr<grpc::Channel> ch, DataClientOptions options)
      : stub_(adam::v1::DataService::NewStub(ch)), o_(std::move(options)) {}

  Status GetInfo(adam::v1::DatasetInfo* info) override {
    return Call("GetInfo", [&](grpc::ClientContext* ctx) { return stub_->GetInfo(ctx, {}, info); });
  }
  Status GetBatch(const adam::v1::GetBatchRequest& req, adam::v1::Batch* out) override {
    return Call("GetBatch", [&](grpc::ClientContext* ctx) { return stub_->GetBatch(ctx, req, out); });
  }
  Status GetTestBatch(const adam::v1::GetTestBatchRequest& req, adam::v1::Batch* out) override {
    return Call("GetTestBatch",
                [&](grpc::ClientContext* ctx) { return stub_->GetTestBatch(ctx, req, out); });
  }
  Status FinishEpoch(const adam::v1::FinishEpochRequest& req) override {
    adam::v1::FinishEpochResponse resp;
    return Call("FinishEpoch",
                [&](grpc::ClientContext* ctx) { return stub_->FinishEpoch(ctx, req, &resp); });
  }
  Status StopJob() override {
    adam::v1::StopJobResponse resp;
    return Call("StopJob", [&](grpc::ClientContext* ctx) { return stub_->StopJob(ctx, {}, &resp); });
  }

 private:
  // Runs `rpc` with a fresh deadline; while the server is unreachable, again every 100 ms until
  // o_.server_wait has passed.
  template <typename Rpc>
  Status Call(const char* what, const Rpc& rpc) {
    const auto began = Clock::now();
    auto next_note = began;
    bool waited = false;
    const std::string where = o_.address.empty() ? "" : " at " + o_.address;
    for (;;) {
      grpc::ClientContext ctx;
      net::SetDeadline(&ctx, o_.timeout);
      const grpc::Status s = rpc(&ctx);
      const auto now = Clock::now();
      const double so_far = std::chrono::duration<double>(now - began).count();
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE) {
        if (waited) {
          if (o_.waiting) o_.waiting->Set(0);
          spdlog::info("the data server{} is back after {:.1f} s", where, so_far);
        }
        return net::FromGrpc(s, std::string("data server ") + what);
      }
      if (now - began >= o_.server_wait) {
        if (o_.waiting) o_.waiting->Set(0);
        return net::FromGrpc(s, fmt::format("data server {}{}: not back within {:g} s", what, where,
                                            double(o_.server_wait.count()) / 1000));
      }
      if (now >= next_note) {
        if (o_.waiting) o_.waiting->Set(1);
        spdlog::warn("waiting for the data server{} ({:.0f} s of {:g} s): {}", where, so_far,
                     double(o_.server_wait.count()) / 1000, s.error_message());
        next_note = now + std::chrono::seconds(1);
      }
      const auto pause = std::chrono::milliseconds(100);
      std::this_thread::sleep_for(pause);
      waited = true;
      if (o_.waits) o_.waits->Increment(std::chrono::duration<double>(pause).count());
    }
  }

  std::unique_ptr<adam::v1::DataService::Stub> stub_;
  const DataClientOptions o_;
};

}  // namespace

std::unique_ptr<DataClient> MakeGrpcDataClient(std::shared_ptr<grpc::Channel> channel,
                                               DataClientOptions options) {
  return std::make_unique<GrpcDataClient>(std::move(channel), std::move(options));
}

}  // namespace adam::trainer
