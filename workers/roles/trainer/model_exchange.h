// The gRPC transport between the model workers of a split replica (model/partition.h).
//
// Every worker serves ModelExchangeService, which files each arriving boundary into the mailbox
// of its lane. Each lane of each worker has a GrpcExchange, which keeps one client stream open to
// every peer for the whole run: a boundary costs one message on an open HTTP/2 stream (no call
// set-up per image), and its protobuf buffer is reused from call to call. A write returns once
// gRPC has the message, so a worker goes on to receive (and, for the next boundary, compute)
// while its sends are still on the wire.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "adam/v1/model_exchange.grpc.pb.h"
#include "core/status.h"
#include "model/partition.h"
#include "net/grpc.h"

namespace adam::trainer {

// Thread-safe: gRPC calls Stream from its own threads.
class ModelExchangeService final : public v1::ModelExchange::Service {
 public:
  ModelExchangeService(int workers, int lanes);
  model::Mailbox* mailbox(int lane) { return mailboxes_[size_t(lane)].get(); }
  // Wakes every worker waiting for a peer: nothing more will come.
  void Close(const Status& why);

  grpc::Status Stream(grpc::ServerContext* ctx, grpc::ServerReader<v1::Boundary>* reader,
                      v1::ExchangeEnd* end) override;

 private:
  const int workers_;
  std::vector<std::unique_ptr<model::Mailbox>> mailboxes_;
};

// One lane's Exchange over gRPC. Used by one thread; destroying it ends its streams.
class GrpcExchange final : public model::Exchange {
 public:
  // `peers[j]` is worker j's address (host:port; the entry at `self` is unused); `inbox` is this
  // worker's mailbox for `lane`. A peer that neither sends nor listens for `timeout` fails the
  // call naming it.
  GrpcExchange(std::shared_ptr<const net::Transport> transport, std::vector<std::string> peers,
               int self, int lane, model::Mailbox* inbox, std::chrono::milliseconds timeout);
  ~GrpcExchange() override;

  Status Send(int to, uint32_t tag, std::span<const float> data) override;
  Status Receive(int from, uint32_t tag, std::span<float> data) override;

 private:
  struct Peer;
  Status Open(int j);  // the stream to peer j, waiting for it to listen

  std::shared_ptr<const net::Transport> transport_;
  std::vector<std::string> addresses_;
  model::Mailbox* inbox_;
  const std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<Peer>> peers_;
  v1::Boundary message_;  // reused for every send
};

}  // namespace adam::trainer
