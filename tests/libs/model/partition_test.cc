// A model split across K workers computes what the whole model computes: forward outputs,
// gradients and SGD steps, on random models and inputs; and the partition's own contracts.
#include "model/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "model/layout.h"
#include "model/network.h"
#include "testing/layers.h"

namespace adam::model {
namespace {

using testing::Conv;
using testing::Dense;
using testing::MakeSpec;
using testing::Pool;
using testing::Softmax;

constexpr spec::Activation kActivations[] = {spec::Activation::kTanh, spec::Activation::kRelu,
                                             spec::Activation::kSigmoid,
                                             spec::Activation::kLeakyRelu, spec::Activation::kNone};

// A random conv net (every layer with at least 4 outputs, so that 4 workers can split it).
spec::ModelSpec RandomModel(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return lo + int(rng() % unsigned(hi - lo + 1)); };
  auto act = [&] { return kActivations[rng() % 5]; };
  std::vector<spec::LayerSpec> layers;
  layers.push_back(Conv(pick(4, 9), 3, act(), pick(0, 1)));
  layers.push_back(Pool(2, rng() % 2 ? spec::LayerType::kMaxPool : spec::LayerType::kAvgPool));
  if (rng() % 2) layers.push_back(Conv(pick(4, 7), 3, act(), 1));
  layers.push_back(Dense(pick(4, 13), act()));
  if (rng() % 2) layers.push_back(Dense(pick(4, 9), act()));
  layers.push_back(Softmax(pick(4, 7)));
  return MakeSpec(layers, {pick(1, 3), pick(8, 11), pick(8, 11)});
}

struct Case {
  ModelLayout layout;
  std::vector<float> params, input;
  std::vector<uint8_t> labels;
};

Case MakeCase(const spec::ModelSpec& spec, int batch, uint64_t seed) {
  auto layout = ModelLayout::Make(spec);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  Case c{*layout, {}, {}, {}};
  c.params.resize(size_t(c.layout.num_params()));
  c.layout.InitParams(seed, c.params.data());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (auto& p : c.params) p += 0.1f * u(rng);  // non-zero biases too
  c.input.resize(size_t(c.layout.input_size() * batch));
  for (auto& x : c.input) x = 2 * u(rng);
  for (int n = 0; n < batch; ++n) c.labels.push_back(uint8_t(rng() % unsigned(c.layout.classes())));
  return c;
}

// Runs fn(k) for every worker k on its own thread (the workers wait on each other).
template <typename Fn>
void OnEveryWorker(int workers, Fn fn) {
  std::vector<std::thread> threads;
  for (int k = 0; k < workers; ++k) threads.emplace_back([&fn, k] { fn(k); });
  for (auto& t : threads) t.join();
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  float scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5f + 1e-4f * scale) << what << " " << i;
}

// The whole model's probabilities and gradient against the split model's, for K workers, with
// label smoothing `smoothing`.
void CheckSplit(const spec::ModelSpec& spec, int workers, int batch, uint64_t seed,
                float smoothing = 0) {
  SCOPED_TRACE("workers " + std::to_string(workers) + ", seed " + std::to_string(seed));
  Case c = MakeCase(spec, batch, seed);
  std::vector<float> grads(c.params.size());
  const StepRule rule{.label_smoothing = smoothing};
  auto whole = Network::Create(c.layout, batch, c.params.data(), grads.data(),
                               NetworkMode::kGradients, 1, false, rule);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  std::copy(c.input.begin(), c.input.end(), (*whole)->input());
  const float loss = (*whole)->Forward(c.labels.data(), nullptr);
  (*whole)->Backward();
  const int classes = c.layout.classes();
  std::vector<float> probs((*whole)->probabilities(),
                           (*whole)->probabilities() + size_t(batch * classes));

  auto part = Partition::Make(c.layout, workers);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  LocalExchangeGroup group(workers);
  std::vector<float> split_grads(c.params.size(), NAN);
  std::vector<std::vector<float>> split_probs(static_cast<size_t>(workers));
  std::vector<float> split_loss(static_cast<size_t>(workers));
  std::vector<Status> failed(static_cast<size_t>(workers));
  OnEveryWorker(workers, [&](int k) {
    std::vector<float> own(size_t(part->num_params(k))), own_grads(own.size());
    part->Extract(k, c.params.data(), own.data());
    auto w = SplitWorker::Create(*part, k, batch, own.data(), own_grads.data(),
                                 NetworkMode::kGradients, group.exchange(k), rule);
    if (!w.ok()) {
      failed[size_t(k)] = w.status();
      return;
    }
    std::copy(c.input.begin(), c.input.end(), (*w)->input());
    auto l = (*w)->Forward(c.labels.data(), nullptr);
    Status b = l.ok() ? (*w)->Backward() : l.status();
    if (!b.ok()) {
      failed[size_t(k)] = b;
      return;
    }
    split_loss[size_t(k)] = *l;
    split_probs[size_t(k)].assign((*w)->probabilities(),
                                  (*w)->probabilities() + size_t(batch * classes));
    part->Insert(k, own_grads.data(), split_grads.data());  // disjoint ranges
  });
  for (const auto& s : failed) ASSERT_TRUE(s.ok()) << s.ToString();
  for (int k = 0; k < workers; ++k) {
    EXPECT_NEAR(split_loss[size_t(k)], loss, 1e-4f * std::max(1.f, loss));
    ExpectClose(split_probs[size_t(k)], probs, "probability");
  }
  ExpectClose(split_grads, grads, "gradient");  // NaN where no worker wrote
}

TEST(Partition, SplitForwardAndGradientsEqualTheWholeModelsForOneToFourWorkers) {
  std::mt19937 rng(7);
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const spec::ModelSpec spec = RandomModel(rng);
    for (int k = 1; k <= 4; ++k) CheckSplit(spec, k, 3, seed);
  }
}

// Label smoothing: each worker's share of the logits' gradient against the smoothed targets of
// its own classes, the loss against all of them.
TEST(Partition, SmoothedLabelsGiveTheWholeModelsLossAndGradients) {
  std::mt19937 rng(9);
  const spec::ModelSpec spec = RandomModel(rng);
  for (int k = 1; k <= 3; ++k) CheckSplit(spec, k, 3, 4, 0.2f);
}

TEST(Partition, UnevenSharesAndAFirstLayerWithoutParameters) {
  // 5 maps over 3 workers (1, 2, 2 maps), 7 classes over 4, and a pool before the first conv.
  CheckSplit(MakeSpec({Pool(2), Conv(5, 3, spec::Activation::kRelu, 1),
                       Dense(6, spec::Activation::kTanh), Softmax(7)},
                      {2, 10, 10}),
             3, 2, 11);
  CheckSplit(MakeSpec({Dense(9, spec::Activation::kSigmoid), Softmax(7)}, {1, 5, 5}), 4, 2, 12);
}

TEST(Partition, SgdStepEqualsTheWholeModels) {
  std::mt19937 rng(21);
  const spec::ModelSpec spec = RandomModel(rng);
  const int batch = 4, workers = 3;
  const float lr = 0.05f;
  Case c = MakeCase(spec, batch, 5);
  std::vector<float> whole_params = c.params;
  auto whole = Network::Create(c.layout, batch, whole_params.data(), nullptr, NetworkMode::kSgd);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  for (int step = 0; step < 3; ++step) {
    std::copy(c.input.begin(), c.input.end(), (*whole)->input());
    (*whole)->Forward(c.labels.data(), nullptr);
    (*whole)->Backward(lr);
  }
  auto part = Partition::Make(c.layout, workers);
  ASSERT_TRUE(part.ok());
  LocalExchangeGroup group(workers);
  std::vector<float> split_params(c.params.size(), NAN);
  OnEveryWorker(workers, [&](int k) {
    std::vector<float> own(size_t(part->num_params(k)));
    part->Extract(k, c.params.data(), own.data());
    auto w = SplitWorker::Create(*part, k, batch, own.data(), nullptr, NetworkMode::kSgd,
                                 group.exchange(k));
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (int step = 0; step < 3; ++step) {
      std::copy(c.input.begin(), c.input.end(), (*w)->input());
      ASSERT_TRUE((*w)->Forward(c.labels.data(), nullptr).ok());
      ASSERT_TRUE((*w)->Backward(lr).ok());
    }
    part->Insert(k, own.data(), split_params.data());
  });
  float moved = 0;
  for (size_t i = 0; i < c.params.size(); ++i)
    moved = std::max(moved, std::fabs(whole_params[i] - c.params[i]));
  EXPECT_GT(moved, 1e-3f) << "the steps changed nothing: the comparison would prove nothing";
  ExpectClose(split_params, whole_params, "parameter after 3 steps");
}

TEST(Partition, SlicesCoverEveryParameterOnce) {
  std::mt19937 rng(3);
  auto layout = ModelLayout::Make(RandomModel(rng));
  ASSERT_TRUE(layout.ok());
  for (int k = 1; k <= 4; ++k) {
    auto part = Partition::Make(*layout, k);
    ASSERT_TRUE(part.ok());
    std::vector<int> owners(size_t(layout->num_params()), 0);
    int64_t total = 0;
    for (int w = 0; w < k; ++w) {
      int64_t own = 0;
      for (const auto& r : part->ranges(w)) {
        for (int64_t i = r.whole; i < r.whole + r.count; ++i) ++owners[size_t(i)];
        own += r.count;
      }
      EXPECT_EQ(own, part->num_params(w));
      total += own;
    }
    EXPECT_EQ(total, layout->num_params());
    EXPECT_EQ(std::count(owners.begin(), owners.end(), 1), layout->num_params());
  }
}

TEST(Partition, InitialisesASliceAsTheWholeModelWould) {
  std::mt19937 rng(17);
  auto layout = ModelLayout::Make(RandomModel(rng));
  ASSERT_TRUE(layout.ok());
  std::vector<float> whole(size_t(layout->num_params()));
  layout->InitParams(99, whole.data());
  for (int k = 1; k <= 4; ++k) {
    auto part = Partition::Make(*layout, k);
    ASSERT_TRUE(part.ok());
    for (int w = 0; w < k; ++w) {
      std::vector<float> want(size_t(part->num_params(w))), got(want.size(), NAN);
      part->Extract(w, whole.data(), want.data());
      part->InitParams(w, 99, got.data());
      EXPECT_EQ(got, want) << "worker " << w << " of " << k;
    }
  }
}

TEST(Partition, RefusesMoreWorkersThanALayerHasOutputs) {
  auto layout = ModelLayout::Make(MakeSpec(
      {Conv(6, 3, spec::Activation::kTanh), Dense(3, spec::Activation::kTanh), Softmax(10)},
      {1, 8, 8}));
  ASSERT_TRUE(layout.ok());
  EXPECT_TRUE(Partition::Make(*layout, 3).ok());
  auto four = Partition::Make(*layout, 4);
  ASSERT_FALSE(four.ok());
  EXPECT_NE(four.status().message().find("spec.model.layers[1]: its 3 outputs cannot be split "
                                         "across 4 model workers"),
            std::string::npos)
      << four.status().ToString();
  EXPECT_FALSE(Partition::Make(*layout, 0).ok());
}

TEST(Mailbox, NamesAPeerOutOfStepOrTooLongOrSilent) {
  Mailbox box(2);
  std::vector<float> out(2);
  const std::vector<float> two = {1, 2}, three = {1, 2, 3};
  box.Put(1, 4, two);
  Status s = box.Take(1, 5, out, std::chrono::milliseconds(100));
  EXPECT_NE(s.message().find("out of step: boundary 4 came where 5 was due"), std::string::npos)
      << s.ToString();
  box.Put(1, 5, three);
  s = box.Take(1, 5, out, std::chrono::milliseconds(100));
  EXPECT_NE(s.message().find("sent 3 floats for boundary 5; 2 expected"), std::string::npos)
      << s.ToString();
  s = box.Take(1, 5, out, std::chrono::milliseconds(10));
  EXPECT_NE(s.message().find("model worker 1 sent nothing for 10 ms"), std::string::npos)
      << s.ToString();
  box.Put(1, 6, two);
  ASSERT_TRUE(box.Take(1, 6, out, std::chrono::milliseconds(10)).ok());
  EXPECT_EQ(out, two);
  box.Close(UnavailableError("peer gone"));
  s = box.Take(1, 7, out, std::chrono::seconds(10));
  EXPECT_EQ(s.message(), "peer gone");
}

// A message's buffer, once taken, is the next Put's: a steady exchange allocates nothing.
TEST(Mailbox, ReusesTheBuffersOfTakenMessages) {
  Mailbox box(1);
  std::vector<float> v = box.Spare(3);
  ASSERT_EQ(v.size(), 3u);
  v = {1, 2, 3};
  const float* buffer = v.data();
  box.Put(0, 1, std::move(v));
  std::vector<float> out(3);
  ASSERT_TRUE(box.Take(0, 1, out, std::chrono::milliseconds(10)).ok());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3}));
  std::vector<float> again = box.Spare(2);
  EXPECT_EQ(again.data(), buffer);
  EXPECT_EQ(again.size(), 2u);
  EXPECT_NE(box.Spare(2).data(), buffer);  // handed out once
}

TEST(Network, SegmentsAndWholeModelsAreToldApart) {
  auto seg = ModelLayout::Make(MakeSpec({Conv(4, 3, spec::Activation::kTanh)}, {1, 6, 6}));
  auto whole =
      ModelLayout::Make(MakeSpec({Dense(4, spec::Activation::kTanh), Softmax(3)}, {1, 6, 6}));
  ASSERT_TRUE(seg.ok() && whole.ok());
  std::vector<float> p(100);
  EXPECT_FALSE(Network::Create(*seg, 1, p.data(), nullptr, NetworkMode::kInference).ok());
  EXPECT_FALSE(
      Network::CreateSegment(*whole, 1, p.data(), nullptr, NetworkMode::kInference, false).ok());
  EXPECT_FALSE(
      Network::CreateSegment(*seg, 1, p.data(), nullptr, NetworkMode::kInference, true).ok());
  auto net = Network::CreateSegment(*seg, 1, p.data(), nullptr, NetworkMode::kInference, false);
  ASSERT_TRUE(net.ok()) << net.status().ToString();
  EXPECT_NE((*net)->output(), nullptr);
  EXPECT_EQ((*net)->output_gradient(), nullptr);
  EXPECT_EQ((*net)->input_gradient(), nullptr);
}

}  // namespace
}  // namespace adam::model
