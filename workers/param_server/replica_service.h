// ReplicaService (proto/adam/v1/replica.proto): the parameter server's traffic on its replication
// address. Today: streaming the newest complete checkpoint to a server that starts without it.
#pragma once

#include <string>

#include "adam/v1/replica.grpc.pb.h"
#include "core/status.h"
#include "param_server/checkpoint.h"

namespace adam::ps {

class ReplicaService final : public adam::v1::ReplicaService::Service {
 public:
  // `checkpointer` may be null (no persistence): GetCheckpoint then fails FAILED_PRECONDITION.
  explicit ReplicaService(const Checkpointer* checkpointer) : checkpointer_(checkpointer) {}

  grpc::Status GetCheckpoint(grpc::ServerContext* ctx, const adam::v1::GetCheckpointRequest* req,
                             grpc::ServerWriter<adam::v1::CheckpointChunk>* writer) override;

 private:
  const Checkpointer* checkpointer_;
};

// Copies the newest complete checkpoint of the server at `address` (its replication address)
// into `dir`: each file is written as <name>.tmp, fsynced and renamed, so RestoreCheckpoint
// verifies what arrived. Returns the number of files copied (0: the peer has none).
StatusOr<int> FetchCheckpoint(const std::string& address, const std::string& dir);

}  // namespace adam::ps
