// Private weights (threadWeights: private): every worker's copy takes every worker's step and
// every AddToWeights exactly once, across ring wrap-arounds, waits and RunWorkers rounds. Part of
// the suite ThreadSanitizer runs (scripts/tsan.sh).
#include "trainer/replica.h"

#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "model/layout.h"
#include "roles/trainer/small_model.h"

namespace adam::trainer {
namespace {

spec::ModelSpec Model() { return SmallModel(spec::Activation::kTanh); }

constexpr int kDense = 2, kSoftmax = 3;  // the layers whose steps the dense log records

// Private weights on `threads` unbound workers, logging `record` layers, no evaluation.
ReplicaOptions Private(int threads, std::vector<int> record) {
  ReplicaOptions o;
  o.threads = threads;
  o.bind = false;
  o.evaluate = false;
  o.private_weights = true;
  o.record_layers = std::move(record);
  return o;
}

struct Images {
  std::vector<uint8_t> pixels, labels;
};

Images Random(int n, uint32_t seed) {
  Images im;
  std::mt19937 rng(seed);
  for (int i = 0; i < n * 144; ++i) im.pixels.push_back(uint8_t(rng()));
  for (int i = 0; i < n; ++i) im.labels.push_back(uint8_t(rng() % 4));
  return im;
}

// Two workers on RunWorkers' own thread: worker 0 waits (applying nothing) until Release, worker 1
// trains on `im` at learning rate 0.05; `done` is ready once worker 1 has.
struct WorkerZeroHeldUp {
  WorkerZeroHeldUp(Replica* r, const Images& im)
      : run([this, r, &im] {
          r->RunWorkers([&](int t) {
            if (t == 0) {
              released.wait();
              return;
            }
            r->Train(t, im.pixels.data(), im.labels.data(), int(im.labels.size()), 0.05f);
            trained.set_value();
          });
        }) {}
  void Release() {
    release.set_value();
    run.join();
  }
  std::promise<void> release, trained;
  std::shared_future<void> released = release.get_future().share();
  std::future<void> done = trained.get_future();
  std::thread run;  // last: starts once the promises exist
};

// `base` plus every logged step of the dense and softmax layers (W += E^T A, bias += sum of E
// rows), in double.
std::vector<double> Expected(const model::ModelLayout& layout, const std::vector<double>& base,
                             const std::vector<DenseLog>& logs) {
  std::vector<double> w = base;
  const int layers[] = {kDense, kSoftmax};
  for (const auto& log : logs)
    for (size_t k = 0; k < 2; ++k) {
      const auto& p = layout.params()[size_t(layers[k])];
      const int64_t in = layout.shapes()[size_t(layers[k])].in.size(), units = p.bias.count;
      for (int r = 0; r < log.images; ++r)
        for (int64_t u = 0; u < units; ++u) {
          const double e = log.errors[k][size_t(r * units + u)];
          w[size_t(p.bias.offset + u)] += e;
          for (int64_t j = 0; j < in; ++j)
            w[size_t(p.weights.offset + u * in + j)] += e * log.activations[k][size_t(r * in + j)];
        }
    }
  return w;
}

// Three workers at batch 2 (odd counts: single-image remainder steps too) with rings of two steps
// (they wrap and fill all the time), while another thread adds to the weights five times.
TEST(ReplicaPrivate, EveryStepAndAdditionReachesTheWeightsOnce) {
  auto layout = model::ModelLayout::Make(Model());
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const size_t n = size_t(layout->num_params());
  std::vector<float> init(n);
  layout->InitParams(3, init.data());
  ReplicaOptions o = Private(3, {kDense, kSoftmax});
  o.batch = 2;
  o.ring_steps = 2;
  auto r = Replica::Create(*layout, o, init.data());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Images im = Random(3 * 41, 5);
  std::vector<float> add(n);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-0.01f, 0.01f);
  for (auto& x : add) x = u(rng);

  std::vector<double> base(init.begin(), init.end());
  for (int round = 0; round < 2; ++round) {
    std::thread adder([&] {
      for (int i = 0; i < 5; ++i) {
        (*r)->AddToWeights(add.data());
        std::this_thread::yield();
      }
    });
    (*r)->RunWorkers([&](int t) {
      const int64_t first = int64_t{t} * 41;
      for (int i = 0; i < 41; i += 20) {
        const int count = std::min(20, 41 - i);
        (*r)->Train(t, im.pixels.data() + (first + i) * 144, im.labels.data() + first + i, count,
                    0.05f);
      }
    });
    adder.join();
    std::vector<DenseLog> logs(3);
    int images = 0;
    for (int t = 0; t < 3; ++t) {
      (*r)->TakeDenseLog(t, &logs[size_t(t)]);
      images += logs[size_t(t)].images;
    }
    ASSERT_EQ(images, 3 * 41);
    for (size_t i = 0; i < n; ++i) base[i] += 5.0 * add[i];
    const std::vector<double> want = Expected(*layout, base, logs);
    std::vector<float> got(n);
    (*r)->ReadWeights(got.data());
    // Every parameter of the dense and softmax layers; the conv layer's steps are not logged.
    int64_t checked = 0;
    double moved = 0;
    for (int layer : {kDense, kSoftmax})
      for (const auto& range :
           {layout->params()[size_t(layer)].weights, layout->params()[size_t(layer)].bias})
        for (int64_t i = range.offset; i < range.offset + range.count; ++i, ++checked) {
          ASSERT_NEAR(got[size_t(i)], want[size_t(i)], 2e-5) << "round " << round << " param " << i;
          moved += std::abs(want[size_t(i)] - base[size_t(i)]);
        }
    EXPECT_GT(checked, 0);
    EXPECT_GT(moved / double(checked), 1e-3);  // the steps are far larger than the tolerance
    // The conv layer trained too (its steps are not logged: only that it moved is checked).
    const auto& conv = layout->params()[0].weights;
    double conv_moved = 0;
    for (int64_t i = conv.offset; i < conv.offset + conv.count; ++i)
      conv_moved += std::abs(got[size_t(i)] - base[size_t(i)]);
    EXPECT_GT(conv_moved, 0);
    for (size_t i = 0; i < n; ++i) base[i] = got[i];
  }
}

// After RunWorkers every copy holds the same weights: each worker's next step starts from them.
// One image per worker with learning rate 0 changes nothing, and each step's logged activations
// are computed from its worker's own copy.
TEST(ReplicaPrivate, EveryCopyStartsTheNextRoundFromTheSameWeights) {
  auto layout = model::ModelLayout::Make(Model());
  ASSERT_TRUE(layout.ok());
  std::vector<float> init(size_t(layout->num_params()));
  layout->InitParams(4, init.data());
  const ReplicaOptions o = Private(3, {kSoftmax});
  auto r = Replica::Create(*layout, o, init.data());
  ASSERT_TRUE(r.ok());
  const Images train = Random(3 * 30, 6), probe = Random(1, 7);
  (*r)->RunWorkers([&](int t) {
    (*r)->Train(t, train.pixels.data() + t * 30 * 144, train.labels.data() + t * 30, 30, 0.05f);
  });
  std::vector<float> delta(init.size(), 0.f);
  delta[size_t(layout->params()[0].weights.offset)] = 0.5f;  // an addition between rounds
  (*r)->AddToWeights(delta.data());
  std::vector<DenseLog> drop(3), logs(3);
  for (int t = 0; t < 3; ++t) (*r)->TakeDenseLog(t, &drop[size_t(t)]);
  (*r)->RunWorkers(
      [&](int t) { (*r)->Train(t, probe.pixels.data(), probe.labels.data(), 1, 0.f); });
  for (int t = 0; t < 3; ++t) (*r)->TakeDenseLog(t, &logs[size_t(t)]);
  // Worker 0 logs every worker's step: three rows of the softmax layer's input for the same
  // image, each computed on its worker's copy: equal only if the copies are.
  ASSERT_EQ(logs[0].images, 3);
  EXPECT_EQ(logs[1].images + logs[2].images, 0);
  const auto& a = logs[0].activations[0];
  const size_t in = a.size() / 3;
  for (size_t row = 1; row < 3; ++row)
    for (size_t j = 0; j < in; ++j) ASSERT_EQ(a[row * in + j], a[j]) << "row " << row << " " << j;
}

// A step joins the dense log only once it is in copy 0 (what ReadWeights copies): the trainer
// pushes the log's rows and then the snapshot's other changes, so a logged step missing from the
// snapshot would reach the replica twice (the pulled weights and its later local copy). Worker 0
// is held up while worker 1 trains: its steps are not logged yet; once worker 0 has applied
// them, they are.
TEST(ReplicaPrivate, AStepIsLoggedOnlyOnceCopyZeroHoldsIt) {
  auto layout = model::ModelLayout::Make(Model());
  ASSERT_TRUE(layout.ok());
  const size_t n = size_t(layout->num_params());
  std::vector<float> init(n);
  layout->InitParams(8, init.data());
  const ReplicaOptions o = Private(2, {kDense, kSoftmax});
  auto r = Replica::Create(*layout, o, init.data());
  ASSERT_TRUE(r.ok());
  const Images im = Random(10, 11);
  WorkerZeroHeldUp run(r->get(), im);
  run.done.wait();
  const std::vector<double> base(init.begin(), init.end());
  auto check = [&](const std::vector<DenseLog>& logs, int want_images) {
    int images = 0;
    for (const auto& l : logs) images += l.images;
    EXPECT_EQ(images, want_images);
    const std::vector<double> want = Expected(*layout, base, logs);
    std::vector<float> got(n);
    (*r)->ReadWeights(got.data());
    for (int layer : {kDense, kSoftmax})
      for (const auto& range :
           {layout->params()[size_t(layer)].weights, layout->params()[size_t(layer)].bias})
        for (int64_t i = range.offset; i < range.offset + range.count; ++i)
          ASSERT_NEAR(got[size_t(i)], want[size_t(i)], 2e-5) << "param " << i;
  };
  std::vector<DenseLog> logs(2);
  for (int t = 0; t < 2; ++t) (*r)->TakeDenseLog(t, &logs[size_t(t)]);
  check(logs, 0);  // worker 1's steps are in its own copy only
  run.Release();
  for (int t = 0; t < 2; ++t) (*r)->TakeDenseLog(t, &logs[size_t(t)]);
  check(logs, 10);
  EXPECT_EQ((*r)->ring_waits(), 0);  // 10 steps fit in the 32-step ring
}

// A worker a whole ring ahead of a peer waits until the peer applies its steps, and says so.
TEST(ReplicaPrivate, AWorkerAWholeRingAheadWaitsForItsPeer) {
  auto layout = model::ModelLayout::Make(Model());
  ASSERT_TRUE(layout.ok());
  std::vector<float> init(size_t(layout->num_params()));
  layout->InitParams(9, init.data());
  ReplicaOptions o = Private(2, {});
  o.ring_steps = 4;
  auto r = Replica::Create(*layout, o, init.data());
  ASSERT_TRUE(r.ok());
  const Images im = Random(10, 12);
  WorkerZeroHeldUp run(r->get(), im);
  // Worker 0 applies nothing while held up, so worker 1 cannot publish its fifth step.
  EXPECT_EQ(run.done.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  run.Release();
  EXPECT_GE((*r)->ring_waits(), 1);
}

TEST(ReplicaPrivate, RefusesHeldUpdates) {
  auto layout = model::ModelLayout::Make(Model());
  ASSERT_TRUE(layout.ok());
  std::vector<float> init(size_t(layout->num_params()));
  ReplicaOptions o = Private(1, {});
  o.apply_every = 4;
  auto r = Replica::Create(*layout, o, init.data());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("apply_every"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace adam::trainer
