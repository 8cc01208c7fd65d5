// Numerical gradient checks of every layer type, and the Network's basic contracts.
#include "model/network.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "model/layout.h"
#include "testing/layers.h"

namespace adam::model {
namespace {

using testing::Conv;
using testing::Dense;
using testing::Dropout;
using testing::MakeSpec;
using testing::Pool;
using testing::Softmax;

// Compares Backward's gradient with central finite differences of the mean loss, computed in
// double from float forward passes, on every parameter; the loss's targets smoothed by
// `smoothing`.
void CheckGradients(const spec::ModelSpec& spec, int batch, uint64_t seed, float smoothing = 0) {
  auto layout = ModelLayout::Make(spec);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  std::vector<float> params(layout->num_params()), grads(layout->num_params());
  layout->InitParams(seed, params.data());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (auto& p : params) p += 0.1f * u(rng);  // non-zero biases too
  auto net = Network::Create(*layout, batch, params.data(), grads.data(), NetworkMode::kGradients,
                             1, false, StepRule{.label_smoothing = smoothing});
  ASSERT_TRUE(net.ok()) << net.status().ToString();
  Network& n = **net;
  std::vector<float> input(layout->input_size() * batch);
  for (auto& x : input) x = 2 * u(rng);
  std::vector<uint8_t> labels(batch);
  for (auto& l : labels) l = uint8_t(rng() % layout->classes());
  auto loss = [&]() {
    std::copy(input.begin(), input.end(), n.input());
    return double(n.Forward(labels.data(), nullptr)) / batch;
  };
  loss();
  n.Backward();
  const double center = loss();
  const float eps = 1e-3f;
  int checked = 0, kinks = 0;
  for (int64_t i = 0; i < layout->num_params(); ++i) {
    const float saved = params[i];
    params[i] = saved + eps;
    const double up = loss();
    params[i] = saved - eps;
    const double down = loss();
    params[i] = saved;
    // A max-pool window whose two largest inputs are within eps of each other is a kink of the
    // loss: its one-sided slopes disagree and no finite difference is right there. Skip those.
    const double right = (up - center) / eps, left = (center - down) / eps;
    if (std::fabs(right - left) > 1e-2 + 0.05 * std::fabs(right)) {
      ++kinks;
      continue;
    }
    const double numeric = (up - down) / (2 * eps);
    EXPECT_NEAR(grads[i], numeric, 5e-3 + 3e-2 * std::fabs(numeric)) << "parameter " << i;
    ++checked;
  }
  EXPECT_LE(kinks, layout->num_params() / 10) << "too many kinks to trust the check";
  EXPECT_GT(checked, 0);
}

TEST(Network, GradientMatchesFiniteDifferences_ConvTanhPoolDense) {
  CheckGradients(MakeSpec({Conv(3, 3, spec::Activation::kTanh), Pool(2),
                           Dense(5, spec::Activation::kTanh), Softmax(4)},
                          {1, 8, 8}),
                 2, 1);
}

TEST(Network, GradientMatchesFiniteDifferences_ConvPoolSoftmaxManySeeds) {
  for (uint64_t seed = 10; seed < 30; ++seed) {
    SCOPED_TRACE(seed);
    CheckGradients(MakeSpec({Conv(3, 3, spec::Activation::kTanh), Pool(2), Softmax(4)}, {1, 8, 8}),
                   2, seed);
  }
}

TEST(Network, GradientMatchesFiniteDifferences_ReluAndPadding) {
  CheckGradients(
      MakeSpec({Conv(2, 3, spec::Activation::kRelu, 1), Conv(3, 3, spec::Activation::kNone),
                Pool(2), Dense(6, spec::Activation::kRelu), Softmax(3)},
               {2, 6, 6}),
      3, 2);
}

TEST(Network, GradientMatchesFiniteDifferences_DenseOnly) {
  CheckGradients(
      MakeSpec({Dense(7, spec::Activation::kTanh), Dense(5, spec::Activation::kNone), Softmax(3)},
               {1, 3, 4}),
      1, 3);
}

TEST(Network, GradientMatchesFiniteDifferences_LabelSmoothing) {
  for (float s : {0.1f, 0.5f}) {
    SCOPED_TRACE(s);
    CheckGradients(MakeSpec({Conv(3, 3, spec::Activation::kRelu, 1), Pool(2),
                             Dense(5, spec::Activation::kTanh), Softmax(4)},
                            {1, 6, 6}),
                   3, 6, s);
  }
}

// The smoothed loss is (1 - s) x the cross-entropy plus s / classes x the sum of -log p over
// every class, from the same probabilities; its gradient differs from the one-hot one's, and
// s = 1 (no trace of the label left) is refused.
TEST(Network, LabelSmoothingMixesTheUniformTargetIn) {
  auto layout =
      ModelLayout::Make(MakeSpec({Dense(6, spec::Activation::kTanh), Softmax(5)}, {1, 3, 3}));
  ASSERT_TRUE(layout.ok());
  const int batch = 4;
  std::vector<float> params(size_t(layout->num_params()));
  layout->InitParams(3, params.data());
  std::vector<float> g_plain(params.size()), g_smooth(params.size());
  auto plain =
      Network::Create(*layout, batch, params.data(), g_plain.data(), NetworkMode::kGradients);
  auto smooth =
      Network::Create(*layout, batch, params.data(), g_smooth.data(), NetworkMode::kGradients, 1,
                      false, StepRule{.label_smoothing = 0.3f});
  ASSERT_TRUE(plain.ok() && smooth.ok());
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> input(size_t(layout->input_size() * batch));
  for (auto& x : input) x = u(rng);
  const std::vector<uint8_t> labels{0, 4, 2, 2};
  std::copy(input.begin(), input.end(), (*plain)->input());
  std::copy(input.begin(), input.end(), (*smooth)->input());
  const float ce = (*plain)->Forward(labels.data(), nullptr);
  const float smoothed = (*smooth)->Forward(labels.data(), nullptr);
  double all = 0;  // sum over images and classes of -log p
  const float* p = (*smooth)->probabilities();
  for (int k = 0; k < batch * 5; ++k) all -= std::log(double(p[k]));
  EXPECT_NEAR(smoothed, 0.7 * ce + 0.3 / 5 * all, 1e-4);
  (*plain)->Backward();
  (*smooth)->Backward();
  double differ = 0;
  for (size_t i = 0; i < params.size(); ++i) differ += std::fabs(g_plain[i] - g_smooth[i]);
  EXPECT_GT(differ, 1e-3);
  EXPECT_FALSE(Network::Create(*layout, batch, params.data(), g_plain.data(),
                               NetworkMode::kGradients, 1, false, StepRule{.label_smoothing = 1.f})
                   .ok());
}

// Average pooling over a 7x7 input with windows of 2 (the last row and column are in no window:
// their gradient is 0), between sigmoid layers.
TEST(Network, GradientMatchesFiniteDifferences_SigmoidAndAvgPool) {
  CheckGradients(
      MakeSpec({Conv(3, 2, spec::Activation::kSigmoid), Pool(2, spec::LayerType::kAvgPool),
                Dense(5, spec::Activation::kSigmoid), Softmax(3)},
               {2, 8, 8}),
      2, 4);
}

TEST(Network, GradientMatchesFiniteDifferences_LeakyRelu) {
  CheckGradients(MakeSpec({Conv(3, 3, spec::Activation::kLeakyRelu, 1), Pool(2),
                           Dense(6, spec::Activation::kLeakyRelu), Softmax(4)},
                          {1, 6, 6}),
                 3, 5);
}

// The activations and the average pool compute what they are named for, on known inputs: a
// 1x1 conv of weight 1 and bias 0 passes the input through.
TEST(Network, ActivationsAndAveragePoolComputeTheirFormulas) {
  for (auto a : {spec::Activation::kSigmoid, spec::Activation::kLeakyRelu}) {
    SCOPED_TRACE(spec::ActivationName(a));
    spec::ModelSpec m =
        MakeSpec({Conv(1, 1, a), Pool(2, spec::LayerType::kAvgPool), Softmax(2)}, {1, 2, 2});
    auto layout = ModelLayout::Make(m);
    ASSERT_TRUE(layout.ok());
    std::vector<float> params(layout->num_params(), 0.f), grads(params.size());
    params[0] = 1.f;  // the conv's one weight; its bias (params[1]) stays 0
    // Softmax: class 0 reads the pooled value with weight 1, class 1 with weight 0.
    params[2] = 1.f;
    auto net = Network::Create(*layout, 1, params.data(), grads.data(), NetworkMode::kGradients);
    ASSERT_TRUE(net.ok()) << net.status().ToString();
    const float in[4] = {-2.f, -1.f, 0.5f, 3.f};
    std::copy(in, in + 4, (*net)->input());
    const uint8_t label = 0;
    (*net)->Forward(&label, nullptr);
    const float* probs = (*net)->probabilities();
    float pooled = 0;
    for (float x : in)
      pooled += a == spec::Activation::kSigmoid ? 1.f / (1.f + std::exp(-x))
                                                : (x > 0 ? x : spec::kLeakySlope * x);
    pooled /= 4;
    // p0 / p1 = exp(pooled) / exp(0).
    EXPECT_NEAR(std::log(probs[0] / probs[1]), pooled, 1e-5);
  }
}

// In gradient mode a dropout layer keeps its masks, so the loss is one function to check.
TEST(Network, GradientMatchesFiniteDifferences_Dropout) {
  CheckGradients(MakeSpec({Conv(3, 3, spec::Activation::kTanh), Dropout(0.3), Pool(2),
                           Dense(6, spec::Activation::kRelu), Dropout(0.5), Softmax(3)},
                          {2, 8, 8}),
                 2, 6);
}

// Dropout is left out at evaluation, and while training it changes the output from one pass to
// the next but not on average (a kept input is scaled by 1 / keep): the logit difference, linear
// in the dropped activations, averages to its value without dropout.
TEST(Network, DropoutIsLeftOutAtEvaluationAndUnbiasedInTraining) {
  const spec::Shape in{1, 1, 12};
  auto with = ModelLayout::Make(
      MakeSpec({Dense(16, spec::Activation::kNone), Dropout(0.5), Softmax(2)}, in));
  auto without = ModelLayout::Make(MakeSpec({Dense(16, spec::Activation::kNone), Softmax(2)}, in));
  ASSERT_TRUE(with.ok() && without.ok());
  ASSERT_EQ(with->num_params(), without->num_params());
  std::vector<float> params(with->num_params()), grads(params.size());
  with->InitParams(7, params.data());
  std::vector<float> x(12);
  std::mt19937 rng(7);
  for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  auto logit_gap = [&](Network& n) {
    std::copy(x.begin(), x.end(), n.input());
    n.Forward(nullptr, nullptr);
    return std::log(double(n.probabilities()[0]) / n.probabilities()[1]);
  };
  auto plain = Network::Create(*without, 1, params.data(), nullptr, NetworkMode::kInference);
  auto eval = Network::Create(*with, 1, params.data(), nullptr, NetworkMode::kInference);
  auto train = Network::Create(*with, 1, params.data(), grads.data(), NetworkMode::kSgd);
  ASSERT_TRUE(plain.ok() && eval.ok() && train.ok());
  const double expected = logit_gap(**plain);
  EXPECT_EQ(logit_gap(**eval), expected);
  double sum = 0, sq = 0;
  std::set<double> seen;
  const int kPasses = 4000;
  for (int i = 0; i < kPasses; ++i) {
    const double g = logit_gap(**train);
    sum += g;
    sq += g * g;
    seen.insert(g);
  }
  EXPECT_GT(seen.size(), 100u) << "the masks do not change between passes";
  const double mean = sum / kPasses, sd = std::sqrt(sq / kPasses - mean * mean);
  EXPECT_NEAR(mean, expected, 5 * sd / std::sqrt(double(kPasses)) + 1e-6);
}

TEST(Network, ProbabilitiesSumToOneAndPredictArgmax) {
  auto layout = ModelLayout::Make(
      MakeSpec({Conv(4, 5, spec::Activation::kTanh), Pool(2), Softmax(10)}, {1, 28, 28}));
  ASSERT_TRUE(layout.ok());
  std::vector<float> params(layout->num_params());
  layout->InitParams(7, params.data());
  auto net = Network::Create(*layout, 4, params.data(), nullptr, NetworkMode::kInference);
  ASSERT_TRUE(net.ok());
  std::vector<uint8_t> pixels(4 * 28 * 28);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 31);
  (*net)->SetInputFromBytes(pixels.data());
  int predicted[4];
  EXPECT_EQ((*net)->Forward(nullptr, predicted), 0.f);
  for (int n = 0; n < 4; ++n) {
    const float* row = (*net)->probabilities() + n * 10;
    double sum = 0;
    int best = 0;
    for (int c = 0; c < 10; ++c) {
      sum += row[c];
      if (row[c] > row[best]) best = c;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
    EXPECT_EQ(predicted[n], best);
  }
}

// kSgd's fused in-place update must equal params - lr * (the kGradients gradient).
void CheckSgdMatchesGradient(const spec::ModelSpec& spec, int batch) {
  auto layout = ModelLayout::Make(spec);
  ASSERT_TRUE(layout.ok());
  const int64_t n = layout->num_params();
  std::vector<float> params(static_cast<size_t>(n)), grads(static_cast<size_t>(n));
  layout->InitParams(3, params.data());
  std::vector<float> updated = params;
  auto g = Network::Create(*layout, batch, params.data(), grads.data(), NetworkMode::kGradients);
  auto s = Network::Create(*layout, batch, updated.data(), nullptr, NetworkMode::kSgd);
  ASSERT_TRUE(g.ok() && s.ok());
  std::mt19937 rng(5);
  std::vector<uint8_t> pixels(size_t(layout->input_size() * batch)),
      labels(static_cast<size_t>(batch));
  for (auto& p : pixels) p = uint8_t(rng());
  for (auto& l : labels) l = uint8_t(rng() % layout->classes());
  (*g)->SetInputFromBytes(pixels.data());
  (*s)->SetInputFromBytes(pixels.data());
  const float lg = (*g)->Forward(labels.data(), nullptr);
  const float ls = (*s)->Forward(labels.data(), nullptr);
  EXPECT_FLOAT_EQ(lg, ls);
  (*g)->Backward();
  const float lr = 0.1f;
  (*s)->Backward(lr);
  int changed = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = params[size_t(i)] - lr * grads[size_t(i)];
    ASSERT_NEAR(updated[size_t(i)], want, 1e-5f + 1e-4f * std::fabs(want)) << "parameter " << i;
    changed += updated[size_t(i)] != params[size_t(i)];
  }
  EXPECT_GT(changed, n / 2);
}

TEST(Network, SgdModeAppliesTheGradientInPlace) {
  const auto spec =
      MakeSpec({Conv(3, 3, spec::Activation::kTanh), Pool(2), Dense(7, spec::Activation::kRelu),
                Dense(5, spec::Activation::kTanh), Softmax(4)},
               {1, 8, 8});
  CheckSgdMatchesGradient(spec, 1);
  CheckSgdMatchesGradient(spec, 4);
}

// kSgd with momentum and weight decay follows PyTorch's SGD, step by step: v = mu v + g + wd w
// (weights only), w -= lr v, with g the kGradients gradient at the current parameters; with no
// momentum, w = (1 - lr wd) w - lr g (no velocity; the dense layers' fused update takes the
// decay as its sum scale, rebuilt when the rate changes). Three steps on different images at two
// rates, so the velocity's history and the rebuild show; a shared velocity buffer (a worker's
// batch and remainder Networks) carries the velocity from one Network to the other.
void CheckStepRule(float mu, float wd) {
  const auto spec = MakeSpec({Conv(3, 3, spec::Activation::kRelu, 1), Pool(2),
                              Dense(7, spec::Activation::kTanh), Softmax(4)},
                             {1, 6, 6});
  auto layout = ModelLayout::Make(spec);
  ASSERT_TRUE(layout.ok());
  const int64_t n = layout->num_params();
  const int batch = 2;
  std::vector<float> ref(static_cast<size_t>(n)), grads(static_cast<size_t>(n));
  layout->InitParams(7, ref.data());
  std::vector<bool> is_weight(static_cast<size_t>(n), false);
  for (const auto& lp : layout->params()) {
    for (int64_t k = lp.weights.offset; k < lp.weights.offset + lp.weights.count; ++k)
      is_weight[size_t(k)] = true;
    // Biases far from 0, so that decaying them would show (by 1e-3 a step, above the tolerance).
    for (int64_t k = lp.bias.offset; k < lp.bias.offset + lp.bias.count; ++k) ref[size_t(k)] = 0.5f;
  }
  std::vector<float> stepped = ref, velocity(static_cast<size_t>(n), 0.f);
  std::vector<double> v(static_cast<size_t>(n), 0.0);
  StepRule rule{.momentum = mu, .weight_decay = wd, .velocity = velocity.data()};
  auto g = Network::Create(*layout, batch, ref.data(), grads.data(), NetworkMode::kGradients);
  auto s =
      Network::Create(*layout, batch, stepped.data(), nullptr, NetworkMode::kSgd, 1, false, rule);
  auto s2 =
      Network::Create(*layout, batch, stepped.data(), nullptr, NetworkMode::kSgd, 1, false, rule);
  ASSERT_TRUE(g.ok() && s.ok() && s2.ok()) << s.status().ToString();
  std::mt19937 rng(9);
  std::vector<uint8_t> pixels(static_cast<size_t>(layout->input_size() * batch)),
      labels(static_cast<size_t>(batch));
  const float rates[] = {0.05f, 0.05f, 0.02f};
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    const float lr = rates[step];
    for (auto& p : pixels) p = uint8_t(rng());
    for (auto& l : labels) l = uint8_t(rng() % layout->classes());
    Network& net = step == 1 ? **s2 : **s;  // the second step through the other Network
    (*g)->SetInputFromBytes(pixels.data());
    net.SetInputFromBytes(pixels.data());
    EXPECT_NEAR((*g)->Forward(labels.data(), nullptr), net.Forward(labels.data(), nullptr), 1e-4);
    (*g)->Backward();
    net.Backward(lr);
    double moved = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = size_t(i);
      v[k] = mu * v[k] + grads[k] + (is_weight[k] ? wd * ref[k] : 0.0);
      ref[k] = float(ref[k] - lr * v[k]);
      ASSERT_NEAR(stepped[k], ref[k], 1e-5f + 1e-4f * std::fabs(ref[k])) << "parameter " << i;
      moved += std::fabs(lr * v[k]);
    }
    EXPECT_GT(moved, 1e-3);
  }
  // Held steps are applied elsewhere, without a velocity or a decay.
  EXPECT_FALSE(
      Network::Create(*layout, 1, stepped.data(), nullptr, NetworkMode::kSgd, 2, false, rule).ok());
  EXPECT_FALSE(
      Network::Create(*layout, 1, stepped.data(), nullptr, NetworkMode::kSgd, 1, true, rule).ok());
}

TEST(Network, MomentumAndWeightDecayFollowTheirFormulas) {
  {
    SCOPED_TRACE("momentum and weight decay");
    CheckStepRule(0.9f, 0.05f);
  }
  {
    SCOPED_TRACE("momentum");
    CheckStepRule(0.5f, 0.f);
  }
  {
    SCOPED_TRACE("weight decay");
    CheckStepRule(0.f, 0.05f);
  }
}

// Backward in two halves (BackwardData, then BackwardWeights: a model worker's, which sends its
// input gradient between them) does what Backward does, to the bit, and the first half touches
// neither the parameters nor their gradients: the gradients in kGradients
// mode, the parameters after three steps at two rates in kSgd mode, with plain SGD and with
// momentum and weight decay (whose fused dense update is rebuilt when the rate changes).
void CheckHalves(NetworkMode mode, float mu, float wd) {
  const auto spec = MakeSpec(
      {Conv(3, 3, spec::Activation::kRelu, 1), Pool(2), Conv(4, 3, spec::Activation::kTanh),
       Dense(7, spec::Activation::kTanh), Dense(6, spec::Activation::kRelu), Softmax(4)},
      {2, 8, 8});
  auto layout = ModelLayout::Make(spec);
  ASSERT_TRUE(layout.ok());
  const size_t n = size_t(layout->num_params());
  const int batch = 3;
  std::vector<float> whole(n), halves(n), g_whole(n), g_halves(n), v_whole(n, 0.f),
      v_halves(n, 0.f);
  layout->InitParams(11, whole.data());
  halves = whole;
  const bool sgd = mode == NetworkMode::kSgd;
  auto a = Network::Create(*layout, batch, whole.data(), sgd ? nullptr : g_whole.data(), mode, 1,
                           false, {mu, wd, mu > 0 || wd > 0 ? v_whole.data() : nullptr});
  auto b = Network::Create(*layout, batch, halves.data(), sgd ? nullptr : g_halves.data(), mode, 1,
                           false, {mu, wd, mu > 0 || wd > 0 ? v_halves.data() : nullptr});
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  std::mt19937 rng(5);
  std::vector<uint8_t> pixels(static_cast<size_t>(layout->input_size() * batch)),
      labels(static_cast<size_t>(batch));
  const float rates[] = {0.05f, 0.05f, 0.02f};
  for (float lr : rates) {
    for (auto& p : pixels) p = uint8_t(rng());
    for (auto& l : labels) l = uint8_t(rng() % layout->classes());
    (*a)->SetInputFromBytes(pixels.data());
    (*b)->SetInputFromBytes(pixels.data());
    ASSERT_EQ((*a)->Forward(labels.data(), nullptr), (*b)->Forward(labels.data(), nullptr));
    (*a)->Backward(lr);
    // The data half leaves the weights and their gradients alone: they are the other half's.
    const std::vector<float> before = halves;
    std::fill(g_halves.begin(), g_halves.end(), 0.f);
    (*b)->BackwardData();
    ASSERT_EQ(halves, before);
    ASSERT_EQ(std::count(g_halves.begin(), g_halves.end(), 0.f), std::ptrdiff_t(n));
    (*b)->BackwardWeights(lr);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(whole[i], halves[i]) << "parameter " << i;
      ASSERT_EQ(g_whole[i], g_halves[i]) << "gradient " << i;
    }
  }
  if (sgd) {
    double moved = 0;
    std::vector<float> init(n);
    layout->InitParams(11, init.data());
    for (size_t i = 0; i < n; ++i) moved += std::fabs(whole[i] - init[i]);
    EXPECT_GT(moved, 1e-3);
  } else {
    EXPECT_NE(std::count(g_whole.begin(), g_whole.end(), 0.f), std::ptrdiff_t(n));
  }
}

TEST(Network, BackwardInTwoHalvesIsBackward) {
  {
    SCOPED_TRACE("gradients");
    CheckHalves(NetworkMode::kGradients, 0.f, 0.f);
  }
  {
    SCOPED_TRACE("plain SGD");
    CheckHalves(NetworkMode::kSgd, 0.f, 0.f);
  }
  {
    SCOPED_TRACE("weight decay");
    CheckHalves(NetworkMode::kSgd, 0.f, 0.05f);
  }
  {
    SCOPED_TRACE("momentum and weight decay");
    CheckHalves(NetworkMode::kSgd, 0.9f, 0.05f);
  }
}

// kSgd with apply_every k: k single-image steps leave the shared parameters untouched until
// ApplyPending, which then writes the sum of the k steps (each taken at the same parameters): the
// batch-k mean gradient times k. The held rows are exactly those updates.
TEST(Network, HeldUpdatesApplyTheSumOfTheirSteps) {
  const auto spec = MakeSpec(
      {Conv(3, 3, spec::Activation::kTanh), Pool(2), Dense(7, spec::Activation::kRelu), Softmax(4)},
      {1, 8, 8});
  auto layout = ModelLayout::Make(spec);
  ASSERT_TRUE(layout.ok());
  const int64_t n = layout->num_params();
  const int k = 3;
  std::vector<float> params(static_cast<size_t>(n)), grads(static_cast<size_t>(n));
  layout->InitParams(4, params.data());
  std::vector<float> held = params;
  auto g = Network::Create(*layout, k, params.data(), grads.data(), NetworkMode::kGradients);
  auto h = Network::Create(*layout, 1, held.data(), nullptr, NetworkMode::kSgd, k);
  ASSERT_TRUE(g.ok() && h.ok());
  std::mt19937 rng(8);
  std::vector<uint8_t> pixels(size_t(layout->input_size() * k)), labels(static_cast<size_t>(k));
  for (auto& p : pixels) p = uint8_t(rng());
  for (auto& l : labels) l = uint8_t(rng() % layout->classes());
  (*g)->SetInputFromBytes(pixels.data());
  (*g)->Forward(labels.data(), nullptr);
  (*g)->Backward();
  const float lr = 0.05f;
  for (int i = 0; i < k; ++i) {
    (*h)->SetInputFromBytes(pixels.data() + i * layout->input_size());
    (*h)->Forward(labels.data() + i, nullptr);
    (*h)->Backward(lr);
    EXPECT_EQ((*h)->pending(), i + 1);
    EXPECT_EQ(held, params) << "held updates must not reach the shared parameters yet";
  }
  const auto rows = (*h)->pending_rows(2);  // the dense layer
  EXPECT_EQ(rows.rows, k);
  EXPECT_EQ(rows.units, 7);
  EXPECT_EQ((*h)->pending_rows(0).a, nullptr);  // conv layers hold no rows
  (*h)->ApplyPending();
  EXPECT_EQ((*h)->pending(), 0);
  int changed = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = params[size_t(i)] - lr * k * grads[size_t(i)];
    ASSERT_NEAR(held[size_t(i)], want, 1e-5f + 1e-4f * std::fabs(want)) << "parameter " << i;
    changed += held[size_t(i)] != params[size_t(i)];
  }
  EXPECT_GT(changed, n / 2);
  EXPECT_FALSE(Network::Create(*layout, 1, held.data(), nullptr, NetworkMode::kSgd, 0).ok());
}

TEST(ModelLayout, AdamMnistModelHasExpectedParameterCount) {
  auto layout = ModelLayout::Make(MakeSpec(
      {Conv(10, 5, spec::Activation::kTanh), Pool(2), Conv(20, 5, spec::Activation::kTanh), Pool(2),
       Dense(400, spec::Activation::kTanh), Dense(400, spec::Activation::kTanh), Softmax(10)},
      {1, 28, 28}));
  ASSERT_TRUE(layout.ok());
  // conv 10*1*25+10, conv 20*10*25+20, dense 320*400+400, 400*400+400, softmax 400*10+10.
  EXPECT_EQ(layout->num_params(), 260 + 5020 + 128400 + 160400 + 4010);
  EXPECT_EQ(layout->shapes()[3].out, (spec::Shape{20, 4, 4}));
}

TEST(ModelLayout, InitIsDeterministicPerSeed) {
  auto layout =
      ModelLayout::Make(MakeSpec({Dense(8, spec::Activation::kTanh), Softmax(2)}, {1, 2, 2}));
  ASSERT_TRUE(layout.ok());
  std::vector<float> a(layout->num_params()), b(a.size()), c(a.size());
  layout->InitParams(1, a.data());
  layout->InitParams(1, b.data());
  layout->InitParams(2, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace adam::model
