// ReplicaService (proto/adam/v1/replica.proto): the parameter server's traffic on its replication
// address (the second NIC). Checkpoints move between servers here: a server sends every flush to
// a peer (`--checkpoint-peer`), which keeps the copy, and a server that starts without its volume
// copies its newest checkpoint from its own former address or from that peer (`--restore-from`).
#pragma once

#include <memory>
#include <set>
#include <string>

#include "adam/v1/replica.grpc.pb.h"
#include "core/mutex.h"
#include "core/status.h"
#include "net/grpc.h"
#include "param_server/checkpoint.h"
#include "param_server/param_store.h"
#include "param_server/routing.h"

namespace adam::ps {

class ReplicaService final : public adam::v1::ReplicaService::Service {
 public:
  // `checkpointer` may be null (no persistence): requests for this server's checkpoint then fail
  // FAILED_PRECONDITION. Peers' copies go under `peer_dir` (empty: refused).
  ReplicaService(const Checkpointer* checkpointer, uint32_t server, std::string peer_dir)
      : checkpointer_(checkpointer), server_(server), peer_dir_(std::move(peer_dir)) {}

  grpc::Status GetCheckpoint(grpc::ServerContext* ctx, const adam::v1::GetCheckpointRequest* req,
                             grpc::ServerWriter<adam::v1::CheckpointChunk>* writer) override;
  grpc::Status PutCheckpoint(grpc::ServerContext* ctx,
                             grpc::ServerReader<adam::v1::CheckpointChunk>* reader,
                             adam::v1::PutCheckpointResponse* resp) override;
  // Replaces a secondary copy by the state its primary forwards (routing.h), when newer by
  // (term, version). Refused for a shard this server is the primary of, a forward of an older
  // term than the copy's (its sender was deposed), or when forwards are not enabled.
  grpc::Status Forward(grpc::ServerContext* ctx, const adam::v1::ForwardRequest* req,
                       adam::v1::ForwardResponse* resp) override;
  // A held shard's whole state (values, version, term, push marks), for a promoted primary.
  grpc::Status ReadShard(grpc::ServerContext* ctx, const adam::v1::ReadShardRequest* req,
                         adam::v1::ForwardRequest* resp) override;
  // Enables Forward into `store` as `routing` allows. Call before serving.
  void AcceptForwards(ParamStore* store, Routing* routing) {
    store_ = store;
    routing_ = routing;
  }

 private:
  ParamStore* store_ = nullptr;
  Routing* routing_ = nullptr;
  const Checkpointer* checkpointer_;
  uint32_t server_;
  std::string peer_dir_;
  Mutex put_mu_;  // one PutCheckpoint at a time
};

// A shard state's identity on the wire (ForwardRequest's version, term and push marks; marks of
// no push are left out), and back: a mark of a trainer index of kMaxTrainers or more is refused,
// naming it.
void MetaToProto(const ShardMeta& meta, adam::v1::ForwardRequest* out);
StatusOr<ShardMeta> MetaFromProto(const adam::v1::ForwardRequest& in);

// Copies the newest complete checkpoint of parameter server `server` from the replication
// address `address` into `dir`: each file is written as <name>.tmp, fsynced and renamed, so
// RestoreCheckpoint verifies what arrived. Returns the number of files copied (0: none there).
StatusOr<int> FetchCheckpoint(const net::Transport& transport, const std::string& address,
                              uint32_t server, const std::string& dir);

// Sends a checkpointer's newest checkpoint to a peer's ReplicaService after each flush, skipping
// files the peer already has. Thread-compatible: called from the checkpointer's thread.
class PeerSender {
 public:
  PeerSender(const net::Transport& transport, std::string address, uint32_t server);
  // Returns the number of files sent.
  StatusOr<int> Send(const Checkpointer& checkpointer);

 private:
  std::string address_;
  uint32_t server_;
  std::unique_ptr<adam::v1::ReplicaService::Stub> stub_;  // one channel for every send
  std::set<std::string> sent_;                            // files the peer has
};

}  // namespace adam::ps
