// The trainer's data client over two data-server replicas on loopback: it uses one, moves to the
// next when that one is lost (which serves the same batches), tells every replica an epoch's end
// and the job's stop, and fails naming them all when none answers.
#include "trainer/data_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "adam/v1/data.pb.h"
#include "data_server/server.h"
#include "net/grpc.h"
#include "roles/data_server/sources.h"

namespace adam::trainer {
namespace {

using std::chrono::milliseconds;

// Two replicas of one set of 8 images shared by 2 trainers, an epoch closed by either of them
// (quorum 0.5), batches of 4.
class Replicas : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      auto source = data_server::MakeSource(8, 2, 0.5, 4);
      sources_[i] = source.get();
      servers_[i] = std::make_unique<data_server::DataServer>(std::move(source), 3,
                                                              spec::DataServerOptions());
      ASSERT_TRUE(servers_[i]->Start().ok());
      addresses_.push_back("127.0.0.1:" + std::to_string(servers_[i]->port()));
    }
  }

  std::unique_ptr<DataClient> Client(size_t first, milliseconds wait = milliseconds(5000),
                                     milliseconds answer = milliseconds(5000)) {
    DataClientOptions o;
    o.timeout = milliseconds(5000);
    o.answer_timeout = answer;
    o.addresses = addresses_;
    o.first = first;
    o.server_wait = wait;
    o.switches = &switches_;
    o.in_use = &in_use_;
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    for (const auto& a : addresses_)
      channels.push_back(net::MakeChannel(*net::Transport::Plaintext(), a));
    return MakeGrpcDataClient(channels, o);
  }

  static v1::GetBatchRequest Request(int trainer, int epoch, int index) {
    v1::GetBatchRequest req;
    req.set_trainer(uint32_t(trainer));
    req.set_epoch(uint32_t(epoch));
    req.set_batch_index(uint32_t(index));
    return req;
  }

  // Replica 0's address becomes a listener that takes connections and never answers (as a dead
  // machine's may, when no reset comes back): the kernel completes them, nothing reads them.
  void SilenceReplica0() {
    silent_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(silent_fd_, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(silent_fd_, reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0);
    ASSERT_EQ(::listen(silent_fd_, 16), 0);
    socklen_t len = sizeof(at);
    ASSERT_EQ(::getsockname(silent_fd_, reinterpret_cast<sockaddr*>(&at), &len), 0);
    addresses_[0] = "127.0.0.1:" + std::to_string(ntohs(at.sin_port));
  }
  void TearDown() override {
    if (silent_fd_ >= 0) ::close(silent_fd_);
  }

  // Whether replica i has closed `epoch` (asked of its source, as trainer 0).
  bool Closed(int i, uint32_t epoch) {
    data_server::BatchView b;
    EXPECT_TRUE(sources_[i]->GetBatch(0, epoch, 0, &b).ok());
    return b.epoch_closed;
  }

  prometheus::Registry reg_;
  prometheus::Counter& switches_ =
      prometheus::BuildCounter().Name("switches").Register(reg_).Add({});
  prometheus::Gauge& in_use_ = prometheus::BuildGauge().Name("in_use").Register(reg_).Add({});
  data_server::DataSource* sources_[2] = {};
  std::unique_ptr<data_server::DataServer> servers_[2];
  std::vector<std::string> addresses_;
  int silent_fd_ = -1;
};

TEST_F(Replicas, ALostReplicaIsLeftForTheNextWhichServesTheSameBatches) {
  auto client = Client(0);
  v1::Batch before;
  ASSERT_TRUE(client->GetBatch(Request(0, 0, 0), &before).ok());
  ASSERT_EQ(before.count(), 4u);
  EXPECT_EQ(switches_.Value(), 0);
  EXPECT_EQ(in_use_.Value(), 0);
  servers_[0]->Stop();
  v1::Batch after;
  ASSERT_TRUE(client->GetBatch(Request(0, 0, 0), &after).ok());
  EXPECT_EQ(after.pixels(), before.pixels());
  EXPECT_EQ(after.labels(), before.labels());
  EXPECT_EQ(switches_.Value(), 1);
  EXPECT_EQ(in_use_.Value(), 1);
  // It stays with the replica it moved to.
  ASSERT_TRUE(client->GetBatch(Request(0, 0, 1), &after).ok());
  v1::DatasetInfo info;
  ASSERT_TRUE(client->GetInfo(&info).ok());
  EXPECT_EQ(info.train_count(), 8u);
  EXPECT_EQ(switches_.Value(), 1);
}

TEST_F(Replicas, EveryReplicaHearsAnEpochsEndAndTheJobsStop) {
  auto client = Client(1);  // trainer 1 starts on replica 1
  EXPECT_EQ(in_use_.Value(), 1);
  v1::FinishEpochRequest fin;
  fin.set_trainer(1);
  fin.set_epoch(0);
  v1::FinishEpochResponse resp;
  ASSERT_TRUE(client->FinishEpoch(fin, &resp).ok());
  EXPECT_TRUE(resp.epoch_closed());  // the answer is the replica in use's
  EXPECT_EQ(resp.finished(), 1u);
  EXPECT_TRUE(Closed(0, 0));  // the quorum is one trainer: replica 0 closed it too
  EXPECT_TRUE(Closed(1, 0));
  EXPECT_FALSE(Closed(0, 1));
  ASSERT_TRUE(client->StopJob().ok());
  EXPECT_TRUE(sources_[0]->stopped());
  EXPECT_TRUE(sources_[1]->stopped());
  // A replica that is down is no reason to fail: the one in use heard it.
  servers_[0]->Stop();
  fin.set_epoch(1);
  EXPECT_TRUE(client->FinishEpoch(fin, &resp).ok());
  EXPECT_TRUE(client->AskEpoch(fin, &resp, milliseconds(1000)).ok());
  EXPECT_TRUE(resp.epoch_closed());
  EXPECT_TRUE(Closed(1, 1));
  EXPECT_EQ(switches_.Value(), 0);
}

TEST_F(Replicas, NoReplicaAnsweringFailsNamingThemAll) {
  auto client = Client(0, milliseconds(300));
  servers_[0]->Stop();
  servers_[1]->Stop();
  v1::Batch b;
  const Status st = client->GetBatch(Request(0, 0, 0), &b);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("data server GetBatch at " + addresses_[0] + ", " + addresses_[1]),
            std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("not back within 0.3 s"), std::string::npos) << st.ToString();
}

// A replica that never answers: a call to it is given up after the answer timeout and goes to the
// next replica, well within the call's own deadline (5 s), which would otherwise fail the trainer.
TEST_F(Replicas, AReplicaThatNeverAnswersIsLeftAfterTheAnswerTimeout) {
  ASSERT_NO_FATAL_FAILURE(SilenceReplica0());
  auto client = Client(0, milliseconds(5000), milliseconds(300));
  v1::Batch b;
  const auto start = std::chrono::steady_clock::now();
  const Status st = client->GetBatch(Request(0, 0, 0), &b);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(b.count(), 4u);
  EXPECT_EQ(switches_.Value(), 1);
  EXPECT_EQ(in_use_.Value(), 1);
  EXPECT_LT(took, std::chrono::seconds(4));
}

// Trainer 0's wait for the last epoch's quorum has a bound of its own: asking whether the epoch is
// closed gives up within what is left of it, not after the client's server wait (here 60 s) or
// its answer timeout (10 s), whether the data server refuses connections or never answers.
TEST_F(Replicas, AskingAboutAnEpochKeepsTheCallersBound) {
  ASSERT_NO_FATAL_FAILURE(SilenceReplica0());
  servers_[1]->Stop();  // refuses
  auto client = Client(0, milliseconds(60000), milliseconds(10000));
  v1::FinishEpochRequest fin;
  fin.set_trainer(0);
  fin.set_epoch(0);
  v1::FinishEpochResponse resp;
  const auto start = std::chrono::steady_clock::now();
  const Status st = client->AskEpoch(fin, &resp, milliseconds(500));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("not back within 0.5 s"), std::string::npos) << st.ToString();
  EXPECT_LT(took, std::chrono::seconds(3));
}

}  // namespace
}  // namespace adam::trainer
