// The update plan every role derives from the job: layout, shard map, and which dense layers
// travel as activations and errors.
#include "update/update_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "model/layout.h"
#include "shard/shard_map.h"

namespace adam::update {
namespace {

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
  auto a = DeriveJobLayout(job);
  auto b = DeriveJobLayout(job);
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
  // A controller routes shards (copies): weights only.
  job.roles.parameter_server.copies = 2;
  auto copies = DeriveJobLayout(job);
  ASSERT_TRUE(copies.ok());
  EXPECT_TRUE(copies->plan.dense().empty());
  // The seed places the shards: another seed, another map of the same sizes.
  job.training.seed = 8;
  auto other = DeriveJobLayout(job);
  ASSERT_TRUE(other.ok());
  bool moved = false;
  for (size_t i = 0; i < a->map.shards().size(); ++i)
    moved |= other->map.shards()[i].server != a->map.shards()[i].server;
  EXPECT_TRUE(moved);
  job.model.layers[0].kernel = 40;  // larger than the 28x28 input
  auto bad = DeriveJobLayout(job);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("layers[0]"), std::string::npos) << bad.status().message();
}

TEST(UpdatePlan, AdamsModelSendsActivationsForTheBigDenseLayersOnly) {
  auto layout = model::ModelLayout::Make(AdamsModel());
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  auto map = shard::ShardMap::Make(layout->num_params(), 1 << 18, 2, 1);
  ASSERT_TRUE(map.ok());
  auto plan = UpdatePlan::Make(*layout, *map, 100, spec::DenseUpdates::kAuto);
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
  // DeltaSpans: the same parameters as flat ranges, ascending and apart.
  std::vector<int> spanned(size_t(layout->num_params()), 0);
  int64_t last_end = -1;
  for (const auto& [begin, end] : plan.DeltaSpans(layout->num_params())) {
    EXPECT_LT(last_end, begin);
    EXPECT_LT(begin, end);
    last_end = end;
    for (int64_t i = begin; i < end; ++i) spanned[size_t(i)]++;
  }
  EXPECT_EQ(spanned, covered);
  // Without dense-protocol layers, one span: the whole model.
  auto weights = UpdatePlan::Make(*layout, *map, 100, spec::DenseUpdates::kWeights);
  EXPECT_EQ(weights.DeltaSpans(layout->num_params()),
            (std::vector<std::pair<int64_t, int64_t>>{{0, layout->num_params()}}));
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

}  // namespace
}  // namespace adam::update
