// DataClient over a gRPC stub.
#include "trainer/data_client.h"

#include "adam/v1/data.grpc.pb.h"
#include "net/grpc.h"

namespace adam::trainer {
namespace {

class GrpcDataClient final : public DataClient {
 public:
  GrpcDataClient(std::shared_ptr<grpc::Channel> ch, std::chrono::milliseconds timeout)
      : stub_(adam::v1::DataService::NewStub(ch)), timeout_(timeout) {}

  Status GetInfo(adam::v1::DatasetInfo* info) override {
    grpc::ClientContext ctx;
    net::SetDeadline(&ctx, timeout_);
    return net::FromGrpc(stub_->GetInfo(&ctx, {}, info), "data server GetInfo");
  }
  Status GetBatch(const adam::v1::GetBatchRequest& req, adam::v1::Batch* out) override {
    grpc::ClientContext ctx;
    net::SetDeadline(&ctx, timeout_);
    return net::FromGrpc(stub_->GetBatch(&ctx, req, out), "data server GetBatch");
  }
  Status GetTestBatch(const adam::v1::GetTestBatchRequest& req, adam::v1::Batch* out) override {
    grpc::ClientContext ctx;
    net::SetDeadline(&ctx, timeout_);
    return net::FromGrpc(stub_->GetTestBatch(&ctx, req, out), "data server GetTestBatch");
  }
  Status FinishEpoch(const adam::v1::FinishEpochRequest& req) override {
    grpc::ClientContext ctx;
    net::SetDeadline(&ctx, timeout_);
    adam::v1::FinishEpochResponse resp;
    return net::FromGrpc(stub_->FinishEpoch(&ctx, req, &resp), "data server FinishEpoch");
  }
  Status StopJob() override {
    grpc::ClientContext ctx;
    net::SetDeadline(&ctx, timeout_);
    adam::v1::StopJobResponse resp;
    return net::FromGrpc(stub_->StopJob(&ctx, {}, &resp), "data server StopJob");
  }

 private:
  std::unique_ptr<adam::v1::DataService::Stub> stub_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<DataClient> MakeGrpcDataClient(std::shared_ptr<grpc::Channel> channel,
                                               std::chrono::milliseconds timeout) {
  return std::make_unique<GrpcDataClient>(std::move(channel), timeout);
}

}  // namespace adam::trainer
