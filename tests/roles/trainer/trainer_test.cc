// The trainer in process: a data server and two parameter servers on loopback gRPC, two Trainer
// replicas with two Hogwild workers each, in every consistency model. Also the suite that runs
// under ThreadSanitizer (scripts/tsan.sh): everything here but the weight updates themselves
// (core/hogwild.h) must be race-free.
#include "trainer/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <future>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include "core/ports.h"
#include "data/augment.h"
#include "data_server/data_service.h"
#include "model/layout.h"
#include "net/grpc.h"
#include "param_server/clock_gate.h"
#include "param_server/param_service.h"
#include "roles/trainer/small_model.h"
#include "testing/synthetic.h"
#include "testing/wait.h"
#include "trainer/label_mix.h"
#include "trainer/split_replica.h"
#include "update/update_plan.h"

namespace adam::trainer {
namespace {

// The synthetic training and test sets, shared by `trainers` trainers in batches of 64.
// `blank`: every image alike (all pixels 0), the labels as they were: nothing to learn.
std::unique_ptr<data_server::DataSource> MakeSource(int trainers = 2, bool blank = false) {
  data::Dataset train = testing::SyntheticDataset(800, 1);
  data::Dataset test = testing::SyntheticDataset(200, 2);
  if (blank)
    for (data::Dataset* d : {&train, &test}) std::fill(d->pixels.begin(), d->pixels.end(), 0);
  spec::AugmentSpec aug;
  aug.variants = 1;
  data_server::DataSourceOptions so;
  so.trainers = trainers;
  so.batch_images = 64;
  return std::make_unique<data_server::DataSource>(
      std::make_unique<data::AugmentedCache>(train, aug, 1), train.labels, std::move(test), so);
}

spec::AdamJob Job(spec::Consistency mode) {
  spec::AdamJob job;
  job.name = "in-process";
  job.model = SmallModel(spec::Activation::kRelu);
  job.training.epochs = 3;
  job.training.learning_rate = 0.02;
  job.training.push_every = 20;
  job.training.consistency = mode;
  job.training.max_staleness = 2;
  job.training.dense_updates = spec::DenseUpdates::kActivations;  // both protocols at work
  job.roles.parameter_server.replicas = 2;
  job.roles.parameter_server.shard_bytes = 1024;
  job.roles.trainer.replicas = 2;
  return job;
}

// The data server's calls answered straight from a DataSource (no gRPC threads: the suite
// ThreadSanitizer runs).
class LocalData final : public DataClient {
 public:
  explicit LocalData(data_server::DataSource* s) : s_(s) {}
  Status GetInfo(adam::v1::DatasetInfo* info) override {
    info->set_channels(1);
    info->set_height(12);
    info->set_width(12);
    info->set_trainers(uint32_t(s_->options().trainers));
    info->set_train_count(uint32_t(s_->train_count()));
    return OkStatus();
  }
  Status GetBatch(const adam::v1::GetBatchRequest& req, adam::v1::Batch* out) override {
    ++batches;
    data_server::BatchView b;
    ADAM_RETURN_IF_ERROR(s_->GetBatch(int(req.trainer()), req.epoch(), req.batch_index(), &b));
    data_server::ToProto(std::move(b), out);
    return OkStatus();
  }
  Status GetTestBatch(const adam::v1::GetTestBatchRequest& req, adam::v1::Batch* out) override {
    data_server::BatchView b;
    s_->GetTestBatch(req.offset(), req.max_count(), &b);
    data_server::ToProto(std::move(b), out);
    return OkStatus();
  }
  Status FinishEpoch(const adam::v1::FinishEpochRequest& req,
                     adam::v1::FinishEpochResponse* out) override {
    ADAM_ASSIGN_OR_RETURN(auto f, s_->FinishEpoch(int(req.trainer()), req.epoch()));
    out->set_finished(uint32_t(f.finished));
    out->set_epoch_closed(f.closed);
    return OkStatus();
  }
  Status AskEpoch(const adam::v1::FinishEpochRequest& req, adam::v1::FinishEpochResponse* out,
                  std::chrono::milliseconds /*wait*/) override {
    ++asked;
    return FinishEpoch(req, out);
  }
  std::atomic<int> asked{0};    // AskEpoch calls
  std::atomic<int> batches{0};  // GetBatch calls
  Status StopJob() override {
    s_->Stop();
    return OkStatus();
  }

 private:
  data_server::DataSource* s_;
};

// One parameter vector behind a mutex, with the job's ClockGate: a parameter server in process.
class LocalParams {
 public:
  LocalParams(std::vector<float> init, const update::UpdatePlan* plan, const shard::ShardMap* map,
              const spec::AdamJob& job)
      : w_(std::move(init)),
        plan_(plan),
        map_(map),
        gate_(job.roles.trainer.replicas, job.training.consistency, job.training.max_staleness) {}

  class Client final : public ParamServerClient {
   public:
    Client(LocalParams* p, int index) : p_(p), index_(index) {}
    Status Push(const PushArgs& a) override {
      {
        std::lock_guard<std::mutex> lock(p_->mu_);
        if (a.delta)
          for (const auto& r : p_->plan_->DeltaRanges(0))
            for (int64_t k = 0; k < r.count; ++k) {
              const int64_t i = p_->map_->shards()[r.shard].offset + r.offset + k;
              p_->w_[size_t(i)] += a.delta[i];
            }
        for (const auto& b : a.dense) {
          const int d = p_->plan_->DenseIndex(b.layer);
          const auto& rows = p_->plan_->Rows(0, d);  // one server: every row
          ps::ApplyDense(p_->w_.data(), 0, int64_t(p_->w_.size()),
                         {&p_->plan_->dense()[size_t(d)], rows.data(), int(rows.size()), b.images,
                          b.activations, b.errors});
        }
      }
      if (a.leave) p_->leaves.fetch_add(1);
      p_->gate_.Advance(index_, a.clock, a.leave);
      return OkStatus();
    }
    Status Pull(float* out, uint64_t clock) override {
      std::promise<void> ready;
      p_->gate_.WhenAllowed(clock, [&](bool) {
        std::lock_guard<std::mutex> lock(p_->mu_);
        std::copy(p_->w_.begin(), p_->w_.end(), out);
        ready.set_value();
      });
      ready.get_future().wait();
      return OkStatus();
    }
    uint64_t pushed_bytes() const override { return 0; }
    uint64_t dense_bytes() const override { return 0; }
    uint64_t pulled_bytes() const override { return 0; }

   private:
    LocalParams* p_;
    int index_;
  };

  std::atomic<int> leaves{0};  // pushes that said their trainer leaves

 private:
  std::mutex mu_;
  std::vector<float> w_;  // guarded by mu_
  const update::UpdatePlan* plan_;
  const shard::ShardMap* map_;
  ps::ClockGate gate_;
};

// Two trainers of two Hogwild workers each, every thread of the trainer at work (prefetch, sync,
// workers, evaluation), both update protocols, no gRPC: one parameter server in process.
std::vector<StatusOr<TrainerResult>> RunWithoutNetwork(spec::AdamJob job, bool blank = false) {
  job.roles.parameter_server.replicas = 1;
  auto layout = model::ModelLayout::Make(job.model);
  auto map = shard::ShardMap::Make(layout->num_params(), 1 << 20, 1, job.training.seed);
  const auto plan =
      update::UpdatePlan::Make(*layout, *map, job.training.push_every, job.training.dense_updates);
  auto source_ptr = MakeSource(2, blank);
  data_server::DataSource& source = *source_ptr;
  std::vector<float> init(size_t(layout->num_params()));
  layout->InitParams(job.training.seed, init.data());
  LocalParams params(init, &plan, &*map, job);
  std::vector<StatusOr<TrainerResult>> results(2, InternalError("not run"));
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      TrainerOptions to;
      to.index = t;
      to.threads = 2;
      to.bind = false;
      to.progress_interval = std::chrono::milliseconds(20);  // exercise the progress path too
      Trainer trainer(job, to, {}, std::make_unique<LocalData>(&source),
                      std::make_unique<LocalParams::Client>(&params, t));
      results[size_t(t)] = trainer.Run();
    });
  for (auto& th : threads) th.join();
  return results;
}

class NoNetworkJob : public ::testing::TestWithParam<spec::Consistency> {};

// A parameter-server client whose first push hangs until released, as a push does while the
// servers fail over. Until it is through nothing is pushed, so no worker that waits for it is let
// go: each waits once, whenever it got there.
class StallingClient final : public ParamServerClient {
 public:
  explicit StallingClient(std::unique_ptr<ParamServerClient> inner) : inner_(std::move(inner)) {}
  Status Push(const PushArgs& a) override {
    if (!a.leave && ++pushes_ == 1) {
      stalled_.set_value();
      release_.get_future().wait();
    }
    return inner_->Push(a);
  }
  Status Pull(float* out, uint64_t clock) override { return inner_->Pull(out, clock); }
  uint64_t pushed_bytes() const override { return 0; }
  uint64_t dense_bytes() const override { return 0; }
  uint64_t pulled_bytes() const override { return 0; }
  std::promise<void> stalled_, release_;

 private:
  std::unique_ptr<ParamServerClient> inner_;
  int pushes_ = 0;  // the sync thread's (and the final leave's, after it ends)
};

// While a push hangs, the workers train at most kMaxUnsyncedPushes pushes' worth of images on
// (then wait, counted in adam_trainer_drift_waits_total), and go on once it is through.
TEST(NoNetworkStall, AHangingPushHoldsTheWorkersWithinTheDriftBound) {
  spec::AdamJob job = Job(spec::Consistency::kAsync);
  job.roles.parameter_server.replicas = 1;
  job.roles.trainer.replicas = 1;
  job.training.epochs = 2;
  auto layout = model::ModelLayout::Make(job.model);
  auto map = shard::ShardMap::Make(layout->num_params(), 1 << 20, 1, job.training.seed);
  const auto plan =
      update::UpdatePlan::Make(*layout, *map, job.training.push_every, job.training.dense_updates);
  auto source = MakeSource(1);
  std::vector<float> init(size_t(layout->num_params()));
  layout->InitParams(job.training.seed, init.data());
  LocalParams params(init, &plan, &*map, job);
  auto client = std::make_unique<StallingClient>(std::make_unique<LocalParams::Client>(&params, 0));
  StallingClient* stalling = client.get();
  prometheus::Counter images, drift_waits;
  TrainerMetrics tm;
  tm.images = &images;
  tm.drift_waits = &drift_waits;
  TrainerOptions to;
  to.threads = 2;
  to.bind = false;
  Trainer trainer(job, to, tm, std::make_unique<LocalData>(source.get()), std::move(client));
  std::future<StatusOr<TrainerResult>> run =
      std::async(std::launch::async, [&] { return trainer.Run(); });
  // However the test ends, the push is let through, so the run can end.
  struct Release {
    StallingClient* c;
    ~Release() {
      if (!released) c->release_.set_value();
    }
    bool released = false;
  } release{stalling};
  stalling->stalled_.get_future().wait();
  // Both workers come to wait.
  ASSERT_TRUE(testing::Eventually([&] { return drift_waits.Value() >= 2; }));
  EXPECT_EQ(drift_waits.Value(), 2);
  // Images are counted per batch item once done: the bound, plus the batch each had in hand.
  const double trained = images.Value();
  EXPECT_LE(trained, kMaxUnsyncedPushes * job.training.push_every + 2 * 64) << trained;
  stalling->release_.set_value();
  release.released = true;
  StatusOr<TrainerResult> r = run.get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->epochs, 2);
  EXPECT_GT(r->test_accuracy, 0.5);
}

// Trainer 0 alone of a two-trainer job, over a data source for both (quorum 0.75: both must
// finish an epoch to close it); `wait` bounds its wait at the last epoch.
struct QuorumRun {
  // `stop_first`: the trainer is stopped before its run starts.
  explicit QuorumRun(std::chrono::milliseconds wait, bool stop_first = false) {
    job.roles.parameter_server.replicas = 1;
    job.training.epochs = 2;
    layout = model::ModelLayout::Make(job.model);
    map = shard::ShardMap::Make(layout->num_params(), 1 << 20, 1, job.training.seed);
    plan.emplace(update::UpdatePlan::Make(*layout, *map, job.training.push_every,
                                          job.training.dense_updates));
    std::vector<float> init(size_t(layout->num_params()));
    layout->InitParams(job.training.seed, init.data());
    params.emplace(init, &*plan, &*map, job);
    auto d = std::make_unique<LocalData>(source.get());
    data = d.get();
    TrainerMetrics tm;
    tm.quorum_wait = &waited;
    TrainerOptions to;
    to.threads = 2;
    to.bind = false;
    to.last_epoch_wait = wait;
    trainer.emplace(job, to, tm, std::move(d), std::make_unique<LocalParams::Client>(&*params, 0));
    if (stop_first) trainer->Stop();
    run = std::async(std::launch::async, [this] { return trainer->Run(); });
  }

  spec::AdamJob job = Job(spec::Consistency::kAsync);
  std::unique_ptr<data_server::DataSource> source = MakeSource(2);
  StatusOr<model::ModelLayout> layout = InternalError("unset");
  StatusOr<shard::ShardMap> map = InternalError("unset");
  std::optional<update::UpdatePlan> plan;
  std::optional<LocalParams> params;
  LocalData* data = nullptr;
  prometheus::Counter waited;
  std::optional<Trainer> trainer;
  std::future<StatusOr<TrainerResult>> run;
};

// Trainer 0 does not end the job at its own last epoch while the other trainer's share of it is
// not trained (the final model would miss it): it asks the data server until the quorum has
// finished the epoch, and goes on at once then.
TEST(NoNetworkQuorum, Trainer0WaitsAtTheLastEpochUntilTheQuorumFinishedIt) {
  QuorumRun q(std::chrono::seconds(60));
  ASSERT_TRUE(testing::Eventually([&] { return q.data->asked >= 3; }));
  EXPECT_EQ(q.run.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  // Only the job's last epoch is waited for (the first is not closed either).
  EXPECT_FALSE(q.source->FinishEpoch(0, 0)->closed);
  ASSERT_TRUE(q.source->FinishEpoch(1, 1)->closed);  // the other trainer's last share done
  ASSERT_EQ(q.run.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  StatusOr<TrainerResult> r = q.run.get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->epochs, 2);
  EXPECT_GE(q.waited.Value(), 0.2);
  EXPECT_TRUE(q.source->stopped());  // and then it ended the job
}

// A trainer that never finishes (lost for good) holds the job's end up for the bound only.
TEST(NoNetworkQuorum, Trainer0sWaitForTheQuorumIsBounded) {
  QuorumRun q(std::chrono::milliseconds(300));
  ASSERT_EQ(q.run.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  StatusOr<TrainerResult> r = q.run.get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->epochs, 2);
  EXPECT_GE(q.waited.Value(), 0.3);
  EXPECT_LT(q.waited.Value(), 10);
  EXPECT_GE(q.data->asked, 2);
  EXPECT_TRUE(q.source->stopped());
}

// Stop ends a run that waits (here trainer 0 at the last epoch, for a quorum that does not come):
// Run returns CANCELLED at once, the trainer has left the servers (consistency stops waiting for
// it), and the job is not ended for the other trainers.
TEST(NoNetworkStop, StopEndsTheRunLeavingTheServersWithoutEndingTheJob) {
  QuorumRun q(std::chrono::seconds(60));
  ASSERT_TRUE(testing::Eventually([&] { return q.data->asked >= 2; }));
  q.trainer->Stop();
  ASSERT_EQ(q.run.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  StatusOr<TrainerResult> r = q.run.get();
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
  EXPECT_EQ(q.params->leaves.load(), 1);
  EXPECT_FALSE(q.source->stopped());
  q.trainer->Stop();  // twice: harmless
}

// Stopped before its run, a trainer trains nothing: no batch asked for, no epoch, and it leaves.
TEST(NoNetworkStop, StoppedBeforeRunItTrainsNothing) {
  QuorumRun q(std::chrono::seconds(60), /*stop_first=*/true);
  ASSERT_EQ(q.run.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  StatusOr<TrainerResult> r = q.run.get();
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
  EXPECT_EQ(q.data->batches.load(), 0);
  EXPECT_EQ(q.data->asked, 0);
  EXPECT_EQ(q.params->leaves.load(), 1);
  EXPECT_FALSE(q.source->stopped());
}

// Diverged: a loss that is not a number, infinite, or above twice what guessing costs.
TEST(Divergence, ALossRiseIsWarnedOfAboveFivePercentAndNoise) {
  EXPECT_TRUE(LossRose(0.40, 0.43));
  EXPECT_FALSE(LossRose(0.40, 0.41));      // 2.5%
  EXPECT_FALSE(LossRose(0.40, 0.30));      // fell
  EXPECT_FALSE(LossRose(0.0001, 0.0002));  // doubled, but noise near zero
  EXPECT_TRUE(LossRose(0.01, 0.012));
}

TEST(Divergence, IsALossFarAboveGuessing) {
  EXPECT_EQ(DivergenceMessage(3, 0.45, 10, 0.02, 1), "");
  EXPECT_EQ(DivergenceMessage(1, 2.4, 10, 0.02, 1), "");  // a slow start: about ln 10
  const std::string nan = DivergenceMessage(2, std::nan(""), 10, 0.5, 32);
  EXPECT_NE(nan.find("training diverged in epoch 2: the mean training loss is NaN"),
            std::string::npos)
      << nan;
  EXPECT_NE(nan.find("at learning rate 0.5 with batch size 32"), std::string::npos) << nan;
  EXPECT_NE(
      DivergenceMessage(1, std::numeric_limits<double>::infinity(), 10, 1, 1).find("is infinite"),
      std::string::npos);
  const std::string high = DivergenceMessage(4, 9.3, 10, 1, 1);  // 2 ln 10 = 4.6
  EXPECT_NE(high.find("loss is 9.3"), std::string::npos) << high;
  EXPECT_NE(high.find("guessing among 10 classes costs 2.303"), std::string::npos) << high;
}

// What guessing costs on the labels a trainer was sent.
TEST(LabelMix, GuessingCostsTheEntropyOfTheLabelsSeen) {
  LabelMix none(4);
  EXPECT_DOUBLE_EQ(none.GuessingLoss(0), std::log(4.0));  // before any label
  LabelMix even(4);
  even.Add(std::string("\0\1\2\3\3\2\1\0", 8));
  EXPECT_NEAR(even.GuessingLoss(0), std::log(4.0), 1e-12);
  EXPECT_NEAR(even.GuessingLoss(0.1), std::log(4.0), 1e-12);  // smoothing keeps it even
  LabelMix two(10);  // two classes of ten, as common: ln 2, not ln 10
  two.Add(std::string("\1\7\1\7", 4));
  two.Add(std::string(1, char(200)));  // past the classes: not counted
  EXPECT_NEAR(two.GuessingLoss(0), std::log(2.0), 1e-12);
  LabelMix one(4);
  one.Add(std::string(5, '\2'));
  EXPECT_DOUBLE_EQ(one.GuessingLoss(0), 0);
  // Smoothed by s: the mean target is 1 - s + s/4 for class 2, s/4 for each other.
  const double s = 0.2, hi = 1 - s + s / 4, lo = s / 4;
  EXPECT_NEAR(one.GuessingLoss(s), -hi * std::log(hi) - 3 * lo * std::log(lo), 1e-12);
}

TEST(Divergence, ACollapseIsTwoEpochsNoBetterThanGuessing) {
  const double ln10 = std::log(10.0);
  EXPECT_EQ(CollapseMessage(2, ln10, 0.9 * ln10, ln10, 10, 0.02, 1), "");   // it learns
  EXPECT_EQ(CollapseMessage(2, 0.99 * ln10, ln10, ln10, 10, 0.02, 1), "");  // it learnt
  EXPECT_EQ(CollapseMessage(3, 0.5, 0.6, std::log(2.0), 10, 0.02, 1), "");
  const std::string at = CollapseMessage(3, 2.3031, 2.3027, ln10, 10, 0.04, 64);
  EXPECT_NE(at.find("training collapsed to chance in epoch 3: the mean training loss was 2.3031 "
                    "and is 2.3027, no better than a model that ignores its input (2.3026 on "
                    "these labels, 10 classes), at learning rate 0.04 with batch size 64"),
            std::string::npos)
      << at;
  EXPECT_NE(at.find("lower spec.training.learningRate"), std::string::npos) << at;
  // Two classes of ten in the data: guessing costs ln 2, and a model stuck there collapsed.
  EXPECT_NE(CollapseMessage(2, 0.6931, 0.6940, std::log(2.0), 10, 0.5, 1), "");
}

// Every image alike: nothing can be learnt, so each trainer stops after its second epoch, as a
// run that collapsed does, instead of training all of them at chance.
TEST(NoNetworkCollapse, TrainersStopAfterTwoEpochsAtChance) {
  spec::AdamJob job = Job(spec::Consistency::kAsync);
  job.training.epochs = 6;
  auto results = RunWithoutNetwork(job, /*blank=*/true);
  for (int t = 0; t < 2; ++t) {
    ASSERT_TRUE(results[size_t(t)].ok()) << results[size_t(t)].status().ToString();
    EXPECT_EQ(results[size_t(t)]->epochs, 2) << "trainer " << t;
    EXPECT_NE(results[size_t(t)]->diverged.find("training collapsed to chance in epoch 2"),
              std::string::npos)
        << results[size_t(t)]->diverged;
  }
}

TEST_P(NoNetworkJob, TwoReplicasTrainFarAboveChance) {
  auto results = RunWithoutNetwork(Job(GetParam()));
  for (int t = 0; t < 2; ++t)
    ASSERT_TRUE(results[size_t(t)].ok()) << results[size_t(t)].status().ToString();
  EXPECT_EQ(results[0]->epochs, 3);
  EXPECT_GT(results[0]->test_accuracy, 0.85);
}

INSTANTIATE_TEST_SUITE_P(Modes, NoNetworkJob,
                         ::testing::Values(spec::Consistency::kAsync, spec::Consistency::kSync,
                                           spec::Consistency::kBounded));

// Held updates (applyEvery) with the dense-layer log: rows are logged when applied.
TEST(NoNetworkHeld, TwoReplicasWithHeldUpdatesTrainFarAboveChance) {
  spec::AdamJob job = Job(spec::Consistency::kAsync);
  job.training.apply_every = 4;
  auto results = RunWithoutNetwork(job);
  for (int t = 0; t < 2; ++t)
    ASSERT_TRUE(results[size_t(t)].ok()) << results[size_t(t)].status().ToString();
  EXPECT_GT(results[0]->test_accuracy, 0.85);
}

// A cosine with warmup read at every slice (learningRateSchedule.per: step): the workers read the
// rate while the main thread starts each epoch's (in the suite ThreadSanitizer runs).
TEST(NoNetworkSchedule, TwoReplicasOnAScheduleReadPerStepTrainFarAboveChance) {
  spec::AdamJob job = Job(spec::Consistency::kAsync);
  job.training.warmup_epochs = 1;
  job.training.schedule.type = spec::LearningRateSchedule::Type::kCosine;
  job.training.schedule.final = 0.1;
  job.training.schedule.per_step = true;
  auto results = RunWithoutNetwork(job);
  for (int t = 0; t < 2; ++t)
    ASSERT_TRUE(results[size_t(t)].ok()) << results[size_t(t)].status().ToString();
  EXPECT_GT(results[0]->test_accuracy, 0.85);
}

// Private weight copies per worker thread, their steps exchanged through rings, with the sync
// thread's pushes and pulls (AddToWeights) in both consistency models that differ for it.
class NoNetworkPrivate : public ::testing::TestWithParam<spec::Consistency> {};

TEST_P(NoNetworkPrivate, TwoReplicasWithPrivateWeightsTrainFarAboveChance) {
  spec::AdamJob job = Job(GetParam());
  job.training.thread_weights = spec::ThreadWeights::kPrivate;
  auto results = RunWithoutNetwork(job);
  for (int t = 0; t < 2; ++t)
    ASSERT_TRUE(results[size_t(t)].ok()) << results[size_t(t)].status().ToString();
  EXPECT_EQ(results[0]->epochs, 3);
  EXPECT_GT(results[0]->test_accuracy, 0.85);
}

INSTANTIATE_TEST_SUITE_P(Modes, NoNetworkPrivate,
                         ::testing::Values(spec::Consistency::kAsync, spec::Consistency::kSync));

// A client that counts the pushes carrying weight deltas (not the clock alone) into `deltas`.
class CountingClient final : public ParamServerClient {
 public:
  CountingClient(std::unique_ptr<ParamServerClient> inner, std::atomic<int>* deltas)
      : inner_(std::move(inner)), deltas_(deltas) {}
  Status Push(const PushArgs& a) override {
    if (a.delta != nullptr) ++*deltas_;
    return inner_->Push(a);
  }
  Status Pull(float* out, uint64_t clock) override { return inner_->Pull(out, clock); }
  uint64_t pushed_bytes() const override { return inner_->pushed_bytes(); }
  uint64_t dense_bytes() const override { return inner_->dense_bytes(); }
  uint64_t pulled_bytes() const override { return inner_->pulled_bytes(); }
  uint32_t epochs() const override { return inner_->epochs(); }

 private:
  std::unique_ptr<ParamServerClient> inner_;
  std::atomic<int>* deltas_;
};

// What a job of two trainers over two parameter servers in process did: each trainer's result,
// and the pushes with weight deltas through the trainers' own clients and through slice clients.
struct InProcessRun {
  std::vector<StatusOr<TrainerResult>> results;
  std::atomic<int> whole_deltas{0}, slice_deltas{0};
  std::atomic<int64_t> slice_floats{0};  // every slice client's floats, all trainers
};

// Two trainers of two threads each, over gRPC; with model_workers > 1 each trainer's replica is
// split, its other workers run here too and every worker moves its slice through its own client.
void RunInProcess(const spec::AdamJob& job, int model_workers, InProcessRun* run) {
  auto layout = model::ModelLayout::Make(job.model);
  ASSERT_TRUE(layout.ok());
  const auto& role = job.roles.parameter_server;
  auto map = shard::ShardMap::Make(layout->num_params(), role.shard_bytes, role.replicas,
                                   job.training.seed);
  ASSERT_TRUE(map.ok());
  const auto plan =
      update::UpdatePlan::Make(*layout, *map, job.training.push_every, job.training.dense_updates);

  // Data server.
  auto source_ptr = MakeSource();
  data_server::DataSource& source = *source_ptr;
  data_server::DataService data_service(&source, 4, {});
  auto data_server = net::StartServer(*net::Transport::Plaintext(), "127.0.0.1:0", {&data_service});
  ASSERT_TRUE(data_server.ok());

  // Parameter servers.
  std::vector<float> init(size_t(layout->num_params()));
  layout->InitParams(job.training.seed, init.data());
  ps::BufferPool pool;
  std::vector<std::unique_ptr<ps::ParamStore>> stores;
  std::vector<std::unique_ptr<ps::ClockGate>> gates;
  std::vector<std::unique_ptr<ps::ParamService>> services;
  std::vector<net::Server> servers;
  std::vector<std::string> addresses;
  for (int s = 0; s < 2; ++s) {
    stores.push_back(
        std::make_unique<ps::ParamStore>(*map, s, init.data(), ps::StoreOptions{.threads = 2}));
    gates.push_back(
        std::make_unique<ps::ClockGate>(2, job.training.consistency, job.training.max_staleness));
    services.push_back(std::make_unique<ps::ParamService>(
        stores.back().get(), gates.back().get(), &plan, s, &pool, ps::ParamServiceMetrics{}));
    auto srv =
        net::StartServer(*net::Transport::Plaintext(), "127.0.0.1:0", {services.back().get()});
    ASSERT_TRUE(srv.ok());
    addresses.push_back("127.0.0.1:" + std::to_string(srv->port));
    servers.push_back(std::move(*srv));
  }

  run->results.assign(2, InternalError("not run"));
  std::vector<std::thread> threads;
  std::vector<Status> workers(size_t(2 * model_workers));
  for (int t = 0; t < 2; ++t) {
    GrpcParamServerClientOptions po;
    po.trainer_index = t;
    po.trainer_name = "trainer-" + std::to_string(t);
    SliceConnector connect = [&, po](std::vector<model::SliceRange> slice) mutable {
      for (const auto& r : slice) run->slice_floats += r.count;
      po.slice = std::move(slice);
      auto c = ConnectParamServers(*map, plan, addresses, po);
      if (!c.ok()) return c;
      return StatusOr<std::unique_ptr<ParamServerClient>>(
          std::make_unique<CountingClient>(std::move(*c), &run->slice_deltas));
    };
    std::vector<std::string> exchange;
    for (int k = 0; k < model_workers && model_workers > 1; ++k)
      exchange.push_back("127.0.0.1:" + std::to_string(FreePort()));
    for (int k = 1; k < int(exchange.size()); ++k)
      threads.emplace_back([&, exchange, connect, t, k] {
        SplitOptions so;
        so.threads = 2;
        so.workers = exchange;
        so.connect_slice = connect;
        so.timeout = std::chrono::seconds(60);
        workers[size_t(t * model_workers + k)] = RunModelWorker(*layout, so, k);
      });
    threads.emplace_back([&, po, exchange, connect, t] {
      auto client = ConnectParamServers(*map, plan, addresses, po);
      if (!client.ok()) {
        run->results[size_t(t)] = client.status();
        return;
      }
      TrainerOptions to;
      to.index = t;
      to.threads = 2;
      to.name = po.trainer_name;
      to.bind = false;
      to.model_workers = exchange;
      to.connect_slice = connect;
      Trainer trainer(
          job, to, {},
          MakeGrpcDataClient(net::MakeChannel(*net::Transport::Plaintext(),
                                              "127.0.0.1:" + std::to_string(data_server->port)),
                             std::chrono::seconds(30)),
          std::make_unique<CountingClient>(std::move(*client), &run->whole_deltas));
      run->results[size_t(t)] = trainer.Run();
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& w : workers) EXPECT_TRUE(w.ok()) << w.ToString();
  for (auto& g : gates) g->Close();
  for (auto& s : servers) s.server->Shutdown();
  data_server->server->Shutdown();
}

class InProcessJob : public ::testing::TestWithParam<spec::Consistency> {};

TEST_P(InProcessJob, TwoReplicasTrainFarAboveChance) {
  const spec::AdamJob job = Job(GetParam());
  InProcessRun run;
  RunInProcess(job, 1, &run);
  for (int t = 0; t < 2; ++t)
    ASSERT_TRUE(run.results[size_t(t)].ok()) << run.results[size_t(t)].status().ToString();
  EXPECT_EQ(run.results[0]->epochs, 3);
  EXPECT_GT(run.results[0]->test_accuracy, 0.85);  // chance is 0.25
  EXPECT_GT(run.results[1]->images, 0);
  EXPECT_GT(run.whole_deltas, 0);
}

// Two trainers whose replicas are each split across two model workers: every worker pushes and
// pulls its own slice (the two slices of a replica are the whole vector, once), the trainers'
// own clients carry no weight delta (their clock alone), and with sync consistency no pull is
// served before every slice of the step is in. Both train as the unsplit job does.
class SplitInProcessJob : public ::testing::TestWithParam<spec::Consistency> {};

TEST_P(SplitInProcessJob, EveryModelWorkerMovesItsOwnSliceAndTheReplicasTrain) {
  spec::AdamJob job = Job(GetParam());
  job.training.dense_updates = spec::DenseUpdates::kWeights;
  job.roles.trainer.model_workers = 2;
  InProcessRun run;
  RunInProcess(job, 2, &run);
  for (int t = 0; t < 2; ++t)
    ASSERT_TRUE(run.results[size_t(t)].ok()) << run.results[size_t(t)].status().ToString();
  EXPECT_EQ(run.results[0]->epochs, 3);
  EXPECT_GT(run.results[0]->test_accuracy, 0.85);
  EXPECT_GT(run.results[1]->images, 0);
  EXPECT_EQ(run.whole_deltas, 0);
  EXPECT_GT(run.slice_deltas, 0);
  auto layout = model::ModelLayout::Make(job.model);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(run.slice_floats, 2 * layout->num_params());
  EXPECT_GT(run.results[0]->push_bytes, 0u);  // the slices' bytes are the trainer's
}

INSTANTIATE_TEST_SUITE_P(Modes, SplitInProcessJob,
                         ::testing::Values(spec::Consistency::kAsync, spec::Consistency::kSync));

INSTANTIATE_TEST_SUITE_P(Modes, InProcessJob,
                         ::testing::Values(spec::Consistency::kAsync, spec::Consistency::kSync,
                                           spec::Consistency::kBounded));

}  // namespace
}  // namespace adam::trainer
