// A parameter server process killed with SIGKILL in the middle of a checkpoint flush restarts
// from its last complete checkpoint; one stopped with SIGTERM flushes everything first.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>

#include "adam/v1/ps.grpc.pb.h"
#include "adam/v1/replica.grpc.pb.h"
#include "model/layout.h"
#include "net/grpc.h"
#include "spec/adamjob.h"
#include "testing/child.h"
#include "testing/tmp_dir.h"
#include "testing/wait.h"
#include "trainer/ps_client.h"
#include "update/update_plan.h"

namespace adam {
namespace {

using testing::Child;

class PsPersistence : public ::testing::Test {
 protected:
  void SetUp() override {
    job_path_ = dir_.File("job.yaml");
    std::ofstream(job_path_)
        << "apiVersion: adam.dev/v1alpha1\nkind: AdamJob\nmetadata: {name: persist}\nspec:\n"
        << "  dataset:\n    train: {images: a, labels: b}\n    test: {images: c, labels: d}\n"
        << "  model:\n    input: {channels: 1, height: 12, width: 12}\n    layers:\n"
        << "      - {type: conv, maps: 4, kernel: 3}\n      - {type: maxpool, size: 2}\n"
        << "      - {type: dense, units: 16}\n      - {type: softmax, classes: 4}\n"
        << "  training: {denseUpdates: weights}\n"
        << "  roles:\n    parameterServer: {replicas: 1, shardBytes: 1024, persistence: {interval: "
           "200ms}}\n";
    auto job = spec::LoadAdamJob(job_path_);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    auto layout = model::ModelLayout::Make(job->model);
    ASSERT_TRUE(layout.ok());
    n_ = layout->num_params();
    auto map = shard::ShardMap::Make(n_, 1024, 1, job->training.seed);
    ASSERT_TRUE(map.ok());
    map_ = *map;
    plan_.emplace(update::UpdatePlan::Make(*layout, *map_, job->training.push_every,
                                           job->training.dense_updates));
  }

  std::unique_ptr<Child> StartPs(const std::vector<std::string>& extra, int* port,
                                 const std::string& state = "state",
                                 int* replication_port = nullptr) {
    std::vector<std::string> args = {
        "ps",        "--plaintext", "--job",       job_path_,     "--index",
        "0",         "--listen",    "127.0.0.1:0", "--state-dir", dir_.File(state),
        "--threads", "1",           "--no-bind"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto c = std::make_unique<Child>(args, dir_.File("ps.log"));
    auto ready = c->WaitFor<events::Ready>();
    EXPECT_TRUE(ready.has_value()) << "parameter server did not start";
    *port = ready ? ready->port : 0;
    if (replication_port) *replication_port = ready ? ready->ports["replication_port"] : 0;
    return c;
  }

  std::unique_ptr<trainer::ParamServerClient> Connect(int port) {
    auto c = trainer::ConnectParamServers(*map_, *plan_, {"127.0.0.1:" + std::to_string(port)}, {});
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::vector<float> Pull(trainer::ParamServerClient* c) {
    std::vector<float> v(static_cast<size_t>(n_));
    EXPECT_TRUE(c->Pull(v.data(), 0).ok());
    return v;
  }

  void PushAll(trainer::ParamServerClient* c, float value) {
    std::vector<float> d(static_cast<size_t>(n_), value);
    ASSERT_TRUE(c->Push({d.data(), {}, 1, false}).ok());
  }

  static std::vector<float> Plus(std::vector<float> v, float x) {
    for (auto& f : v) f += x;
    return v;
  }

  testing::TmpDir dir_;
  std::string job_path_;
  int64_t n_ = 0;
  std::optional<shard::ShardMap> map_;
  std::optional<update::UpdatePlan> plan_;
};

TEST_F(PsPersistence, KillDuringAFlushLosesNothingOlderThanTheLastCompleteFlush) {
  int port = 0;
  std::vector<float> initial;
  {
    auto ps = StartPs({"--debug-flush-pause-ms", "1500"}, &port);
    auto client = Connect(port);
    ASSERT_TRUE(client);
    initial = Pull(client.get());
    // The first flush writes every shard as it started; a push made before it (a slow sanitizer
    // build) would let that checkpoint of the initial values pass for the push's. So: wait for it.
    auto first = ps->WaitFor<events::Checkpoint>();
    ASSERT_TRUE(first.has_value()) << "no first checkpoint";
    PushAll(client.get(), 1.f);  // acknowledged, then flushed completely
    std::optional<events::Checkpoint> done;
    for (size_t shards = 0; shards < map_->shards().size();) {  // every shard the push moved
      done = ps->WaitFor<events::Checkpoint>();
      ASSERT_TRUE(done.has_value()) << "no complete checkpoint";
      shards += size_t(done->shards);
    }
    PushAll(client.get(), 2.f);  // acknowledged, but its flush is interrupted
    auto writing = ps->WaitFor<events::CheckpointWriting>();
    ASSERT_TRUE(writing.has_value());
    ASSERT_GT(writing->generation, done->generation);
    ps->Signal(SIGKILL);
    ps->Wait();
    bool tmp_left = false;
    for (const auto& de : std::filesystem::recursive_directory_iterator(dir_.File("state")))
      tmp_left |= de.path().extension() == ".tmp";
    EXPECT_TRUE(tmp_left) << "the kill should have interrupted a flush";
  }
  auto ps = StartPs({}, &port);
  auto client = Connect(port);
  ASSERT_TRUE(client);
  EXPECT_EQ(Pull(client.get()), Plus(initial, 1.f));
}

TEST_F(PsPersistence, TerminateFlushesEverythingFirst) {
  int port = 0;
  std::vector<float> initial;
  {
    auto ps = StartPs({}, &port);
    auto client = Connect(port);
    ASSERT_TRUE(client);
    initial = Pull(client.get());
    PushAll(client.get(), 0.5f);
    ps->Signal(SIGTERM);  // before any interval has passed
    const int status = ps->Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  auto ps = StartPs({}, &port);
  auto client = Connect(port);
  ASSERT_TRUE(client);
  EXPECT_EQ(Pull(client.get()), Plus(initial, 0.5f));
}

TEST_F(PsPersistence, ReplicationAddressServesTheCheckpointToAPeerAndNothingElse) {
  int port = 0, repl = 0;
  auto a = StartPs({"--replication-listen", "127.0.0.2:0"}, &port, "a", &repl);
  ASSERT_GT(repl, 0);
  auto client = Connect(port);
  ASSERT_TRUE(client);
  PushAll(client.get(), 0.25f);
  ASSERT_TRUE(a->WaitFor<events::Checkpoint>().has_value());
  const std::vector<float> want = Pull(client.get());

  // Each address serves only its own service.
  {
    auto on_trainer_port = adam::v1::ReplicaService::NewStub(
        net::MakeChannel(*net::Transport::Plaintext(), "127.0.0.1:" + std::to_string(port)));
    grpc::ClientContext ctx;
    auto r = on_trainer_port->GetCheckpoint(&ctx, {});
    adam::v1::CheckpointChunk c;
    EXPECT_FALSE(r->Read(&c));
    EXPECT_EQ(r->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
    auto on_repl = adam::v1::ParameterService::NewStub(
        net::MakeChannel(*net::Transport::Plaintext(), "127.0.0.2:" + std::to_string(repl)));
    grpc::ClientContext ctx2;
    adam::v1::PullResponse resp;
    EXPECT_EQ(on_repl->Pull(&ctx2, {}, &resp).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }

  // A server with an empty volume copies the checkpoint over the replication address.
  int port_b = 0;
  auto b = StartPs({"--restore-from", "127.0.0.2:" + std::to_string(repl)}, &port_b, "b");
  auto client_b = Connect(port_b);
  ASSERT_TRUE(client_b);
  EXPECT_EQ(Pull(client_b.get()), want);
}

// Server 0 copies every flush to server 1 over the replication address; when server 0's machine
// and volume are gone, a new server 0 restores from server 1's copy.
TEST_F(PsPersistence, AServerThatLostItsVolumeRestoresFromItsCheckpointPeer) {
  std::string text = testing::ReadText(job_path_);
  text.replace(text.find("replicas: 1"), 11, "replicas: 2");
  std::ofstream(job_path_) << text;
  auto job = spec::LoadAdamJob(job_path_);
  ASSERT_TRUE(job.ok());
  auto layout = model::ModelLayout::Make(job->model);
  auto map = shard::ShardMap::Make(layout->num_params(), 1024, 2, job->training.seed);
  auto plan = update::UpdatePlan::Make(*layout, *map, job->training.push_every,
                                       job->training.dense_updates);
  auto start = [&](int index, const std::string& state, std::vector<std::string> extra, int* port,
                   int* repl) {
    std::vector<std::string> args = {
        "ps",          "--plaintext",          "--job",      job_path_,
        "--index",     std::to_string(index),  "--listen",   "127.0.0.1:0",
        "--state-dir", dir_.File(state),       "--threads",  "1",
        "--no-bind",   "--replication-listen", "127.0.0.2:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto c = std::make_unique<Child>(args, dir_.File("ps.log"));
    auto ready = c->WaitFor<events::Ready>();
    EXPECT_TRUE(ready.has_value());
    *port = ready ? ready->port : 0;
    *repl = ready ? ready->ports["replication_port"] : 0;
    return c;
  };
  int p1 = 0, r1 = 0, p0 = 0, r0 = 0;
  auto ps1 = start(1, "b", {}, &p1, &r1);
  auto ps0 = start(0, "a", {"--checkpoint-peer", "127.0.0.2:" + std::to_string(r1)}, &p0, &r0);
  auto connect = [&](int port0) {
    auto c = trainer::ConnectParamServers(
        *map, plan, {"127.0.0.1:" + std::to_string(port0), "127.0.0.1:" + std::to_string(p1)}, {});
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  };
  auto client = connect(p0);
  ASSERT_TRUE(client);
  std::vector<float> d(static_cast<size_t>(layout->num_params()), 0.75f);
  ASSERT_TRUE(client->Push({d.data(), {}, 1, false}).ok());
  auto copied = ps0->WaitFor<events::CheckpointCopied>();
  ASSERT_TRUE(copied.has_value()) << "no copy reached the peer";
  EXPECT_GT(copied->files, 0);
  // That copy may be of a flush that began before the push was applied (the shards' first values,
  // or some of the push's shards: under ASan it once held none of it). A flush writes only dirty
  // shards, so once a copy is followed by 15 quiet intervals (3 s) the peer holds everything; with
  // nothing pushed since, the copies must stop.
  int later = 0;
  while (later < 20 && ps0->WaitFor<events::CheckpointCopied>(std::chrono::seconds(3))) ++later;
  ASSERT_LT(later, 20) << "the server kept copying checkpoints with nothing pushed";
  std::vector<float> want(d.size());
  ASSERT_TRUE(client->Pull(want.data(), 0).ok());

  ps0->Signal(SIGKILL);  // machine and volume lost
  ps0->Wait();
  std::filesystem::remove_all(dir_.File("a"));
  int p0b = 0, r0b = 0;
  auto ps0b = start(0, "a-new", {"--restore-from", "127.0.0.2:" + std::to_string(r1)}, &p0b, &r0b);
  auto client2 = connect(p0b);
  ASSERT_TRUE(client2);
  std::vector<float> got(d.size());
  ASSERT_TRUE(client2->Pull(got.data(), 0).ok());
  EXPECT_EQ(got, want);
}

// On Kubernetes the replication address is the second network's: the server reads it from
// Multus's network-status annotation (the downward API's file) and listens for copies there, with
// --replication-listen's port, and not on the others; an annotation without that network fails
// the start with exit 1 naming the flag once --network-wait-ms has passed.
TEST_F(PsPersistence, ItListensForCopiesOnTheReplicationNetworksAddressOnly) {
  const std::string annotations = dir_.File("annotations");
  auto write_status = [&](const std::string& name, const std::string& ip) {
    std::ofstream(annotations) << "k8s.v1.cni.cncf.io/network-status=\"[{\\\"name\\\": \\\"" << name
                               << "\\\", \\\"interface\\\": \\\"net1\\\", \\\"ips\\\": [\\\"" << ip
                               << "\\\"]}]\"\n";
  };
  write_status("default/adam-repl", "127.0.0.3");
  int port = 0, repl = 0;
  auto ps = StartPs({"--replication-listen", "0.0.0.0:0", "--replication-network", "adam-repl",
                     "--pod-annotations", annotations},
                    &port, "state", &repl);
  ASSERT_GT(repl, 0);
  auto reachable = [&](const std::string& host, std::chrono::milliseconds wait) {
    const std::string address = host + ":" + std::to_string(repl);
    auto channel = net::MakeChannel(*net::Transport::Plaintext(), address);
    return net::WaitForReady(channel.get(), "replication", address, wait).ok();
  };
  EXPECT_TRUE(reachable("127.0.0.3", std::chrono::seconds(5)));
  EXPECT_FALSE(reachable("127.0.0.1", std::chrono::milliseconds(500)));
  ps.reset();

  write_status("default/other", "127.0.0.4");
  const std::string log = dir_.File("missing.log");
  Child missing(
      {"ps", "--plaintext", "--job", job_path_, "--index", "0", "--listen", "127.0.0.1:0",
       "--threads", "1", "--no-bind", "--replication-listen", "0.0.0.0:0", "--replication-network",
       "adam-repl", "--pod-annotations", annotations, "--network-wait-ms", "300"},
      log);
  EXPECT_FALSE(missing.WaitFor<events::Ready>(std::chrono::seconds(20)).has_value());
  const int status = missing.Wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, ::testing::HasSubstr("--replication-network adam-repl"));
  EXPECT_THAT(text, ::testing::HasSubstr("default/other"));
}

}  // namespace
}  // namespace adam
