// DataClient over a gRPC stub.
#include "trainer/data_client.h"

#include "adam/v1/data.grpc.pb.h"
#include "net/grpc.h"
#include "trainer/server_wait.h"

namespace adam::trainer {
namespace {

class GrpcDataClient final : public DataClient {
 public:
  GrpcDataClient(const std::shared_ptr<grpc::Channel>& ch, DataClientOptions options)
      : stub_(adam::v1::DataService::NewStub(ch)), o_(std::move(options)) {}

  Status GetInfo(adam::v1::DatasetInfo* info) override {
    return Call("GetInfo", [&](grpc::ClientContext* ctx) { return stub_->GetInfo(ctx, {}, info); });
  }
  Status GetBatch(const adam::v1::GetBatchRequest& req, adam::v1::Batch* out) override {
    return Call("GetBatch",
                [&](grpc::ClientContext* ctx) { return stub_->GetBatch(ctx, req, out); });
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
    return Call("StopJob",
                [&](grpc::ClientContext* ctx) { return stub_->StopJob(ctx, {}, &resp); });
  }

 private:
  // Runs `rpc` with a fresh deadline; while the server is unreachable, again every 100 ms until
  // o_.server_wait has passed.
  template <typename Rpc>
  Status Call(const char* what, const Rpc& rpc) {
    ServerWait wait(o_.server_wait, o_.waits, o_.waiting, o_.clock);
    for (;;) {
      grpc::ClientContext ctx;
      net::SetDeadline(&ctx, o_.timeout);
      const grpc::Status s = rpc(&ctx);
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE) {
        if (wait.waited()) wait.Reached(Server());
        return net::FromGrpc(s, std::string("data server ") + what);
      }
      if (!wait.Again(Server(), s.error_message()))
        return net::FromGrpc(s, std::string("data server ") + what +
                                    (o_.address.empty() ? "" : " at " + o_.address) + ": " +
                                    wait.Expired());
    }
  }

  std::string Server() const {
    return "the data server" + (o_.address.empty() ? std::string() : " at " + o_.address);
  }

  std::unique_ptr<adam::v1::DataService::Stub> stub_;
  const DataClientOptions o_;
};

}  // namespace

std::unique_ptr<DataClient> MakeGrpcDataClient(const std::shared_ptr<grpc::Channel>& channel,
                                               DataClientOptions options) {
  return std::make_unique<GrpcDataClient>(channel, std::move(options));
}

}  // namespace adam::trainer
