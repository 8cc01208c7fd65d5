// The parameter server's gRPC service through the trainers' client (param_service_fixture.h): both
// update protocols, filtered, compressed and half-precision updates, slices, bad and oversized
// requests, unreachable servers and ports in use.
#include "roles/param_server/param_service_fixture.h"

namespace adam::ps {
namespace {

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
