// ParamStore and ParamService: exact sums under concurrency, all-or-nothing validation, and the
// service over real gRPC on loopback.
#include "param_server/param_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "net/grpc.h"
#include "param_server/param_service.h"
#include "trainer/ps_client.h"

namespace adam::ps {
namespace {

using ::testing::HasSubstr;

TEST(ParamStore, HoldsOnlyItsShardsWithInitialValues) {
  auto map = shard::ShardMap::Make(1000, 400, 2, 3);
  ASSERT_TRUE(map.ok());
  std::vector<float> init(1000);
  for (size_t i = 0; i < init.size(); ++i) init[i] = float(i);
  ParamStore s0(*map, 0, init.data()), s1(*map, 1, init.data());
  EXPECT_EQ(s0.total_floats() + s1.total_floats(), 1000);
  for (const auto& sh : map->shards()) {
    ParamStore& mine = sh.server == 0 ? s0 : s1;
    ParamStore& other = sh.server == 0 ? s1 : s0;
    std::vector<float> out(size_t(sh.count));
    ASSERT_TRUE(mine.Read(sh.id, out.data(), sh.count).ok());
    EXPECT_EQ(out[0], float(sh.offset));
    EXPECT_EQ(other.Read(sh.id, out.data(), sh.count).status().code(), StatusCode::kNotFound);
  }
}

TEST(ParamStore, ConcurrentPushesSumExactly) {
  auto map = shard::ShardMap::Make(4096, 4096, 1, 1);  // 4 shards of 1024 floats
  ASSERT_TRUE(map.ok());
  std::vector<float> zeros(4096, 0.f);
  ParamStore store(*map, 0, zeros.data());
  constexpr int kThreads = 8, kPushes = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<float> delta(1024, 1.f);
      for (int i = 0; i < kPushes; ++i)
        ASSERT_TRUE(store.Add(uint32_t((t + i) % 4), delta.data(), 1024).ok());
    });
  for (auto& th : threads) th.join();
  double total = 0;
  uint64_t versions = 0;
  for (uint32_t id = 0; id < 4; ++id) {
    std::vector<float> out(1024);
    auto v = store.Read(id, out.data(), 1024);
    ASSERT_TRUE(v.ok());
    versions += *v;
    for (float x : out) total += x;
    for (float x : out) EXPECT_EQ(x, out[0]);  // every element of a shard got every push
  }
  EXPECT_EQ(versions, uint64_t(kThreads * kPushes));
  EXPECT_EQ(total, double(kThreads) * kPushes * 1024);
}

TEST(ParamStore, RejectsWrongSize) {
  auto map = shard::ShardMap::Make(100, 400, 1, 1);
  ASSERT_TRUE(map.ok());
  std::vector<float> init(100, 0.f), delta(99, 1.f);
  ParamStore store(*map, 0, init.data());
  Status st = store.Add(0, delta.data(), 99);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("shard 0: delta has 99 floats, shard has 100"));
}

class ParamServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto map = shard::ShardMap::Make(3000, 4000, 1, 1);  // shard 0: 1000 floats, 1: 1000, 2: 1000
    ASSERT_TRUE(map.ok());
    map_ = *map;
    std::vector<float> init(3000, 1.f);
    store_ = std::make_unique<ParamStore>(*map_, 0, init.data());
    service_ = std::make_unique<ParamService>(store_.get(), ParamServiceMetrics{});
    auto server = net::StartServer("127.0.0.1:0", {service_.get()});
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    address_ = "127.0.0.1:" + std::to_string(server_.port);
    stub_ = adam::v1::ParameterService::NewStub(net::MakeChannel(address_));
  }
  void TearDown() override { server_.server->Shutdown(); }

  std::optional<shard::ShardMap> map_;
  std::unique_ptr<ParamStore> store_;
  std::unique_ptr<ParamService> service_;
  net::Server server_;
  std::string address_;
  std::unique_ptr<adam::v1::ParameterService::Stub> stub_;
};

TEST_F(ParamServiceTest, ClientPushThenPullSeesTheSum) {
  auto client = trainer::ConnectParamServers(*map_, {address_}, {});
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<float> delta(3000), out(3000);
  for (size_t i = 0; i < delta.size(); ++i) delta[i] = float(i % 7);
  ASSERT_TRUE((*client)->Push(delta.data()).ok());
  ASSERT_TRUE((*client)->Push(delta.data()).ok());
  ASSERT_TRUE((*client)->Pull(out.data()).ok());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 1.f + 2 * float(i % 7)) << i;
  EXPECT_EQ((*client)->pushed_bytes(), 2u * 3000 * 4);
  EXPECT_EQ((*client)->pulled_bytes(), 3000u * 4);
}

TEST_F(ParamServiceTest, GarbageRequestAppliesNothingAndServerKeepsServing) {
  adam::v1::PushRequest req;
  auto* good = req.add_deltas();
  good->set_shard(0);
  good->set_values(std::string(4000, '\0'));
  auto* bad = req.add_deltas();
  bad->set_shard(1);
  bad->set_values("abc");  // not whole floats
  adam::v1::PushResponse resp;
  grpc::ClientContext ctx;
  grpc::Status st = stub_->Push(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("shard 1: values has 3 bytes"));

  adam::v1::PushRequest unknown;
  unknown.add_deltas()->set_shard(77);
  grpc::ClientContext ctx2;
  EXPECT_EQ(stub_->Push(&ctx2, unknown, &resp).error_code(), grpc::StatusCode::NOT_FOUND);

  adam::v1::PullRequest repeated;
  for (int i = 0; i < 100000; ++i) repeated.add_shards(0);
  adam::v1::PullResponse huge;
  grpc::ClientContext ctx4;
  grpc::Status rs = stub_->Pull(&ctx4, repeated, &huge);
  EXPECT_EQ(rs.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(rs.error_message(), HasSubstr("shard 0 is requested more than once"));
  EXPECT_EQ(huge.shards_size(), 0);

  // Nothing was applied, and pulls still work.
  adam::v1::PullRequest pull;
  adam::v1::PullResponse pulled;
  grpc::ClientContext ctx3;
  ASSERT_TRUE(stub_->Pull(&ctx3, pull, &pulled).ok());
  ASSERT_EQ(pulled.shards_size(), 3);
  for (const auto& s : pulled.shards()) {
    EXPECT_EQ(s.version(), 0u);
    const float* v = reinterpret_cast<const float*>(s.values().data());
    EXPECT_EQ(v[0], 1.f);
  }
}

TEST(ParamServiceClient, UnreachableServerIsAClearError) {
  auto map = shard::ShardMap::Make(10, 40, 1, 1);
  ASSERT_TRUE(map.ok());
  trainer::GrpcParamServerClientOptions o;
  o.connect_timeout = std::chrono::milliseconds(300);
  auto client = trainer::ConnectParamServers(*map, {"127.0.0.1:1"}, o);
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.status().message(), HasSubstr("cannot reach parameter server ps-0 at 127.0.0.1:1"));
}

TEST(NetServer, PortInUseIsAClearError) {
  auto map = shard::ShardMap::Make(10, 40, 1, 1);
  ASSERT_TRUE(map.ok());
  std::vector<float> init(10, 0.f);
  ParamStore store(*map, 0, init.data());
  ParamService a(&store, {}), b(&store, {});
  auto first = net::StartServer("127.0.0.1:0", {&a});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string addr = "127.0.0.1:" + std::to_string(first->port);
  auto second = net::StartServer(addr, {&b});
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("cannot listen on " + addr));
  first->server->Shutdown();
}

}  // namespace
}  // namespace adam::ps
