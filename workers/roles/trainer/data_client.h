// DataClient: the trainer's view of the data server (the DataService calls it makes), so the
// trainer can run against the gRPC service or, in tests, against a data source in process.
// Implementations are thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

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
  // Tells the data server (every replica) that this trainer finished `req.epoch`; `out` is what
  // the replica in use answered (how many trainers have, whether the epoch's quorum closed it).
  virtual Status FinishEpoch(const adam::v1::FinishEpochRequest& req,
                             adam::v1::FinishEpochResponse* out) = 0;
  // The same call to the replica in use only, to ask again (a trainer's finish counts once). It
  // waits for an unreachable data server at most `wait` (and never longer than the client's
  // server_wait): a caller with a bound of its own keeps it.
  virtual Status AskEpoch(const adam::v1::FinishEpochRequest& req,
                          adam::v1::FinishEpochResponse* out, std::chrono::milliseconds wait) = 0;
  virtual Status StopJob() = 0;
};

struct DataClientOptions {
  std::chrono::milliseconds timeout{30000};  // of every call
  // A call not answered this long counts as its replica lost, as an unreachable one does: a data
  // server answers in milliseconds, and one whose machine died under a call in flight may send no
  // reset (its container's address then answers nothing), which would hold the trainer to
  // `timeout` and then fail it.
  std::chrono::milliseconds answer_timeout{5000};
  // The replicas' addresses, in the order of the channels (for messages), and the one used first
  // (taken modulo their count: a trainer's index spreads the trainers over them).
  std::vector<std::string> addresses;
  size_t first = 0;
  // How long a call waits for an unreachable data server (UNAVAILABLE or no answer within
  // answer_timeout: it is restarting; its
  // shuffles are seeded, so it serves the same batches again) before failing. Each second of
  // waiting is logged; `waits` counts the seconds, `waiting` is 1 meanwhile.
  std::chrono::milliseconds server_wait{120000};
  prometheus::Counter* waits = nullptr;
  prometheus::Gauge* waiting = nullptr;
  prometheus::Counter* switches = nullptr;  // moves to another replica
  prometheus::Gauge* in_use = nullptr;      // the index of the replica in use
  // The deadline of the epoch ends and the job's stop told to the replicas not in use.
  std::chrono::milliseconds tell_timeout{1000};
  Clock* clock = Clock::Real();  // where that wait reads the time (not owned)
};

// Over gRPC, to one or more data-server replicas (`channels`, at least one): calls go to one
// replica and move to the next when it cannot be reached; epoch ends and the job's stop reach
// them all. Errors name the call ("data server GetBatch: ...").
std::unique_ptr<DataClient> MakeGrpcDataClient(
    const std::vector<std::shared_ptr<grpc::Channel>>& channels, DataClientOptions options);
inline std::unique_ptr<DataClient> MakeGrpcDataClient(const std::shared_ptr<grpc::Channel>& channel,
                                                      std::chrono::milliseconds timeout) {
  DataClientOptions o;
  o.timeout = timeout;
  return MakeGrpcDataClient({channel}, std::move(o));
}

// A batch as the data server sent it: DataLoss, naming `what` ("a batch", "a test batch"), the
// count and both sizes, unless it holds `count` images of `image_bytes` bytes and `count` labels.
Status CheckBatchSizes(const adam::v1::Batch& b, int64_t image_bytes, const char* what);

}  // namespace adam::trainer
