// Elastic parameter servers with real processes on loopback: three controller members and three
// servers holding three copies of every shard; the job's manifest file (on a cluster, the
// ConfigMap) changes its server count while a trainer makes tagged pushes (`adam trainer
// --check-pushes`, trainer/push_check.h). A fourth server joins and takes its share, then leaves
// again and exits once its copies have moved; no acknowledged push is lost or applied twice
// through either, and every copy agrees with its primary. The same processes with a primary
// frozen (SIGSTOP) mid-round: the trainer's pushes go on past it.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "adam/v1/controller.grpc.pb.h"
#include "core/ports.h"
#include "net/grpc.h"
#include "testing/child.h"
#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam {
namespace {

using namespace std::chrono_literals;
using testing::Child;

// 6,344 parameters in 25 shards of 256 floats (the last 200): room for two rounds of 100 tags.
void WriteJob(const std::string& path, int servers) {
  std::ostringstream m;
  m << "apiVersion: adam.dev/v1alpha1\nkind: AdamJob\nmetadata: {name: elastic}\nspec:\n"
    << "  dataset:\n"
    << "    train: {images: unused-images, labels: unused-labels}\n"
    << "    test: {images: unused-images, labels: unused-labels}\n"
    << "  model:\n    input: {channels: 1, height: 12, width: 12}\n    layers:\n"
    << "      - {type: conv, maps: 4, kernel: 3, activation: tanh}\n"
    << "      - {type: maxpool, size: 2}\n"
    << "      - {type: dense, units: 60, activation: relu}\n"
    << "      - {type: softmax, classes: 4}\n"
    << "  training: {epochs: 1}\n"
    << "  roles:\n"
    << "    controller: {replicas: 3}\n"
    << "    parameterServer: {replicas: " << servers << ", shardBytes: 1024, copies: 3}\n"
    << "    trainer: {replicas: 1}\n";
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << m.str();
  std::rename(tmp.c_str(), path.c_str());
}

class ElasticServers : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = dir_.File("job.yaml");
    WriteJob(job_, 3);
    for (int i = 0; i < 3; ++i) {
      const std::string addr = "127.0.0.1:" + std::to_string(adam::FreePort());
      members_ += (i > 0 ? "," : "") + std::to_string(i + 1) + "=" + addr;
      stubs_.push_back(
          v1::Controller::NewStub(net::MakeChannel(*net::Transport::Plaintext(), addr)));
    }
    for (int i = 0; i < 3; ++i)
      controllers_.push_back(std::make_unique<Child>(
          std::vector<std::string>{"controller", "--job", job_, "--plaintext", "--id",
                                   std::to_string(i + 1), "--members", members_, "--state-dir",
                                   dir_.File("c" + std::to_string(i)), "--name",
                                   "controller-" + std::to_string(i + 1)},
          dir_.File("controller-" + std::to_string(i) + ".log")));
    for (int i = 0; i < 3; ++i) StartServer(i);
  }

  void StartServer(int i) {
    servers_[i] = std::make_unique<Child>(
        std::vector<std::string>{"ps", "--job", job_, "--plaintext", "--index", std::to_string(i),
                                 "--name", "ps-" + std::to_string(i), "--listen", "127.0.0.1:0",
                                 "--replication-listen", "127.0.0.1:0", "--controller", members_,
                                 "--threads", "1", "--no-bind"},
        Log("ps-" + std::to_string(i)));
    ASSERT_TRUE(servers_[i]->WaitFor<events::Ready>())
        << testing::ReadText(Log("ps-" + std::to_string(i)));
  }

  std::unique_ptr<Child> Checker(int round) {
    return std::make_unique<Child>(
        std::vector<std::string>{"trainer", "--job", job_, "--plaintext", "--index", "0",
                                 "--data-server", "127.0.0.1:1", "--controller", members_,
                                 "--no-bind", "--check-pushes", "100", "--check-round",
                                 std::to_string(round), "--check-every-ms", "60"},
        Log("check-" + std::to_string(round)));
  }

  std::string Log(const std::string& name) const { return dir_.File(name + ".log"); }

  // The newest map any member serves.
  v1::ShardMap Map() {
    v1::ShardMap best;
    for (auto& stub : stubs_) {
      v1::ShardMap m;
      grpc::ClientContext ctx;
      net::SetDeadline(&ctx, 500ms);
      v1::GetShardMapRequest req;
      if (stub->GetShardMap(&ctx, req, &m).ok() && m.version() > best.version()) best = m;
    }
    return best;
  }

  // Copies (in sync or being filled) per server, and whether any shard is moving.
  static std::map<uint32_t, int> Copies(const v1::ShardMap& m, bool* moving = nullptr) {
    std::map<uint32_t, int> n;
    if (moving) *moving = false;
    for (const auto& r : m.shards()) {
      for (uint32_t id : r.replicas()) ++n[id];
      for (uint32_t id : r.copying()) ++n[id];
      if (moving) *moving = *moving || r.copying_size() > 0 || r.has_move_from();
    }
    return n;
  }

  // Runs a check round while `change` happens 1 s in; the check must pass and report every
  // push.
  void CheckThrough(int round, const std::function<void()>& change) {
    auto check = Checker(round);
    std::this_thread::sleep_for(1s);  // a fault's timing, not a wait for a condition
    change();
    auto got = check->WaitFor<events::PushCheck>(90s);
    ASSERT_TRUE(got) << testing::ReadText(Log("check-" + std::to_string(round)));
    EXPECT_EQ(got->pushes, 100);
    EXPECT_GT(got->acked, 0);
    EXPECT_EQ(got->lost, 0) << events::ToJson(*got).dump();
    EXPECT_EQ(got->twice, 0) << events::ToJson(*got).dump();
    EXPECT_EQ(got->disagree, 0) << events::ToJson(*got).dump();
    EXPECT_EQ(got->unread, 0) << events::ToJson(*got).dump();
    const int status = check->Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << testing::ReadText(Log("check-" + std::to_string(round)));
  }

  testing::TmpDir dir_;
  std::string job_;
  std::string members_;
  std::vector<std::unique_ptr<v1::Controller::Stub>> stubs_;
  std::vector<std::unique_ptr<Child>> controllers_;
  std::map<int, std::unique_ptr<Child>> servers_;
};

TEST_F(ElasticServers, AServerJoinsAndLeavesARunningJobWithoutLosingAnAcknowledgedPush) {
  ASSERT_TRUE(testing::Eventually([&] { return Copies(Map()).size() == 3; }, 30s));
  // 75 copies over 3 servers: 25 each. A fourth joins: it takes 18 or 19, the others give theirs.
  CheckThrough(0, [&] {
    WriteJob(job_, 4);
    StartServer(3);
  });
  bool moving = true;
  std::map<uint32_t, int> copies;
  ASSERT_TRUE(testing::Eventually(
      [&] {
        const v1::ShardMap m = Map();
        copies = Copies(m, &moving);
        return m.servers_wanted() == 4 && !moving && copies.size() == 4 && copies[3] >= 18;
      },
      60s))
      << "servers hold " << ::testing::PrintToString(copies);
  for (const auto& [id, n] : copies) {
    EXPECT_GE(n, 18) << "ps-" << id;
    EXPECT_LE(n, 19) << "ps-" << id;
  }
  // It leaves again: its copies go back, and it exits by itself (code 0) once it holds none.
  CheckThrough(1, [&] { WriteJob(job_, 3); });
  auto retired = servers_[3]->WaitFor<events::Retired>(60s);
  ASSERT_TRUE(retired) << testing::ReadText(Log("ps-3"));
  const int status = servers_[3]->Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << testing::ReadText(Log("ps-3"));
  copies = Copies(Map(), &moving);
  EXPECT_FALSE(moving);
  EXPECT_EQ(copies.count(3), 0u);
  for (uint32_t id = 0; id < 3; ++id) EXPECT_EQ(copies[id], 25) << "ps-" << id;
  for (auto n : {"controller-0", "controller-1", "controller-2", "check-0", "check-1", "ps-3"}) {
    std::istringstream in(testing::ReadText(Log(n)));
    for (std::string l; std::getline(in, l);)
      if (l.find("rebalanced") != std::string::npos || l.find("check:") != std::string::npos ||
          l.find("resized") != std::string::npos || l.find("->") != std::string::npos ||
          l.find("retir") != std::string::npos || l.find("tagged") != std::string::npos)
        std::printf("%s: %s\n", n, l.c_str());
  }
}

// A primary frozen (SIGSTOP: what `docker pause`, a hung node or a network that drops every
// packet look like to its callers) is failed over after the controller's server timeout. A push
// in flight to it is given up once the trainer's routed client has the map that names the new
// primaries, and sent to them: the check round ends while the old primary is still frozen, with
// no acknowledged push lost or applied twice. Before, every push waited for the frozen server to
// run again (or for its 30 s deadline, which failed the trainer).
class FrozenPrimary : public ElasticServers {};

TEST_F(FrozenPrimary, APushInFlightToItGoesToTheNewPrimaryOnceTheMapNamesIt) {
  ASSERT_TRUE(testing::Eventually([&] { return Copies(Map()).size() == 3; }, 30s));
  auto check = Checker(0);
  std::this_thread::sleep_for(1s);  // a fault's timing, not a wait for a condition
  const v1::ShardMap before = Map();
  ASSERT_GT(before.shards_size(), 0);
  const int frozen = int(before.shards(0).replicas(0));
  servers_[frozen]->Signal(SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  // Well inside the pushes' 30 s deadline: the round ends by the new map, not by a timeout.
  auto got = check->WaitFor<events::PushCheck>(25s);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  servers_[frozen]->Signal(SIGCONT);
  ASSERT_TRUE(got) << "ps-" << frozen << " frozen: no push_check within 25 s\n"
                   << testing::ReadText(Log("check-0"));
  std::printf("ps-%d frozen: the check round ended %.1f s later, the server still frozen\n", frozen,
              took);
  EXPECT_EQ(got->pushes, 100);
  EXPECT_EQ(got->lost, 0) << events::ToJson(*got).dump();
  EXPECT_EQ(got->twice, 0) << events::ToJson(*got).dump();
  EXPECT_EQ(got->disagree, 0) << events::ToJson(*got).dump();
  EXPECT_GT(Map().version(), before.version());
  const int status = check->Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << testing::ReadText(Log("check-0"));
}

}  // namespace
}  // namespace adam
