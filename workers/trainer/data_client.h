// DataClient: the trainer's view of the data server (the DataService calls it makes), so the
// trainer can run against the gRPC service or, in tests, against a data source in process.
// Implementations are thread-safe.
#pragma once

#include <chrono>
#include <memory>

#include "adam/v1/data.pb.h"
#include "core/status.h"

namespace grpc {
class Channel;
}

namespace adam::trainer {

class DataClient {
 public:
  virtual ~DataClient() = default;
  virtual Status GetInfo(adam::v1::DatasetInfo* info) = 0;
  virtual Status GetBatch(const adam::v1::GetBatchRequest& req, adam::v1::Batch* out) = 0;
  virtual Status GetTestBatch(const adam::v1::GetTestBatchRequest& req, adam::v1::Batch* out) = 0;
  virtual Status FinishEpoch(const adam::v1::FinishEpochRequest& req) = 0;
  virtual Status StopJob() = 0;
};

// Over gRPC; every call has `timeout`. Errors name the call ("data server GetBatch: ...").
std::unique_ptr<DataClient> MakeGrpcDataClient(std::shared_ptr<grpc::Channel> channel,
                                               std::chrono::milliseconds timeout);

}  // namespace adam::trainer
