// The parameter server's gRPC service through the trainers' client (param_service_fixture.h): the
// consistency models' waits, a server that comes back or does not, a pull below the versions read
// before, a connection gone silent.
#include "roles/param_server/param_service_fixture.h"
#include "testing/wait.h"

namespace adam::ps {
namespace {

// Without copies a server that goes away and comes back on its address (restarted from its
// checkpoint) is waited for: the call is answered once it is back. One that stays away fails the
// call after server_wait, naming it.
TEST_F(ParamServiceTest, TheClientWaitsForAServerThatComesBackAndNamesOneThatDoesNot) {
  Start(spec::Consistency::kAsync, 1);
  prometheus::Registry reg;
  prometheus::Gauge& waiting = prometheus::BuildGauge().Name("w").Register(reg).Add({});
  trainer::GrpcParamServerClientOptions o;
  o.server_wait = std::chrono::milliseconds(1500);
  o.waiting = &waiting;
  auto client = trainer::ConnectParamServers(*map_, *plan_, addresses_, o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  Server& srv = servers_[1];
  const int port = srv.server.port;
  auto stop = [&] {
    srv.server.server->Shutdown();
    srv.server.server.reset();
  };
  stop();
  // Back once the client says it waits for it (the gauge at 1), however long that takes.
  std::atomic<bool> seen_waiting{false};
  std::thread back([&] {
    seen_waiting = testing::Eventually([&] { return waiting.Value() == 1; });
    srv.service = std::make_unique<ParamService>(srv.store.get(), srv.gate.get(), &*plan_, 1,
                                                 &pool_, ParamServiceMetrics{});
    auto again = net::StartServer(*net::Transport::Plaintext(), "127.0.0.1:" + std::to_string(port),
                                  {srv.service.get()});
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    srv.server = std::move(*again);
  });
  std::vector<float> out(init_.size(), -1.f);
  Status pulled = (*client)->Pull(out.data(), 0);
  back.join();
  ASSERT_TRUE(pulled.ok()) << pulled.ToString();
  EXPECT_TRUE(seen_waiting.load());
  EXPECT_EQ(waiting.Value(), 0);  // the wait is over
  EXPECT_EQ(out, init_);          // every shard, those of the server that came back included

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

}  // namespace
}  // namespace adam::ps
