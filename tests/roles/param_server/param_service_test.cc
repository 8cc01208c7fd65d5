// The parameter server's gRPC service through the trainers' client: both update protocols, the
// consistency models' waits, bad and oversized requests, and unreachable servers.
#include "param_server/param_service.h"

#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <random>
#include <thread>

#include "model/layout.h"
#include "net/grpc.h"
#include "param_server/clock_gate.h"
#include "param_server/param_store.h"
#include "trainer/ps_client.h"
#include "update/codec.h"
#include "update/update_plan.h"

namespace adam::ps {
namespace {

using ::testing::HasSubstr;

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

// A TCP proxy on loopback to `target_port` whose connections can be made to go silent: after
// Silence(), the connections open then carry nothing more either way and are never closed (what
// a caller sees of an address that stopped answering: a pod gone, its node down, every packet
// dropped); connections made later are carried as before (the server, back under a new address).
class SilencingProxy {
 public:
  explicit SilencingProxy(int target_port) : target_port_(target_port) {
    listen_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = Loopback(0);
    EXPECT_EQ(bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(listen_, 16), 0);
    socklen_t len = sizeof a;
    getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    threads_.emplace_back([this] { Accept(); });
  }
  ~SilencingProxy() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    for (int fd : fds_) close(fd);
    close(listen_);
  }
  int port() const { return port_; }
  void Silence() { ++silenced_; }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port));
    return a;
  }
  void Accept() {  // the only thread that adds threads and fds until the destructor joins it
    while (!stop_) {
      pollfd p{listen_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int in = accept(listen_, nullptr, nullptr);
      const int out = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a = Loopback(target_port_);
      if (in < 0 || connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        if (in >= 0) close(in);
        close(out);
        continue;
      }
      fds_.insert(fds_.end(), {in, out});
      const int generation = silenced_;
      threads_.emplace_back([this, in, out, generation] { Pump(in, out, generation); });
      threads_.emplace_back([this, in, out, generation] { Pump(out, in, generation); });
    }
  }
  void Pump(int from, int to, int generation) {
    char buf[1 << 16];
    while (!stop_) {
      if (silenced_ != generation) {  // open, but nothing more passes
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      pollfd p{from, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = read(from, buf, sizeof buf);
      if (n <= 0 || write(to, buf, size_t(n)) != n) return;
    }
  }

  const int target_port_;
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> silenced_{0};
  std::vector<std::thread> threads_;
  std::vector<int> fds_;
};

class ParamServiceTest : public ::testing::Test {
 protected:
  // Two servers over shards of 40 floats; updates of dense layers as activations.
  void Start(spec::Consistency mode, int trainers, int staleness = 0,
             spec::DenseUpdates dense = spec::DenseUpdates::kActivations) {
    layout_.emplace(SmallDenseModel());
    auto map = shard::ShardMap::Make(layout_->num_params(), 160, 2, 7);
    ASSERT_TRUE(map.ok());
    map_ = *map;
    plan_.emplace(update::UpdatePlan::Make(*layout_, *map_, 4, dense));
    init_.resize(size_t(layout_->num_params()));
    for (size_t i = 0; i < init_.size(); ++i) init_[i] = float(i % 5);
    for (int s = 0; s < 2; ++s) {
      auto& srv = servers_[size_t(s)];
      srv.store = std::make_unique<ParamStore>(*map_, s, init_.data());
      srv.gate = std::make_unique<ClockGate>(trainers, mode, staleness);
      srv.service = std::make_unique<ParamService>(srv.store.get(), srv.gate.get(), &*plan_, s,
                                                   &pool_, ParamServiceMetrics{});
      auto server =
          net::StartServer(*net::Transport::Plaintext(), "127.0.0.1:0", {srv.service.get()});
      ASSERT_TRUE(server.ok()) << server.status().ToString();
      srv.server = std::move(*server);
      addresses_.push_back("127.0.0.1:" + std::to_string(srv.server.port));
    }
    stub_ = adam::v1::ParameterService::NewStub(
        net::MakeChannel(*net::Transport::Plaintext(), addresses_[0]));
  }
  void TearDown() override {
    for (auto& s : servers_)
      if (s.server.server) {
        s.gate->Close();
        s.server.server->Shutdown();
      }
  }
  std::unique_ptr<trainer::ParamServerClient> Client(int index,
                                                     trainer::GrpcParamServerClientOptions o = {}) {
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

// Deltas sent as half precision, zstd-compressed, only their nonzero entries (with indices), and
// pulls answered the same way: the servers hold exactly what plain floats would give them when
// the values are halves, and the bytes are fewer.
TEST_F(ParamServiceTest, FilteredCompressedHalfPrecisionPushesAndPullsGiveTheSameWeights) {
  Start(spec::Consistency::kAsync, 1, 0, spec::DenseUpdates::kWeights);
  trainer::GrpcParamServerClientOptions o;
  o.format = {true, true};
  o.sparse_pushes = true;
  auto client = Client(0, o);
  ASSERT_TRUE(client);
  const int64_t n = layout_->num_params();
  std::vector<float> delta(static_cast<size_t>(n), 0.f), want = init_;
  for (int64_t i = 0; i < n; i += 7) {
    delta[size_t(i)] = 0.25f * float(i % 9) - 1.f;  // halves exactly
    want[size_t(i)] += delta[size_t(i)];
  }
  trainer::PushArgs args;
  args.delta = delta.data();
  args.clock = 1;
  ASSERT_TRUE(client->Push(args).ok());
  EXPECT_LT(client->pushed_bytes(), uint64_t(n) * 4 / 2);  // 1 in 7 entries, 2 bytes + index
  std::vector<float> out(static_cast<size_t>(n));
  ASSERT_TRUE(client->Pull(out.data(), 1).ok());
  EXPECT_EQ(out, want);  // init values and sums are halves: nothing rounded away
  EXPECT_LT(client->pulled_bytes(), uint64_t(n) * 4 / 2);
  // The servers hold float32 weights: a plain client reads the same.
  auto plain = Client(0);
  std::vector<float> out32(static_cast<size_t>(n));
  ASSERT_TRUE(plain->Pull(out32.data(), 1).ok());
  EXPECT_EQ(out32, want);
}

TEST_F(ParamServiceTest, HalfPrecisionActivationsAndErrorsApplyTheirRoundedValues) {
  Start(spec::Consistency::kAsync, 1);
  trainer::GrpcParamServerClientOptions o;
  o.format = {true, false};
  auto client = Client(0, o);
  ASSERT_TRUE(client);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> want = init_;
  std::vector<std::vector<float>> acts, errs;
  trainer::PushArgs args;
  args.clock = 1;
  for (const auto& d : plan_->dense()) {
    acts.emplace_back(size_t(d.in));
    errs.emplace_back(size_t(d.units));
    for (auto& x : acts.back()) x = u(rng);
    for (auto& x : errs.back()) x = u(rng);
    for (int64_t r = 0; r < d.units; ++r) {
      const float e = update::RoundToHalf(errs.back()[size_t(r)]);
      for (int64_t c = 0; c < d.in; ++c)
        want[size_t(d.weights + r * d.in + c)] += e * update::RoundToHalf(acts.back()[size_t(c)]);
      want[size_t(d.bias + r)] += e;
    }
    args.dense.push_back({d.layer, 1, acts.back().data(), errs.back().data()});
  }
  ASSERT_TRUE(client->Push(args).ok());
  auto plain = Client(0);
  std::vector<float> out(want.size());
  ASSERT_TRUE(plain->Pull(out.data(), 1).ok());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-6) << i;
}

// A filtered delta's indices are checked like its range: in order, inside the shard, one per
// value; a bad one names the delta and applies nothing.
TEST_F(ParamServiceTest, BadIndicesOfAFilteredPushAreRefusedNamingThem) {
  Start(spec::Consistency::kAsync, 1, 0, spec::DenseUpdates::kWeights);
  const uint32_t held = servers_[0].store->shard_ids()[0];
  const auto push = [&](std::vector<uint32_t> idx, size_t values, uint64_t offset = 0) {
    adam::v1::PushRequest req;
    auto* d = req.add_deltas();
    d->set_shard(held);
    d->set_offset(offset);
    std::vector<float> v(values, 1.f);
    update::EncodeFloats(v.data(), v.size(), {}, d->mutable_values());
    update::EncodeIndices(idx.data(), idx.size(), false, d->mutable_indices());
    adam::v1::PushResponse resp;
    grpc::ClientContext ctx;
    return stub_->Push(&ctx, req, &resp);
  };
  const std::string at = "deltas[0] (shard " + std::to_string(held) + "): ";
  EXPECT_THAT(push({5, 3}, 2).error_message(),
              HasSubstr(at + "indices[1] = 3 does not follow 5 in ascending order"));
  EXPECT_THAT(push({1, 2}, 3).error_message(), HasSubstr(at + "2 indices for 3 values"));
  EXPECT_THAT(push({1, 40}, 2).error_message(), HasSubstr("[0, 41) are outside the shard's 40"));
  EXPECT_THAT(push({1, 30}, 2, 10).error_message(),
              HasSubstr("[10, 41) are outside the shard's 40"));
  EXPECT_TRUE(push({0, 39}, 2).ok());
  std::vector<float> out(40);
  ASSERT_TRUE(servers_[0].store->ReadState(held, out.data(), 40).ok());
  const int64_t base = map_->shards()[held].offset;
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(out[size_t(i)], init_[size_t(base + i)] + (i == 0 || i == 39 ? 1.f : 0.f)) << i;
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

// A client for a slice of the vector (a model worker's) pushes its packed ranges where they lie
// in the whole vector, across the shards' cuts and in whatever order they are listed, and pulls
// only the shards they touch back into its packed buffer.
TEST_F(ParamServiceTest, ASliceClientMovesOnlyItsRangesWhereverTheShardsCut) {
  Start(spec::Consistency::kAsync, 1, 0, spec::DenseUpdates::kWeights);
  const int64_t n = layout_->num_params();  // 123 floats in shards of 40: 0, 40, 80, 120
  ASSERT_EQ(n, 123);
  trainer::GrpcParamServerClientOptions o;
  o.slice = {{.whole = 35, .own = 0, .count = 10},  // across the cut at 40
             {.whole = 90, .own = 10, .count = 5},
             {.whole = 2, .own = 15, .count = 3}};
  auto slice = Client(0, o);
  auto whole = Client(0);
  ASSERT_TRUE(slice && whole);
  std::vector<float> delta(18);
  for (size_t j = 0; j < delta.size(); ++j) delta[j] = 1.f + float(j);
  trainer::PushArgs args;
  args.delta = delta.data();
  args.clock = 1;
  ASSERT_TRUE(slice->Push(args).ok());
  EXPECT_EQ(slice->pushed_bytes(), 18u * 4);
  std::vector<float> want = init_;
  for (const auto& r : o.slice)
    for (int64_t k = 0; k < r.count; ++k) want[size_t(r.whole + k)] += delta[size_t(r.own + k)];
  std::vector<float> got(static_cast<size_t>(n));
  ASSERT_TRUE(whole->Pull(got.data(), 0).ok());
  EXPECT_EQ(got, want);
  std::vector<float> packed(18, -1.f);
  ASSERT_TRUE(slice->Pull(packed.data(), 0).ok());
  for (const auto& r : o.slice)
    for (int64_t k = 0; k < r.count; ++k)
      EXPECT_EQ(packed[size_t(r.own + k)], want[size_t(r.whole + k)]) << r.whole + k;
  EXPECT_EQ(slice->pulled_bytes(), 18u * 4) << "its ranges, not the shards they fall in";
  // A range that is no part of its shard is refused, naming it.
  adam::v1::PullRequest bad;
  auto* r = bad.add_ranges();
  for (const auto& sh : map_->shards())
    if (sh.server == 0 && sh.count == 40) r->set_shard(sh.id);  // one server 0 holds (stub_'s)
  r->set_offset(30);
  r->set_count(20);
  adam::v1::PullResponse resp;
  grpc::ClientContext ctx;
  const grpc::Status st = stub_->Pull(&ctx, bad, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("ranges[0]: floats [30, +20) are not a nonempty part"))
      << st.error_message();
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
    auto again = net::StartServer(*net::Transport::Plaintext(), "127.0.0.1:" + std::to_string(port),
                                  {srv.service.get()});
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

// A server that comes back without the updates it had applied (restarted from an older
// checkpoint, or a failover to a copy that lacks them): the client's next pull reads its shards
// at lower versions than before, and counts the updates missing, once.
TEST_F(ParamServiceTest, APullBelowTheVersionsReadBeforeCountsTheUpdatesMissing) {
  Start(spec::Consistency::kAsync, 1, 0, spec::DenseUpdates::kWeights);
  prometheus::Registry reg;
  prometheus::Counter& missing = prometheus::BuildCounter().Name("m").Register(reg).Add({});
  trainer::GrpcParamServerClientOptions o;
  o.missing = &missing;
  auto client = Client(0, o);
  ASSERT_TRUE(client);
  const int64_t n = layout_->num_params();
  std::vector<float> delta(static_cast<size_t>(n), 0.5f), out(static_cast<size_t>(n));
  for (uint64_t clock = 1; clock <= 3; ++clock) {
    ASSERT_TRUE(client->Push({delta.data(), {}, clock, false}).ok());
    ASSERT_TRUE(client->Pull(out.data(), clock).ok());
  }
  EXPECT_EQ(missing.Value(), 0);  // versions only rose

  Server& srv = servers_[1];
  uint64_t held = 0;
  for (uint32_t id : srv.store->shard_ids()) held += srv.store->Version(id);
  ASSERT_GE(held, 3u * srv.store->shard_ids().size());
  const int port = srv.server.port;
  srv.server.server->Shutdown();
  srv.server.server.reset();
  srv.service.reset();
  srv.store = std::make_unique<ParamStore>(*map_, 1, init_.data());  // none of them
  srv.service = std::make_unique<ParamService>(srv.store.get(), srv.gate.get(), &*plan_, 1, &pool_,
                                               ParamServiceMetrics{});
  auto again = net::StartServer(*net::Transport::Plaintext(), "127.0.0.1:" + std::to_string(port),
                                {srv.service.get()});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  srv.server = std::move(*again);
  ASSERT_TRUE(client->Pull(out.data(), 3).ok());
  EXPECT_EQ(missing.Value(), double(held));
  // Counted once: from the lower versions on, a pull finds nothing more missing.
  ASSERT_TRUE(client->Push({delta.data(), {}, 4, false}).ok());
  ASSERT_TRUE(client->Pull(out.data(), 4).ok());
  EXPECT_EQ(missing.Value(), double(held));
}

// Without copies, a server whose address stops answering without a reset (its connection goes
// silent) while a pull is out: the channel's keepalive pings find it within their time and
// timeout, the pull fails UNAVAILABLE and is sent again on a new connection. Without the pings it
// waited for its deadline and failed the trainer (DEADLINE_EXCEEDED ends a call at once).
TEST_F(ParamServiceTest, APullToAServerWhoseConnectionWentSilentIsSentAgainOnANewOne) {
  Start(spec::Consistency::kAsync, 1);
  SilencingProxy proxy(servers_[1].server.port);
  trainer::GrpcParamServerClientOptions o;
  o.rpc_timeout = std::chrono::milliseconds(20000);
  auto client = trainer::ConnectParamServers(
      *map_, *plan_, {addresses_[0], "127.0.0.1:" + std::to_string(proxy.port())}, o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<float> out(init_.size(), -1.f);
  ASSERT_TRUE((*client)->Pull(out.data(), 0).ok());
  proxy.Silence();
  std::fill(out.begin(), out.end(), -1.f);
  const auto t0 = std::chrono::steady_clock::now();
  Status pulled = (*client)->Pull(out.data(), 0);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(pulled.ok()) << pulled.ToString();
  EXPECT_EQ(out, init_);
  // Found by the pings (net::kKeepaliveTime + kKeepaliveTimeout), well before the deadline.
  EXPECT_LT(took, net::kKeepaliveTime + net::kKeepaliveTimeout + std::chrono::seconds(5));
  std::printf("a silent connection left after %.1f s\n",
              std::chrono::duration<double>(took).count());
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
              HasSubstr("deltas[1] (shard " + std::to_string(held) +
                        "): 3 bytes of values are not a whole number of 4-byte values"));

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
  EXPECT_THAT(st.error_message(), HasSubstr("dense[0] (layer 0): activations: 7 bytes of values"));
  du->set_activations(std::string(8, '\0'));
  grpc::ClientContext ctx8;
  st = stub_->Push(&ctx8, dense, &resp);
  EXPECT_THAT(st.error_message(),
              HasSubstr("dense[0] (layer 0): activations and errors must be 32 and 12 floats for 2 "
                        "images, got 2 and 0"));
  du->set_layer(5);
  grpc::ClientContext ctx6;
  EXPECT_THAT(stub_->Push(&ctx6, dense, &resp).error_message(),
              HasSubstr("not a layer whose updates"));

  adam::v1::PushRequest stranger;
  // Async: a trainer the manifest has not told of yet is admitted (scaling), up to the bound.
  stranger.set_trainer_index(uint32_t(ClockGate::kMaxTrainers));
  grpc::ClientContext ctx7;
  EXPECT_THAT(stub_->Push(&ctx7, stranger, &resp).error_message(),
              HasSubstr("trainer_index 4096 is not a trainer of this job (1 trainers; async "
                        "jobs admit up to 4096 while trainers are scaled)"));

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
  auto first = net::StartServer(*net::Transport::Plaintext(), "127.0.0.1:0", {&a});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string addr = "127.0.0.1:" + std::to_string(first->port);
  auto second = net::StartServer(*net::Transport::Plaintext(), addr, {&b});
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("cannot listen on " + addr));
  first->server->Shutdown();
}

}  // namespace
}  // namespace adam::ps
