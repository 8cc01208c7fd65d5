// ParamStore, ParamService and ClockGate: exact sums under concurrency, batched and dense
// application against plain loops, all-or-nothing validation, the consistency models, and the
// service over real gRPC on loopback.
#include "param_server/param_store.h"

#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <random>
#include <thread>

#include "model/layout.h"
#include "net/grpc.h"
#include "param_server/clock_gate.h"
#include "param_server/param_service.h"
#include "trainer/ps_client.h"
#include "update/update_plan.h"

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

TEST(ParamStore, SetReplacesAShardAndItsVersionAfterEarlierUpdates) {
  auto map = shard::ShardMap::Make(100, 400, 1, 3);
  std::vector<float> init(100, 1.0f), delta(100, 2.0f), copy(100, 7.0f), out(100);
  ParamStore s(*map, 0, init.data());
  ASSERT_TRUE(s.Add(0, delta.data(), 100).ok());
  ShardMeta meta;
  meta.version = 42;
  auto set = s.SetState(0, copy.data(), 100, meta);
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(*set, SetResult::kApplied);
  EXPECT_EQ(s.Version(0), 42u);
  ASSERT_TRUE(s.Add(0, delta.data(), 100).ok());
  auto v = s.Read(0, out.data(), 100);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 43u);
  EXPECT_EQ(out[99], 9.0f);
  EXPECT_FALSE(s.SetState(0, copy.data(), 99, meta).ok());  // whole shards only
}

TEST(ParamStore, ConcurrentPushesSumExactly) {
  auto map = shard::ShardMap::Make(4096, 4096, 1, 1);  // 4 shards of 1024 floats
  ASSERT_TRUE(map.ok());
  std::vector<float> zeros(4096, 0.f);
  ParamStore store(*map, 0, zeros.data(), {.threads = 2});
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

TEST(ParamStore, BatchedRangesMatchAPlainLoopAndReadsSeeEarlierUpdates) {
  // 20,000 floats in 3 shards (8192 + 8192 + 3616): ranges cross 16 KiB block edges.
  auto map = shard::ShardMap::Make(20000, 8192 * 4, 1, 1);
  ASSERT_TRUE(map.ok());
  std::vector<float> init(20000);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : init) x = u(rng);
  ParamStore store(*map, 0, init.data(), {.threads = 2});
  std::vector<float> want = init;
  // Many queued updates at once (so workers drain batches), then a read of each shard.
  std::vector<std::vector<float>> payloads;
  std::vector<Op> ops;
  for (int i = 0; i < 300; ++i) {
    const auto& sh = map->shards()[size_t(i % 3)];
    const int64_t off = int64_t(rng() % uint64_t(sh.count));
    const int64_t cnt = 1 + int64_t(rng() % uint64_t(sh.count - off));
    payloads.emplace_back(size_t(cnt));
    for (auto& x : payloads.back()) x = u(rng);
    for (int64_t k = 0; k < cnt; ++k)
      want[size_t(sh.offset + off + k)] += payloads.back()[size_t(k)];
    Op op;
    op.shard = sh.id;
    op.offset = off;
    op.count = cnt;
    ASSERT_TRUE(store.CheckRange(sh.id, off, cnt).ok());
    ops.push_back(op);
  }
  std::promise<void> applied;
  Completion done(int(ops.size()), [&] { applied.set_value(); });
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i].values = payloads[i].data();
    ops[i].done = &done;
  }
  store.Submit(ops.data(), ops.size());
  // A read queued right after sees every update queued before it, without waiting first.
  std::vector<float> out(8192);
  auto v = store.Read(0, out.data(), 8192);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 100u);
  applied.get_future().wait();
  for (const auto& sh : map->shards()) {
    std::vector<float> got(size_t(sh.count));
    ASSERT_TRUE(store.Read(sh.id, got.data(), sh.count).ok());
    for (int64_t k = 0; k < sh.count; ++k)
      ASSERT_NEAR(got[size_t(k)], want[size_t(sh.offset + k)], 1e-4) << sh.id << " " << k;
  }
}

TEST(ParamStore, RejectsRangesOutsideTheShard) {
  auto map = shard::ShardMap::Make(100, 400, 1, 1);
  ASSERT_TRUE(map.ok());
  std::vector<float> init(100, 0.f), delta(99, 1.f);
  ParamStore store(*map, 0, init.data());
  Status st = store.Add(0, delta.data(), 99);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("shard 0: delta has 99 floats, shard has 100"));
  st = store.CheckRange(0, 90, 11);
  EXPECT_THAT(st.message(), HasSubstr("shard 0: floats [90, 101) are outside the shard's 100"));
  EXPECT_EQ(store.CheckRange(3, 0, 1).code(), StatusCode::kNotFound);
  EXPECT_TRUE(store.CheckRange(0, 90, 10).ok());
}

TEST(ApplyDense, MatchesTheOuterProductOnAShardCutMidRow) {
  // A 5 x 7 layer at offset 3, bias at 38; the shard covers [10, 40): rows 1..4 (row 1 partial)
  // and the bias of units 0 and 1.
  update::DenseLayer L{0, 7, 5, 3, 38};
  const int images = 3;
  std::vector<int32_t> rows = {0, 1, 2, 3, 4};
  std::vector<float> a(images * 7), e(images * 5);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : a) x = u(rng);
  for (auto& x : e) x = u(rng);
  std::vector<float> model(50);
  for (auto& x : model) x = u(rng);
  std::vector<float> want = model;
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 7; ++c)
      for (int k = 0; k < images; ++k)
        want[size_t(3 + r * 7 + c)] += e[size_t(k * 5 + r)] * a[size_t(k * 7 + c)];
  for (int r = 0; r < 5; ++r)
    for (int k = 0; k < images; ++k) want[size_t(38 + r)] += e[size_t(k * 5 + r)];
  std::vector<float> shard(model.begin() + 10, model.begin() + 40);
  ApplyDense(shard.data(), 10, 30, {&L, rows.data(), 5, images, a.data(), e.data()});
  for (int i = 0; i < 30; ++i) EXPECT_NEAR(shard[size_t(i)], want[size_t(10 + i)], 1e-5) << i;
}

// A small dense model: 1x4x4 input, dense 6, softmax 3 (6*16+6 + 3*6+3 = 123 parameters).
model::ModelLayout SmallDenseModel() {
  spec::ModelSpec m;
  m.input = {1, 4, 4};
  spec::LayerSpec d;
  d.type = spec::LayerType::kDense;
  d.units = 6;
  spec::LayerSpec s;
  s.type = spec::LayerType::kSoftmax;
  s.classes = 3;
  m.layers = {d, s};
  auto layout = model::ModelLayout::Make(m);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  return *layout;
}

class ParamServiceTest : public ::testing::Test {
 protected:
  // Two servers over shards of 40 floats; updates of dense layers as activations.
  void Start(spec::Consistency mode, int trainers, int staleness = 0) {
    layout_.emplace(SmallDenseModel());
    auto map = shard::ShardMap::Make(layout_->num_params(), 160, 2, 7);
    ASSERT_TRUE(map.ok());
    map_ = *map;
    plan_.emplace(update::UpdatePlan::Make(*layout_, *map_, 4, spec::DenseUpdates::kActivations));
    init_.resize(size_t(layout_->num_params()));
    for (size_t i = 0; i < init_.size(); ++i) init_[i] = float(i % 5);
    for (int s = 0; s < 2; ++s) {
      auto& srv = servers_[size_t(s)];
      srv.store = std::make_unique<ParamStore>(*map_, s, init_.data());
      srv.gate = std::make_unique<ClockGate>(trainers, mode, staleness);
      srv.service = std::make_unique<ParamService>(srv.store.get(), srv.gate.get(), &*plan_, s,
                                                   &pool_, ParamServiceMetrics{});
      auto server = net::StartServer("127.0.0.1:0", {srv.service.get()});
      ASSERT_TRUE(server.ok()) << server.status().ToString();
      srv.server = std::move(*server);
      addresses_.push_back("127.0.0.1:" + std::to_string(srv.server.port));
    }
    stub_ = adam::v1::ParameterService::NewStub(net::MakeChannel(addresses_[0]));
  }
  void TearDown() override {
    for (auto& s : servers_)
      if (s.server.server) {
        s.gate->Close();
        s.server.server->Shutdown();
      }
  }
  std::unique_ptr<trainer::ParamServerClient> Client(int index) {
    trainer::GrpcParamServerClientOptions o;
    o.trainer_index = index;
    auto c = trainer::ConnectParamServers(*map_, *plan_, addresses_, o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  struct Server {
    std::unique_ptr<ParamStore> store;
    std::unique_ptr<ClockGate> gate;
    std::unique_ptr<ParamService> service;
    net::Server server;
  };
  std::optional<model::ModelLayout> layout_;
  std::optional<shard::ShardMap> map_;
  std::optional<update::UpdatePlan> plan_;
  BufferPool pool_;
  std::vector<float> init_;
  std::array<Server, 2> servers_;
  std::vector<std::string> addresses_;
  std::unique_ptr<adam::v1::ParameterService::Stub> stub_;
};

TEST_F(ParamServiceTest, BothProtocolsThroughTheClientGiveTheExpectedWeights) {
  Start(spec::Consistency::kAsync, 1);
  ASSERT_EQ(plan_->dense().size(), 2u);  // kActivations: every dense layer
  auto client = Client(0);
  ASSERT_TRUE(client);
  const int64_t n = layout_->num_params();
  std::vector<float> delta(static_cast<size_t>(n)), want = init_;
  for (int64_t i = 0; i < n; ++i) delta[size_t(i)] = float(i % 3) - 1.f;
  // Dense updates for both layers: 2 images each.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<std::vector<float>> acts, errs;
  trainer::PushArgs args;
  args.delta = delta.data();
  args.clock = 1;
  for (const auto& d : plan_->dense()) {
    acts.emplace_back(size_t(2 * d.in));
    errs.emplace_back(size_t(2 * d.units));
    for (auto& x : acts.back()) x = u(rng);
    for (auto& x : errs.back()) x = u(rng);
    for (int64_t r = 0; r < d.units; ++r) {
      for (int64_t c = 0; c < d.in; ++c)
        for (int k = 0; k < 2; ++k)
          want[size_t(d.weights + r * d.in + c)] +=
              errs.back()[size_t(k * d.units + r)] * acts.back()[size_t(k * d.in + c)];
      for (int k = 0; k < 2; ++k) want[size_t(d.bias + r)] += errs.back()[size_t(k * d.units + r)];
    }
    args.dense.push_back({d.layer, 2, acts.back().data(), errs.back().data()});
  }
  // This model has only dense layers: the weight-delta part sends nothing.
  Status pushed = client->Push(args);
  ASSERT_TRUE(pushed.ok()) << pushed.ToString();
  EXPECT_EQ(client->pushed_bytes(), 0u);
  EXPECT_GT(client->dense_bytes(), 0u);
  std::vector<float> out(static_cast<size_t>(n));
  ASSERT_TRUE(client->Pull(out.data(), 1).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(out[size_t(i)], want[size_t(i)], 1e-4) << i;

  // Under denseUpdates: weights the same client sends the deltas instead.
  update::UpdatePlan weights =
      update::UpdatePlan::Make(*layout_, *map_, 4, spec::DenseUpdates::kWeights);
  EXPECT_TRUE(weights.dense().empty());
  int64_t covered = 0;
  for (int s = 0; s < 2; ++s)
    for (const auto& r : weights.DeltaRanges(s)) covered += r.count;
  EXPECT_EQ(covered, n);
}

// A push's clock carries the epochs its trainer finished (high 32 bits): each server keeps the
// most any acknowledged push said, and a pull reports the least of its servers' counts.
TEST_F(ParamServiceTest, PullsReportTheEpochsFinishedThatEveryServerHolds) {
  Start(spec::Consistency::kAsync, 2);
  auto t0 = Client(0), t1 = Client(1);
  ASSERT_TRUE(t0 && t1);
  std::vector<float> out(size_t(layout_->num_params()));
  ASSERT_TRUE(t0->Pull(out.data(), 0).ok());
  EXPECT_EQ(t0->epochs(), 0u);
  trainer::PushArgs args;
  args.clock = (uint64_t{3} << 32) | 7;  // epoch 3, push 7
  ASSERT_TRUE(t1->Push(args).ok());
  args.clock = (uint64_t{1} << 32) | 2;  // a trainer behind does not lower it
  ASSERT_TRUE(t0->Push(args).ok());
  ASSERT_TRUE(t0->Pull(out.data(), 0).ok());
  EXPECT_EQ(t0->epochs(), 3u);
  EXPECT_EQ(servers_[0].store->epochs(), 3u);
  EXPECT_EQ(servers_[1].store->epochs(), 3u);
  servers_[1].store->RaiseEpochs(5);  // e.g. restored from a newer checkpoint
  ASSERT_TRUE(t0->Pull(out.data(), 0).ok());
  EXPECT_EQ(t0->epochs(), 3u);  // the least
  servers_[0].store->RaiseEpochs(6);
  ASSERT_TRUE(t0->Pull(out.data(), 0).ok());
  EXPECT_EQ(t0->epochs(), 5u);
}

// Without copies a server that goes away and comes back on its address (restarted from its
// checkpoint) is waited for: the call is answered once it is back. One that stays away fails the
// call after server_wait, naming it.
TEST_F(ParamServiceTest, TheClientWaitsForAServerThatComesBackAndNamesOneThatDoesNot) {
  Start(spec::Consistency::kAsync, 1);
  trainer::GrpcParamServerClientOptions o;
  o.server_wait = std::chrono::milliseconds(1500);
  auto client = trainer::ConnectParamServers(*map_, *plan_, addresses_, o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  Server& srv = servers_[1];
  const int port = srv.server.port;
  auto stop = [&] {
    srv.server.server->Shutdown();
    srv.server.server.reset();
  };
  stop();
  std::thread back([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    srv.service = std::make_unique<ParamService>(srv.store.get(), srv.gate.get(), &*plan_, 1,
                                                 &pool_, ParamServiceMetrics{});
    auto again = net::StartServer("127.0.0.1:" + std::to_string(port), {srv.service.get()});
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    srv.server = std::move(*again);
  });
  std::vector<float> out(init_.size(), -1.f);
  const auto t0 = std::chrono::steady_clock::now();
  Status pulled = (*client)->Pull(out.data(), 0);
  back.join();
  ASSERT_TRUE(pulled.ok()) << pulled.ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(350));
  EXPECT_EQ(out, init_);  // every shard, those of the server that came back included

  stop();
  Status pushed = (*client)->Push({nullptr, {}, 1, false});
  ASSERT_FALSE(pushed.ok());
  EXPECT_EQ(pushed.code(), StatusCode::kUnavailable);
  EXPECT_THAT(pushed.message(), HasSubstr("push to parameter server ps-1 at " + addresses_[1] +
                                          ": not back within 1.5 s"));
}

// A sync pull that another trainer never lets through fails before the caller's deadline naming
// that trainer, not with a bare "Deadline Exceeded".
TEST_F(ParamServiceTest, ASyncPullHeldBackByAStoppedTrainerNamesIt) {
  Start(spec::Consistency::kSync, 2);
  trainer::GrpcParamServerClientOptions o;
  o.trainer_index = 0;
  o.rpc_timeout = std::chrono::milliseconds(1500);
  auto t0 = trainer::ConnectParamServers(*map_, *plan_, addresses_, o);
  ASSERT_TRUE(t0.ok()) << t0.status().ToString();
  ASSERT_TRUE((*t0)->Push({nullptr, {}, 1, false}).ok());
  std::vector<float> out(init_.size());
  Status pulled = (*t0)->Pull(out.data(), 1);
  ASSERT_FALSE(pulled.ok());
  EXPECT_EQ(pulled.code(), StatusCode::kDeadlineExceeded) << pulled.ToString();
  EXPECT_THAT(pulled.message(),
              HasSubstr("waiting for trainer 1 (at epoch 0 push 0; epoch 0 push 1 needed)"));
}

TEST_F(ParamServiceTest, GarbageRequestAppliesNothingAndServerKeepsServing) {
  Start(spec::Consistency::kAsync, 1);
  const uint32_t held = servers_[0].store->shard_ids()[0];
  adam::v1::PushRequest req;
  auto* good = req.add_deltas();
  good->set_shard(held);
  good->set_values(std::string(8, '\1'));
  auto* bad = req.add_deltas();
  bad->set_shard(held);
  bad->set_values("abc");  // not whole floats
  adam::v1::PushResponse resp;
  grpc::ClientContext ctx;
  grpc::Status st = stub_->Push(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("deltas[1] (shard " + std::to_string(held) + "): values has 3 bytes"));

  adam::v1::PushRequest outside;
  auto* o = outside.add_deltas();
  o->set_shard(held);
  o->set_offset(38);
  o->set_values(std::string(12, '\0'));
  grpc::ClientContext ctx1;
  st = stub_->Push(&ctx1, outside, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("are outside the shard's"));

  adam::v1::PushRequest unknown;
  unknown.add_deltas()->set_shard(77);
  grpc::ClientContext ctx2;
  EXPECT_EQ(stub_->Push(&ctx2, unknown, &resp).error_code(), grpc::StatusCode::NOT_FOUND);

  adam::v1::PushRequest dense;
  auto* du = dense.add_dense();
  du->set_layer(0);
  du->set_images(2);
  du->set_activations(std::string(7, '\0'));
  grpc::ClientContext ctx5;
  st = stub_->Push(&ctx5, dense, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("dense[0] (layer 0): activations and errors must be"));
  du->set_layer(5);
  grpc::ClientContext ctx6;
  EXPECT_THAT(stub_->Push(&ctx6, dense, &resp).error_message(),
              HasSubstr("not a layer whose updates"));

  adam::v1::PushRequest stranger;
  stranger.set_trainer_index(9);
  grpc::ClientContext ctx7;
  EXPECT_THAT(stub_->Push(&ctx7, stranger, &resp).error_message(),
              HasSubstr("trainer_index 9 is not below the job's 1 trainers"));

  adam::v1::PullRequest repeated;
  for (int i = 0; i < 100000; ++i) repeated.add_shards(held);
  adam::v1::PullResponse huge;
  grpc::ClientContext ctx4;
  grpc::Status rs = stub_->Pull(&ctx4, repeated, &huge);
  EXPECT_EQ(rs.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(rs.error_message(), HasSubstr("is requested more than once"));
  EXPECT_EQ(huge.shards_size(), 0);

  // Nothing was applied, and pulls still work.
  adam::v1::PullRequest pull;
  adam::v1::PullResponse pulled;
  grpc::ClientContext ctx3;
  ASSERT_TRUE(stub_->Pull(&ctx3, pull, &pulled).ok());
  ASSERT_EQ(size_t(pulled.shards_size()), servers_[0].store->shard_ids().size());
  for (const auto& s : pulled.shards()) {
    EXPECT_EQ(s.version(), 0u);
    const float* v = reinterpret_cast<const float*>(s.values().data());
    EXPECT_EQ(v[0], init_[size_t(map_->shards()[s.shard()].offset)]);
  }
}

// A message over the project's limit is refused by gRPC with RESOURCE_EXHAUSTED before anything
// parses it, and the server keeps serving.
TEST_F(ParamServiceTest, OversizedMessageIsRefusedAndTheServerKeepsServing) {
  Start(spec::Consistency::kAsync, 1);
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);  // this client would send anything
  grpc::GenericStub generic(
      grpc::CreateCustomChannel(addresses_[0], grpc::InsecureChannelCredentials(), args));
  grpc::ByteBuffer request, reply;
  {
    std::string payload(size_t(net::kMaxMessageBytes) + 16, '\0');
    grpc::Slice slice(payload);
    request = grpc::ByteBuffer(&slice, 1);
  }
  std::promise<grpc::Status> done;
  grpc::ClientContext ctx;
  generic.UnaryCall(&ctx, "/adam.v1.ParameterService/Push", grpc::StubOptions(), &request, &reply,
                    [&](grpc::Status s) { done.set_value(s); });
  const grpc::Status st = done.get_future().get();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  request.Clear();
  adam::v1::PullRequest pull;
  adam::v1::PullResponse pulled;
  grpc::ClientContext ctx2;
  EXPECT_TRUE(stub_->Pull(&ctx2, pull, &pulled).ok());
  EXPECT_EQ(size_t(pulled.shards_size()), servers_[0].store->shard_ids().size());
}

// Starts a pull on its own thread; the future is ready once it returns.
std::future<Status> PullAsync(trainer::ParamServerClient* c, std::vector<float>* out,
                              uint64_t clock) {
  return std::async(std::launch::async, [=] { return c->Pull(out->data(), clock); });
}

bool Waits(std::future<Status>& f) {
  return f.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout;
}

TEST_F(ParamServiceTest, SyncPullWaitsForEveryTrainersPushOfThatStep) {
  Start(spec::Consistency::kSync, 2);
  auto t0 = Client(0), t1 = Client(1);
  const int64_t n = layout_->num_params();
  std::vector<float> out(static_cast<size_t>(n));
  // Weight deltas only (a plan with no dense layers for this test's pushes).
  trainer::PushArgs a0{nullptr, {}, 1, false};
  std::vector<float> act(16, 1.f), err(6, 0.5f);
  a0.dense.push_back({0, 1, act.data(), err.data()});  // trainer 0's step-1 update
  ASSERT_TRUE(t0->Push(a0).ok());
  auto pull = PullAsync(t0.get(), &out, 1);
  EXPECT_TRUE(Waits(pull)) << "a sync pull must wait for trainer 1's step 1";
  std::vector<float> err1(6, 0.25f);
  trainer::PushArgs a1{nullptr, {{0, 1, act.data(), err1.data()}}, 1, false};
  ASSERT_TRUE(t1->Push(a1).ok());
  ASSERT_EQ(pull.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_TRUE(pull.get().ok());
  // Both step-1 updates are in: weight (0,0) grew by 0.5 + 0.25.
  const auto& L = plan_->dense()[0];
  EXPECT_NEAR(out[size_t(L.weights)], init_[size_t(L.weights)] + 0.75f, 1e-5);
  // A trainer that leaves no longer holds anyone back.
  trainer::PushArgs step2{nullptr, {}, 2, false};
  ASSERT_TRUE(t0->Push(step2).ok());
  auto pull2 = PullAsync(t0.get(), &out, 2);
  EXPECT_TRUE(Waits(pull2));
  trainer::PushArgs leave{nullptr, {}, 1, true};
  ASSERT_TRUE(t1->Push(leave).ok());
  ASSERT_EQ(pull2.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(pull2.get().ok());
}

TEST_F(ParamServiceTest, BoundedLetsATrainerRunAheadByMaxStalenessOnly) {
  Start(spec::Consistency::kBounded, 2, /*staleness=*/2);
  auto t0 = Client(0);
  std::vector<float> out(static_cast<size_t>(layout_->num_params()));
  for (uint64_t c = 1; c <= 2; ++c) {  // trainer 1 is still at 0: two steps ahead are allowed
    ASSERT_TRUE(t0->Push({nullptr, {}, c, false}).ok());
    auto p = PullAsync(t0.get(), &out, c);
    ASSERT_EQ(p.wait_for(std::chrono::seconds(10)), std::future_status::ready) << c;
    EXPECT_TRUE(p.get().ok());
  }
  ASSERT_TRUE(t0->Push({nullptr, {}, 3, false}).ok());
  auto p3 = PullAsync(t0.get(), &out, 3);
  EXPECT_TRUE(Waits(p3)) << "three steps ahead of the slowest must wait";
  auto t1 = Client(1);
  ASSERT_TRUE(t1->Push({nullptr, {}, 1, false}).ok());
  ASSERT_EQ(p3.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(p3.get().ok());
}

TEST_F(ParamServiceTest, AsyncNeverWaits) {
  Start(spec::Consistency::kAsync, 2);
  auto t0 = Client(0);
  std::vector<float> out(static_cast<size_t>(layout_->num_params()));
  ASSERT_TRUE(t0->Push({nullptr, {}, 50, false}).ok());
  auto p = PullAsync(t0.get(), &out, 50);
  ASSERT_EQ(p.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(p.get().ok());
}

TEST(ClockGate, ModesParkAndReleaseExactlyAtTheirBound) {
  std::vector<std::pair<int, bool>> ran;
  auto rec = [&](int id) { return [&ran, id](bool ok) { ran.push_back({id, ok}); }; };
  ClockGate sync(3, spec::Consistency::kSync, 0);
  sync.WhenAllowed(0, rec(0));
  EXPECT_EQ(ran.size(), 1u);  // clock 0: nothing to wait for
  sync.Advance(0, 1, false);
  sync.WhenAllowed(1, rec(1));
  sync.Advance(1, 1, false);
  EXPECT_EQ(ran.size(), 1u);
  EXPECT_EQ(sync.parked(), 1u);
  sync.Advance(2, 1, false);
  ASSERT_EQ(ran.size(), 2u);
  EXPECT_EQ(ran[1], std::make_pair(1, true));
  sync.Advance(1, 0, false);  // clocks never go back
  EXPECT_EQ(sync.MinClock(), 1u);
  sync.WhenAllowed(5, rec(5));
  sync.Close();
  EXPECT_EQ(ran.back(), std::make_pair(5, false));

  ClockGate bounded(2, spec::Consistency::kBounded, 3);
  EXPECT_EQ(bounded.Needed(2), 0u);
  EXPECT_EQ(bounded.Needed(10), 7u);
  ClockGate async(2, spec::Consistency::kAsync, 0);
  EXPECT_EQ(async.Needed(1000), 0u);
  async.Advance(0, 9, false);
  EXPECT_EQ(async.Spread(), 9u);
  async.Advance(1, 4, true);  // left: only trainer 0 counts
  EXPECT_EQ(async.MinClock(), 9u);
  EXPECT_EQ(async.Spread(), 0u);
}

// A pull parked with an expiry that nothing releases in time is answered by the gate's timer
// with the trainers it waited for; one released in time runs as always; Close answers the rest.
TEST(ClockGate, AnExpiredPullNamesTheTrainersItWaitedFor) {
  ClockGate gate(3, spec::Consistency::kSync, 0);
  gate.Advance(0, 3, false);
  gate.Advance(1, 1, false);
  gate.Advance(2, 2, true);  // left: holds nobody back
  EXPECT_EQ(gate.WaitingFor(3), "trainer 1 (at epoch 0 push 1; epoch 0 push 3 needed)");
  std::promise<std::string> expired;
  std::atomic<int> ran{0};
  gate.WhenAllowed(
      3, [&](bool) { ++ran; }, ClockGate::Clock::now() + std::chrono::milliseconds(100),
      [&](const std::string& why) { expired.set_value(why); });
  std::atomic<int> allowed1{-1}, allowed2{-1};  // -1: not run; else the bool it ran with
  gate.WhenAllowed(
      1, [&](bool ok) { allowed1 = ok; }, ClockGate::Clock::now() + std::chrono::seconds(30),
      [&](const std::string&) { ++ran; });
  EXPECT_EQ(allowed1.load(), 1);  // clock 1 is allowed at once
  gate.WhenAllowed(
      2, [&](bool ok) { allowed2 = ok; }, ClockGate::Clock::now() + std::chrono::seconds(30),
      [&](const std::string&) { ++ran; });
  auto f = expired.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(), "trainer 1 (at epoch 0 push 1; epoch 0 push 3 needed)");
  EXPECT_EQ(gate.parked(), 1u);  // the clock-2 pull waits on
  gate.Advance(1, 2, false);
  EXPECT_EQ(gate.parked(), 0u);
  EXPECT_EQ(allowed2.load(), 1);  // it ran allowed, not expired or closed
  EXPECT_EQ(ran.load(), 0);
}

// Project Adam's MNIST model: two conv + pool layers, two dense layers of 400, softmax.
spec::ModelSpec AdamsModel() {
  spec::ModelSpec m;
  m.input = {1, 28, 28};
  auto layer = [](spec::LayerType t, int a, int b = 0) {
    spec::LayerSpec l;
    l.type = t;
    if (t == spec::LayerType::kConv) l.maps = a, l.kernel = b;
    if (t == spec::LayerType::kMaxPool) l.size = a;
    if (t == spec::LayerType::kDense) l.units = a;
    if (t == spec::LayerType::kSoftmax) l.classes = a;
    return l;
  };
  m.layers = {layer(spec::LayerType::kConv, 10, 5), layer(spec::LayerType::kMaxPool, 2),
              layer(spec::LayerType::kConv, 20, 5), layer(spec::LayerType::kMaxPool, 2),
              layer(spec::LayerType::kDense, 400),  layer(spec::LayerType::kDense, 400),
              layer(spec::LayerType::kSoftmax, 10)};
  return m;
}

// Trainers, servers and controller members each call DeriveJobLayout: the same job gives the same
// map and plan every time, dense layers go as activations only while no controller routes
// shards, and a model that cannot be laid out is refused naming the layer.
TEST(UpdatePlan, EveryRoleDerivesTheSameLayoutMapAndPlanFromTheJob) {
  spec::AdamJob job;
  job.model = AdamsModel();
  job.training.seed = 7;
  job.training.push_every = 100;
  job.training.dense_updates = spec::DenseUpdates::kAuto;
  job.roles.parameter_server.replicas = 3;
  job.roles.parameter_server.shard_bytes = 1 << 18;
  job.roles.parameter_server.copies = 1;
  auto a = update::DeriveJobLayout(job);
  auto b = update::DeriveJobLayout(job);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  EXPECT_EQ(a->layout.num_params(), b->layout.num_params());
  ASSERT_EQ(a->map.shards().size(), b->map.shards().size());
  EXPECT_EQ(a->map.num_servers(), 3);
  for (size_t i = 0; i < a->map.shards().size(); ++i) {
    EXPECT_EQ(a->map.shards()[i].offset, b->map.shards()[i].offset);
    EXPECT_EQ(a->map.shards()[i].count, b->map.shards()[i].count);
    EXPECT_EQ(a->map.shards()[i].server, b->map.shards()[i].server);
  }
  ASSERT_EQ(a->plan.dense().size(), 2u);  // auto: the two 400-unit layers
  ASSERT_EQ(b->plan.dense().size(), 2u);
  EXPECT_EQ(a->plan.dense()[1].layer, b->plan.dense()[1].layer);
  // A controller routes shards: weights only, told or implied by copies.
  auto routed = update::DeriveJobLayout(job, /*routed=*/true);
  ASSERT_TRUE(routed.ok());
  EXPECT_TRUE(routed->plan.dense().empty());
  job.roles.parameter_server.copies = 2;
  auto copies = update::DeriveJobLayout(job);
  ASSERT_TRUE(copies.ok());
  EXPECT_TRUE(copies->plan.dense().empty());
  // The seed places the shards: another seed, another map of the same sizes.
  job.training.seed = 8;
  auto other = update::DeriveJobLayout(job);
  ASSERT_TRUE(other.ok());
  bool moved = false;
  for (size_t i = 0; i < a->map.shards().size(); ++i)
    moved |= other->map.shards()[i].server != a->map.shards()[i].server;
  EXPECT_TRUE(moved);
  job.model.layers[0].kernel = 40;  // larger than the 28x28 input
  auto bad = update::DeriveJobLayout(job);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("layers[0]"), std::string::npos) << bad.status().message();
}

TEST(UpdatePlan, AdamsModelSendsActivationsForTheBigDenseLayersOnly) {
  auto layout = model::ModelLayout::Make(AdamsModel());
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  auto map = shard::ShardMap::Make(layout->num_params(), 1 << 18, 2, 1);
  ASSERT_TRUE(map.ok());
  auto plan = update::UpdatePlan::Make(*layout, *map, 100, spec::DenseUpdates::kAuto);
  ASSERT_EQ(plan.dense().size(), 2u);
  EXPECT_EQ(plan.dense()[0].layer, 4);
  EXPECT_EQ(plan.dense()[1].layer, 5);
  EXPECT_EQ(plan.DenseIndex(6), -1);  // 10 outputs: the weights are cheaper to send
  const auto bytes = plan.DenseBytes(100);
  EXPECT_LT(bytes.planned, bytes.weights);
  EXPECT_LT(bytes.planned, bytes.activations);
  // Weight deltas cover every parameter outside the two dense layers exactly once.
  std::vector<int> covered(size_t(layout->num_params()), 0);
  for (int s = 0; s < 2; ++s)
    for (const auto& r : plan.DeltaRanges(s)) {
      EXPECT_EQ(map->shards()[r.shard].server, s);
      for (int64_t k = 0; k < r.count; ++k)
        covered[size_t(map->shards()[r.shard].offset + r.offset + k)]++;
    }
  for (int64_t i = 0; i < layout->num_params(); ++i) {
    bool dense = false;
    for (const auto& d : plan.dense())
      dense |= (i >= d.weights && i < d.weights + d.units * d.in) ||
               (i >= d.bias && i < d.bias + d.units);
    ASSERT_EQ(covered[size_t(i)], dense ? 0 : 1) << i;
  }
  // Every row of a dense layer is sent to each server whose shards it touches.
  for (const auto& d : plan.dense()) {
    const int k = plan.DenseIndex(d.layer);
    for (int64_t r = 0; r < d.units; ++r) {
      const int64_t first = d.weights + r * d.in;
      const int s = map->shards()[size_t(first / (1 << 16))].server;
      const auto& rows = plan.Rows(s, k);
      EXPECT_TRUE(std::binary_search(rows.begin(), rows.end(), int32_t(r))) << d.layer << " " << r;
    }
  }
}

TEST(ParamServiceClient, UnreachableServerIsAClearError) {
  auto map = shard::ShardMap::Make(10, 40, 1, 1);
  ASSERT_TRUE(map.ok());
  trainer::GrpcParamServerClientOptions o;
  o.connect_timeout = std::chrono::milliseconds(300);
  model::ModelLayout layout = SmallDenseModel();
  auto map2 = shard::ShardMap::Make(layout.num_params(), 400, 1, 1);
  auto plan = update::UpdatePlan::Make(layout, *map2, 1, spec::DenseUpdates::kAuto);
  auto client = trainer::ConnectParamServers(*map2, plan, {"127.0.0.1:1"}, o);
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.status().message(),
              HasSubstr("cannot reach parameter server ps-0 at 127.0.0.1:1"));
}

TEST(NetServer, PortInUseIsAClearError) {
  model::ModelLayout layout = SmallDenseModel();
  auto map = shard::ShardMap::Make(layout.num_params(), 400, 1, 1);
  ASSERT_TRUE(map.ok());
  auto plan = update::UpdatePlan::Make(layout, *map, 1, spec::DenseUpdates::kAuto);
  std::vector<float> init(size_t(layout.num_params()), 0.f);
  ParamStore store(*map, 0, init.data());
  ClockGate gate(1, spec::Consistency::kAsync, 0);
  BufferPool pool;
  ParamService a(&store, &gate, &plan, 0, &pool, {}), b(&store, &gate, &plan, 0, &pool, {});
  auto first = net::StartServer("127.0.0.1:0", {&a});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string addr = "127.0.0.1:" + std::to_string(first->port);
  auto second = net::StartServer(addr, {&b});
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("cannot listen on " + addr));
  first->server->Shutdown();
}

TEST(BufferPool, ReusesBuffersOfEachPowerOfTwoClass) {
  BufferPool pool;
  EXPECT_EQ(BufferPool::ClassOf(1), 0);
  EXPECT_EQ(BufferPool::ClassOf(4096), 0);
  EXPECT_EQ(BufferPool::ClassOf(4097), 1);
  EXPECT_EQ(BufferPool::ClassOf(32 << 20), 13);
  EXPECT_EQ(BufferPool::ClassOf((32 << 20) + 1), -1);
  void* first = nullptr;
  {
    auto b = pool.Get(1 << 20);
    EXPECT_EQ(b.capacity(), size_t(1) << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    first = b.data();
  }
  auto again = pool.Get(700000);  // same class: the buffer comes back
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(pool.allocations(), 1u);
  EXPECT_EQ(pool.reuses(), 1u);
  auto big = pool.Get((32 << 20) + 1);  // beyond the pool: straight from the allocator
  EXPECT_EQ(pool.allocations(), 2u);
}

}  // namespace
}  // namespace adam::ps
