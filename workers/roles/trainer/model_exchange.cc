// ModelExchangeService and GrpcExchange: boundaries of a split replica over long-lived streams.
#include "trainer/model_exchange.h"

#include <cstring>

namespace adam::trainer {

ModelExchangeService::ModelExchangeService(int workers, int lanes) : workers_(workers) {
  for (int t = 0; t < lanes; ++t) mailboxes_.push_back(std::make_unique<model::Mailbox>(workers));
}

void ModelExchangeService::Close(const Status& why) {
  for (auto& m : mailboxes_) m->Close(why);
}

grpc::Status ModelExchangeService::Stream(grpc::ServerContext* ctx,
                                          grpc::ServerReader<v1::Boundary>* reader,
                                          v1::ExchangeEnd* end) {
  v1::Boundary b;
  int from = -1, lane = -1;
  while (reader->Read(&b)) {
    if (b.from() >= uint32_t(workers_) || b.lane() >= mailboxes_.size())
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "boundary from worker " + std::to_string(b.from()) + ", lane " +
                              std::to_string(b.lane()) + ": this replica has " +
                              std::to_string(workers_) + " workers and " +
                              std::to_string(mailboxes_.size()) + " lanes");
    if (b.data().size() % sizeof(float) != 0)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "boundary " + std::to_string(b.tag()) + ": " +
                              std::to_string(b.data().size()) + " bytes is not whole floats");
    from = int(b.from());
    lane = int(b.lane());
    std::vector<float> v = mailboxes_[size_t(lane)]->Spare(b.data().size() / sizeof(float));
    std::memcpy(v.data(), b.data().data(), b.data().size());
    mailboxes_[size_t(lane)]->Put(from, b.tag(), std::move(v));
  }
  // A stream ends when its worker stops; one cut short leaves this worker nothing to wait for.
  if (lane >= 0 && ctx->IsCancelled())
    mailboxes_[size_t(lane)]->Close(
        UnavailableError("model worker " + std::to_string(from) + "'s stream was cut"));
  return grpc::Status::OK;
}

struct GrpcExchange::Peer {
  std::shared_ptr<grpc::Channel> channel;
  grpc::ClientContext ctx;
  v1::ExchangeEnd end;
  std::unique_ptr<v1::ModelExchange::Stub> stub;
  std::unique_ptr<grpc::ClientWriter<v1::Boundary>> writer;
};

GrpcExchange::GrpcExchange(std::shared_ptr<const net::Transport> transport,
                           std::vector<std::string> peers, int self, int lane,
                           model::Mailbox* inbox, std::chrono::milliseconds timeout)
    : transport_(std::move(transport)),
      addresses_(std::move(peers)),
      inbox_(inbox),
      timeout_(timeout),
      peers_(addresses_.size()) {
  message_.set_from(uint32_t(self));
  message_.set_lane(uint32_t(lane));
}

GrpcExchange::~GrpcExchange() {
  for (auto& p : peers_) {
    if (!p || !p->writer) continue;
    p->writer->WritesDone();
    p->writer->Finish();
  }
}

Status GrpcExchange::Open(int j) {
  auto p = std::make_unique<Peer>();
  const std::string& address = addresses_[size_t(j)];
  p->channel = net::MakeChannel(*transport_, address);
  ADAM_RETURN_IF_ERROR(
      net::WaitForReady(p->channel.get(), "model worker " + std::to_string(j), address, timeout_));
  p->stub = v1::ModelExchange::NewStub(p->channel);
  p->writer = p->stub->Stream(&p->ctx, &p->end);
  peers_[size_t(j)] = std::move(p);
  return OkStatus();
}

Status GrpcExchange::Send(int to, uint32_t tag, std::span<const float> data) {
  if (!peers_[size_t(to)]) ADAM_RETURN_IF_ERROR(Open(to));
  message_.set_tag(tag);
  message_.mutable_data()->assign(reinterpret_cast<const char*>(data.data()),
                                  data.size() * sizeof(float));
  if (!peers_[size_t(to)]->writer->Write(message_))
    return UnavailableError("model worker " + std::to_string(to) + " at " + addresses_[size_t(to)] +
                            " closed its stream");
  return OkStatus();
}

Status GrpcExchange::Receive(int from, uint32_t tag, std::span<float> data) {
  return inbox_->Take(from, tag, data, timeout_);
}

}  // namespace adam::trainer
