// ReplicaSync: the push clock at each push and at an epoch's end, what a pull does to the replica
// and to the images the gate counted, the leave, the byte totals.
#include "trainer/replica_sync.h"

#include <gtest/gtest.h>

#include <vector>

#include "model/layout.h"
#include "roles/trainer/small_model.h"
#include "shard/shard_map.h"

namespace adam::trainer {
namespace {

// The servers as one vector: records every push's clock and leave, serves `global` to a pull.
class RecordingClient final : public ParamServerClient {
 public:
  explicit RecordingClient(std::vector<float> g) : global(std::move(g)) {}
  Status Push(const PushArgs& a) override {
    pushes.push_back({a.clock, a.leave});
    return OkStatus();
  }
  Status Pull(float* out, uint64_t clock) override {
    pulls.push_back(clock);
    std::copy(global.begin(), global.end(), out);
    return OkStatus();
  }
  uint64_t pushed_bytes() const override { return 7; }
  uint64_t dense_bytes() const override { return 3; }
  uint64_t pulled_bytes() const override { return 11; }

  struct Pushed {
    uint64_t clock;
    bool leave;
  };
  std::vector<float> global;
  std::vector<Pushed> pushes;
  std::vector<uint64_t> pulls;
};

struct Fixture {
  Fixture()
      : layout(*model::ModelLayout::Make(SmallModel(spec::Activation::kTanh))),
        map(*shard::ShardMap::Make(layout.num_params(), 1 << 20, 1, 1)),
        plan(update::UpdatePlan::Make(layout, map, 10, spec::DenseUpdates::kWeights)),
        init(size_t(layout.num_params())),
        client(init),
        gate(10, false) {
    layout.InitParams(1, init.data());
    client.global = init;
    ReplicaOptions o;
    o.threads = 1;
    o.bind = false;
    o.evaluate = false;
    auto made = Replica::Create(layout, o, init.data());
    EXPECT_TRUE(made.ok()) << made.status().message();
    replica = std::move(*made);
    sync.emplace(replica.get(), &client, &plan, init, spec::CommunicationSpec{}, &gate,
                 TrainerMetrics{}, Clock::Real());
  }
  model::ModelLayout layout;
  shard::ShardMap map;
  update::UpdatePlan plan;
  std::vector<float> init;
  RecordingClient client;
  PushGate gate;
  std::unique_ptr<ModelReplica> replica;
  std::optional<ReplicaSync> sync;
};

TEST(ReplicaSync, ThePushClockCountsPushesAndAnEpochsEndStartsTheNext) {
  Fixture f;
  f.sync->StartAt(3);
  EXPECT_EQ(f.sync->clock(), uint64_t{3} << 32);
  ASSERT_TRUE(f.sync->Sync(false).ok());
  ASSERT_TRUE(f.sync->Sync(false).ok());
  ASSERT_TRUE(f.sync->Sync(true).ok());
  f.sync->Leave();
  const uint64_t e3 = uint64_t{3} << 32, e4 = uint64_t{4} << 32;
  ASSERT_EQ(f.client.pushes.size(), 4u);
  EXPECT_EQ(f.client.pushes[0].clock, e3 + 1);
  EXPECT_EQ(f.client.pushes[1].clock, e3 + 2);
  EXPECT_EQ(f.client.pushes[2].clock, e4);
  EXPECT_EQ(f.client.pushes[3].clock, e4);
  EXPECT_TRUE(f.client.pushes[3].leave);
  EXPECT_FALSE(f.client.pushes[2].leave);
  // Each pull at its own push's clock.
  EXPECT_EQ(f.client.pulls, (std::vector<uint64_t>{e3 + 1, e3 + 2, e4}));
}

TEST(ReplicaSync, APullMovesTheReplicaByWhatChangedGloballyAndLetsTheImagesGo) {
  Fixture f;
  f.gate.Trained(25);
  f.client.global[0] += 1.0f;
  f.client.global[5] -= 2.0f;
  ASSERT_TRUE(f.sync->Sync(false).ok());
  std::vector<float> w(f.init.size());
  ASSERT_TRUE(f.replica->Read(w.data()).ok());
  EXPECT_FLOAT_EQ(w[0], f.init[0] + 1.0f);
  EXPECT_FLOAT_EQ(w[5], f.init[5] - 2.0f);
  EXPECT_FLOAT_EQ(w[1], f.init[1]);
  EXPECT_EQ(f.sync->Weights(), f.client.global);
  EXPECT_EQ(f.gate.pending(), 0);  // the 25 images the push carried
  // The client's bytes: deltas and dense pushed, weights pulled.
  EXPECT_EQ(f.sync->pushed_bytes(), 10u);
  EXPECT_EQ(f.sync->pulled_bytes(), 11u);
}

}  // namespace
}  // namespace adam::trainer
