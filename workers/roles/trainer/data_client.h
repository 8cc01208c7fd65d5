// DataClient: the trainer's view of the data server (the DataService calls it makes), so the
// trainer can run against the gRPC service or, in tests, against a data source in process.
// Implementations are thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "adam/v1/data.pb.h"
#include "core/clock.h"
#include "core/status.h"

namespace grpc {
class Channel;
}
namespace prometheus {
class Counter;
class Gauge;
}  // namespace prometheus

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

struct DataClientOptions {
  std::chrono::milliseconds timeout{30000};  // of every call
  std::string address;                       // for messages
  // How long a call waits for an unreachable data server (UNAVAILABLE: it is restarting; its
  // shuffles are seeded, so it serves the same batches again) before failing. Each second of
  // waiting is logged; `waits` counts the seconds, `waiting` is 1 meanwhile.
  std::chrono::milliseconds server_wait{120000};
  prometheus::Counter* waits = nullptr;
  prometheus::Gauge* waiting = nullptr;
  Clock* clock = Clock::Real();  // where that wait reads the time (not owned)
};

// Over gRPC. Errors name the call ("data server GetBatch: ...").
std::unique_ptr<DataClient> MakeGrpcDataClient(const std::shared_ptr<grpc::Channel>& channel,
                                               DataClientOptions options);
inline std::unique_ptr<DataClient> MakeGrpcDataClient(const std::shared_ptr<grpc::Channel>& channel,
                                                      std::chrono::milliseconds timeout) {
  DataClientOptions o;
  o.timeout = timeout;
  return MakeGrpcDataClient(channel, std::move(o));
}

}  // namespace adam::trainer
