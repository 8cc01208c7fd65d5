// Trainer: Hogwild workers, the push/pull sync thread, the prefetch thread, epochs (evaluation
// and the model written in trainer_eval.cc; the Impl they share in trainer_impl.h).
#include "trainer/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/role_events.h"
#include "core/thread_name.h"
#include "core/version.h"
#include "model/layout.h"
#include "model/onnx.h"
#include "trainer/batch_queue.h"
#include "trainer/replica.h"
#include "trainer/server_wait.h"
#include "trainer/slice_sync.h"
#include "trainer/split_replica.h"
#include "trainer/trainer_impl.h"
#include "update/update_plan.h"

namespace adam::trainer {

Trainer::Trainer(spec::AdamJob job, TrainerOptions options, TrainerMetrics metrics,
                 std::unique_ptr<DataClient> data, std::unique_ptr<ParamServerClient> ps)
    : impl_(std::make_unique<Impl>(std::move(job), std::move(options), metrics, std::move(data),
                                   std::move(ps))) {}

Trainer::~Trainer() = default;

Status Trainer::Impl::CheckDataServer() {
  adam::v1::DatasetInfo info;
  ADAM_RETURN_IF_ERROR(data->GetInfo(&info));
  const auto& in = job.model.input;
  test.SetClassNames({info.class_names().begin(), info.class_names().end()});
  if (int(info.channels()) != in.channels || int(info.height()) != in.height ||
      int(info.width()) != in.width)
    return InvalidArgumentError("data server images are " + std::to_string(info.channels()) + "x" +
                                std::to_string(info.height()) + "x" + std::to_string(info.width()) +
                                " but spec.model.input is " + std::to_string(in.channels) + "x" +
                                std::to_string(in.height) + "x" + std::to_string(in.width));
  if (opt.index < 0) return InvalidArgumentError("--index must be >= 0");
  // A trainer added to a running job (scaled on a cluster) may start before the data server has
  // read the new count from the job's manifest (a ConfigMap the kubelet updates within about a
  // minute): it waits for it.
  ServerWait wait(std::chrono::minutes(5), nullptr, nullptr);
  while (opt.index >= int(info.trainers())) {
    const std::string count = std::to_string(info.trainers());
    if (!wait.Again("the data server to count trainer " + std::to_string(opt.index),
                    "it serves " + count + " trainers"))
      return InvalidArgumentError("--index " + std::to_string(opt.index) + " is not below the " +
                                  count + " trainers the data server serves (" + wait.Expired() +
                                  ")");
    ADAM_RETURN_IF_ERROR(data->GetInfo(&info));
  }
  // This trainer's share of an epoch, for a schedule per step (the data server deals each epoch's
  // images out evenly; a trainer count that changes later moves it a little).
  const int64_t trainers = std::max<int64_t>(1, info.trainers());
  rate.SetShare((int64_t{info.train_count()} + trainers - 1) / trainers);
  return OkStatus();
}

void Trainer::Impl::TrainItem(int t, const BatchItem& item) {
  const auto* px = reinterpret_cast<const uint8_t*>(item.pixels.data());
  const auto* lb = reinterpret_cast<const uint8_t*>(item.labels.data());
  // Slices of pushEvery images keep the sync thread's count fresh within a batch.
  const int step = std::max(1, std::min(job.training.push_every, item.count));
  for (int i = 0; i < item.count && !error.failed(); i += step) {
    gate.Admit();
    const int n = std::min(step, item.count - i);
    loss[size_t(t)] += replica->Train(t, px + int64_t{i} * layout->input_size(), lb + i, n,
                                      rate.At(images_total.load(std::memory_order_relaxed)));
    if (Status st = replica->status(); !st.ok()) {
      Fail(st);
      return;
    }
    images[size_t(t)] += n;
    images_total.fetch_add(n, std::memory_order_relaxed);
    gate.Trained(n);
  }
  if (m.images) m.images->Increment(item.count);
}

void Trainer::Impl::PrefetchLoop() {
  for (uint32_t e = first_epoch; e < uint32_t(job.training.epochs); ++e) {
    for (uint32_t b = 0;; ++b) {
      if (error.failed()) return;
      adam::v1::GetBatchRequest req;
      req.set_trainer(uint32_t(opt.index));
      req.set_epoch(e);
      req.set_batch_index(b);
      adam::v1::Batch resp;
      if (Status st = data->GetBatch(req, &resp); !st.ok()) {
        Fail(st);
        return;
      }
      if (Status st = CheckBatchSizes(resp, layout->input_size(), "a batch"); !st.ok()) {
        Fail(st);
        return;
      }
      for (unsigned char l : resp.labels())
        if (l >= layout->classes()) {
          Fail(DataLossError("data server sent label " + std::to_string(l) + ", not below " +
                             std::to_string(layout->classes()) + " classes"));
          return;
        }
      label_mix.Add(resp.labels());
      if (resp.count() > 0) {
        BatchItem item;
        item.epoch = e;
        item.count = int(resp.count());
        item.pixels = std::move(*resp.mutable_pixels());
        item.labels = std::move(*resp.mutable_labels());
        if (!queue.Push(std::move(item))) return;
      }
      if (resp.end_of_share() || resp.epoch_closed() || resp.job_stopped()) {
        BatchItem marker;
        marker.epoch = e;
        marker.end = true;
        marker.epoch_closed = resp.epoch_closed();
        marker.job_stopped = resp.job_stopped();
        if (!queue.Push(std::move(marker))) return;
        if (resp.job_stopped()) return;
        break;
      }
    }
  }
}

void Trainer::Impl::SyncLoop() {
  auto last_progress = opt.clock->Now();
  for (;;) {
    const bool due = gate.AwaitDue(opt.clock, std::chrono::milliseconds(100));
    if (gate.stopped()) break;
    if (due) {
      if (Status st = sync->Sync(false); !st.ok()) {
        Fail(st);
        return;
      }
    }
    if (opt.clock->Now() - last_progress >= opt.progress_interval) {
      last_progress = opt.clock->Now();
      events::Emit(events::Progress{.trainer = opt.index,
                                    .images_total = images_total.load(std::memory_order_relaxed)});
    }
  }
}

Status Trainer::Impl::Setup(bool evaluates) {
  const size_t n = size_t(layout->num_params());
  std::vector<float> w0(n);
  ADAM_RETURN_IF_ERROR(ps->Pull(w0.data(), 0));
  ReplicaOptions ro;
  for (const auto& d : plan->dense()) ro.record_layers.push_back(d.layer);
  ro.threads = opt.threads;
  ro.batch = job.training.batch_size;
  ro.apply_every = job.training.apply_every;
  ro.private_weights = job.training.thread_weights == spec::ThreadWeights::kPrivate;
  ro.momentum = float(job.training.momentum);
  ro.weight_decay = float(job.training.weight_decay);
  ro.label_smoothing = float(job.training.label_smoothing);
  ro.eval_batch = opt.eval_batch;
  ro.bind = opt.bind;
  ro.evaluate = evaluates;
  if (opt.model_workers.empty() || opt.evaluate_only) {  // an evaluator needs no workers
    ADAM_ASSIGN_OR_RETURN(replica, Replica::Create(*layout, ro, w0.data()));
  } else {
    SplitOptions so;
    so.threads = ro.threads;
    so.batch = ro.batch;
    so.eval_batch = ro.eval_batch;
    so.momentum = ro.momentum;
    so.weight_decay = ro.weight_decay;
    so.label_smoothing = ro.label_smoothing;
    so.workers = opt.model_workers;
    so.transport = opt.transport;
    so.communication = job.training.communication;
    so.connect_slice = opt.connect_slice;
    ADAM_ASSIGN_OR_RETURN(replica, CreateSplitReplica(*layout, so, w0.data()));
  }
  sync.emplace(replica.get(), ps.get(), &*plan, std::move(w0), job.training.communication, &gate, m,
               opt.clock);
  loss.assign(size_t(opt.threads), 0);
  images.assign(size_t(opt.threads), 0);
  spdlog::info("workers: {}", replica->placement());
  return OkStatus();
}

// 0 for a new job; the epochs the servers' checkpoints hold for a resumed one (the schedule goes
// on from there); the job's epoch for a trainer restarted while the others train on.
int Trainer::Impl::FirstEpoch() {
  const int epochs = job.training.epochs;
  const int first = int(std::min<uint32_t>(ps->epochs(), uint32_t(epochs)));
  first_epoch = uint32_t(first);
  if (first == 0) return 0;
  sync->StartAt(first);
  if (first < epochs)
    spdlog::info(
        "the parameter servers hold {} epochs finished: going on at epoch {} of {} "
        "(learning rate {:g})",
        first, first + 1, epochs, spec::LearningRateAt(job.training, first));
  else
    spdlog::info("the parameter servers hold all {} epochs: nothing left to train", epochs);
  events::Emit(events::Resumed{.trainer = opt.index, .epochs = first});
  return first;
}

bool Trainer::Impl::EndEpoch(int e, int first, bool evaluates, const BatchItem& marker,
                             Clock::TimePoint epoch_start, double* previous_loss,
                             TrainerResult* result) {
  adam::v1::FinishEpochRequest req;
  req.set_trainer(uint32_t(opt.index));
  req.set_epoch(uint32_t(e));
  adam::v1::FinishEpochResponse finished;
  if (Status st = data->FinishEpoch(req, &finished); !st.ok()) {
    Fail(st);
    return false;
  }
  if (Status st = sync->Sync(/*epoch_end=*/true); !st.ok()) {
    Fail(st);
    return false;
  }
  // The sync comes first: under sync and bounded consistency the others' pulls wait for it.
  if (evaluates && e + 1 == job.training.epochs && !finished.epoch_closed() &&
      !marker.job_stopped && WaitForEpochQuorum(req, opt.clock->Now() - epoch_start))
    if (Status st = sync->Sync(/*epoch_end=*/false); !st.ok()) {
      Fail(st);
      return false;
    }
  double epoch_loss = 0;
  int64_t epoch_images = 0;
  for (int t = 0; t < opt.threads; ++t)
    epoch_loss += loss[size_t(t)], epoch_images += images[size_t(t)];
  const double acc = evaluates ? Evaluate() : -1;
  result->epochs = e + 1;
  result->test_accuracy = acc;
  events::Emit(
      events::Epoch{.trainer = opt.index,
                    .epoch = e + 1,
                    .learning_rate = rate.epoch_rate(),
                    .images = epoch_images,
                    .images_total = images_total.load(),
                    .loss = epoch_images > 0 ? epoch_loss / double(epoch_images) : 0.0,
                    .seconds = opt.clock->SecondsSince(epoch_start),
                    .epoch_closed_early = marker.epoch_closed,
                    .test_accuracy = evaluates ? std::optional<double>(acc) : std::nullopt});
  if (m.epoch) m.epoch->Set(e + 1);
  if (m.loss && epoch_images > 0) m.loss->Set(epoch_loss / epoch_images);
  if (m.accuracy && evaluates) m.accuracy->Set(acc);
  if (epoch_images > 0 &&
      !CheckLoss(e, first, epoch_loss / double(epoch_images), previous_loss, result))
    return false;
  // spec.output.everyEpochs: the model so far, over the same file (the last epoch's below).
  const int every = job.output.every_epochs;
  if (evaluates && every > 0 && (e + 1) % every == 0 && e + 1 < job.training.epochs)
    if (Status st = WriteModel(e + 1); !st.ok()) {
      Fail(st);
      return false;
    }
  if (marker.job_stopped) return false;
  const auto& target = job.training.target_accuracy;
  return !(evaluates && target && acc >= *target);
}

bool Trainer::Impl::CheckLoss(int e, int first, double mean, double* previous_loss,
                              TrainerResult* result) {
  result->diverged = DivergenceMessage(e + 1, mean, spec::NumClasses(job.model), rate.epoch_rate(),
                                       job.training.batch_size);
  if (result->diverged.empty() && e > first)
    result->diverged = CollapseMessage(
        e + 1, *previous_loss, mean, label_mix.GuessingLoss(job.training.label_smoothing),
        spec::NumClasses(job.model), rate.epoch_rate(), job.training.batch_size);
  if (!result->diverged.empty()) {
    events::Emit(events::Diverged{
        .trainer = opt.index, .epoch = e + 1, .loss = mean, .message = result->diverged});
    return false;
  }
  if (e > first && LossRose(*previous_loss, mean))
    spdlog::warn(
        "the training loss rose from {:.4f} (epoch {}) to {:.4f} (epoch {}) at learning "
        "rate {:g}: a rate too high for batch size {} makes SGD overshoot; if it keeps "
        "rising, lower spec.training.learningRate",
        *previous_loss, e, mean, e + 1, rate.epoch_rate(), job.training.batch_size);
  *previous_loss = mean;
  return true;
}

bool Trainer::Impl::WaitForEpochQuorum(const adam::v1::FinishEpochRequest& req,
                                       Clock::Duration epoch_time) {
  using std::chrono::seconds;
  const Clock::Duration limit = opt.last_epoch_wait.count() > 0
                                    ? Clock::Duration(opt.last_epoch_wait)
                                    : std::max<Clock::Duration>(seconds(30), 2 * epoch_time);
  const auto start = opt.clock->Now();
  auto note = start + seconds(5);
  const int epoch = int(req.epoch()) + 1;
  adam::v1::FinishEpochResponse r;
  bool closed = false;
  int asked = 0;
  while (!error.failed()) {
    ++asked;
    // An unreachable data server is waited for within what is left of the bound, not the data
    // client's own (longer) server wait.
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(limit - (opt.clock->Now() - start));
    if (Status st = data->AskEpoch(req, &r, left); !st.ok()) {
      spdlog::warn("asking the data server whether epoch {} is closed: {}", epoch, st.message());
      break;
    }
    if ((closed = r.epoch_closed())) break;
    const auto now = opt.clock->Now();
    if (now - start >= limit) break;
    if (now >= note) {
      spdlog::info("epoch {}: waiting for the epoch quorum ({} trainers have finished it)", epoch,
                   r.finished());
      note += seconds(5);
    }
    opt.clock->SleepFor(std::chrono::milliseconds(50));
  }
  const double waited = opt.clock->SecondsSince(start);
  if (m.quorum_wait) m.quorum_wait->Increment(waited);
  if (closed && asked > 1)
    spdlog::info("epoch {}: the epoch quorum finished it after {:.1f} s of waiting", epoch, waited);
  else if (!closed && !error.failed())
    spdlog::warn(
        "epoch {}: only {} trainers had finished it after {:.1f} s of waiting; the final model "
        "goes without the rest of their shares",
        epoch, r.finished(), waited);
  return closed && asked > 1;
}

void Trainer::Impl::Leave(std::thread& prefetcher, std::thread& syncer) {
  gate.Stop();
  queue.Close();
  syncer.join();
  prefetcher.join();
  // Consistency stops waiting for this trainer (best effort: the servers may be gone).
  sync->Leave();
}

StatusOr<TrainerResult> Trainer::Impl::EvaluateOnly(Clock::TimePoint start) {
  TrainerResult result;
  result.test_accuracy = Evaluate();
  result.seconds = opt.clock->SecondsSince(start);
  spdlog::info("the model the parameter servers hold: test accuracy {:.2f}%",
               100 * result.test_accuracy);
  events::Emit(events::Evaluated{.trainer = opt.index,
                                 .test_accuracy = result.test_accuracy,
                                 .seconds = result.seconds,
                                 .classes = test.PerClass()});
  ADAM_RETURN_IF_ERROR(WriteModel(-1));
  return result;
}

void Trainer::Impl::TrainEpochs(int first, bool evaluates, TrainerResult* result) {
  double previous_loss = 0;
  for (int e = first; e < job.training.epochs && !error.failed(); ++e) {
    const auto epoch_start = opt.clock->Now();
    rate.Start(e, images_total.load(std::memory_order_relaxed));
    std::fill(loss.begin(), loss.end(), 0.0);
    std::fill(images.begin(), images.end(), 0);
    replica->RunWorkers([this](int t) {
      BatchItem item;
      while (queue.PopBatch(&item)) TrainItem(t, item);
    });
    BatchItem marker;
    if (error.failed() || !queue.PopMarker(&marker)) break;
    if (!EndEpoch(e, first, evaluates, marker, epoch_start, &previous_loss, result)) break;
  }
}

void Trainer::Stop() { impl_->Fail(Status(StatusCode::kCancelled, "the trainer was stopped")); }

StatusOr<TrainerResult> Trainer::Run() {
  Impl& s = *impl_;
  const auto start = s.opt.clock->Now();
  {
    ADAM_ASSIGN_OR_RETURN(update::JobLayout derived, update::DeriveJobLayout(s.job));
    s.layout = std::move(derived.layout);
    s.plan = std::move(derived.plan);
  }
  ADAM_RETURN_IF_ERROR(s.CheckDataServer());
  const bool evaluates = s.opt.index == 0 || s.opt.evaluate_only;
  if (evaluates) ADAM_RETURN_IF_ERROR(s.FetchTestSet());
  ADAM_RETURN_IF_ERROR(s.Setup(evaluates));
  TrainerResult result;
  if (s.opt.evaluate_only) return s.EvaluateOnly(start);
  const int epochs = s.job.training.epochs;
  const int first = s.FirstEpoch();
  result.epochs = first;
  std::thread prefetcher = NamedThread("prefetch", [&] { s.PrefetchLoop(); });
  std::thread syncer = NamedThread("sync", [&] { s.SyncLoop(); });
  const auto train_start = s.opt.clock->Now();
  if (evaluates && first == epochs) {
    // A job resumed after its last epoch: its result is the model the servers hold.
    result.test_accuracy = s.Evaluate();
    events::Emit(events::Evaluated{.trainer = s.opt.index,
                                   .test_accuracy = result.test_accuracy,
                                   .seconds = std::nullopt,
                                   .classes = s.test.PerClass()});
  }
  s.TrainEpochs(first, evaluates, &result);
  result.seconds = s.opt.clock->SecondsSince(train_start);
  if (const int64_t w = s.gate.drift_waits(); w > 0)
    spdlog::info("workers waited {} times for a push, {} pushes ahead of the last", w,
                 kMaxUnsyncedPushes);
  result.images = s.images_total.load();
  if (evaluates && !s.error.failed() && result.diverged.empty()) {
    // Ends the job for every trainer: the last epoch is done or the target is reached.
    if (Status st = s.data->StopJob(); !st.ok()) spdlog::warn("stopping the job: {}", st.message());
  }
  s.Leave(prefetcher, syncer);
  if (Status err = s.error.Get(); !err.ok()) return err;
  if (evaluates && result.diverged.empty()) ADAM_RETURN_IF_ERROR(s.WriteModel(result.epochs));
  result.push_bytes = s.sync->pushed_bytes();
  result.pull_bytes = s.sync->pulled_bytes();
  s.EmitDone(result, start, evaluates);
  return result;
}

bool LossRose(double previous, double loss) {
  return loss > previous * 1.05 && loss - previous >= 1e-3;
}

std::string DivergenceMessage(int epoch, double loss, int classes, double learning_rate,
                              int batch_size) {
  const double uniform = std::log(double(std::max(2, classes)));
  if (std::isfinite(loss) && loss <= 2 * uniform) return "";
  char value[32];
  if (std::isnan(loss))
    std::snprintf(value, sizeof value, "NaN");
  else if (std::isinf(loss))
    std::snprintf(value, sizeof value, "infinite");
  else
    std::snprintf(value, sizeof value, "%.4g", loss);
  char text[640];
  std::snprintf(text, sizeof text,
                "training diverged in epoch %d: the mean training loss is %s (guessing among %d "
                "classes costs %.3f) at learning rate %g with batch size %d; lower "
                "spec.training.learningRate (by 10x to start), or add a learningRateDecay",
                epoch, value, classes, uniform, learning_rate, batch_size);
  return text;
}

std::string CollapseMessage(int epoch, double previous_loss, double loss, double guessing,
                            int classes, double learning_rate, int batch_size) {
  if (!(previous_loss >= 0.995 * guessing && loss >= 0.995 * guessing)) return "";
  char text[896];
  std::snprintf(text, sizeof text,
                "training collapsed to chance in epoch %d: the mean training loss was %.4f and "
                "is %.4f, no better than a model that ignores its input (%.4f on these labels, "
                "%d classes), at learning rate %g with batch size %d. A step too large silences "
                "a model's ReLUs and no later epoch brings them back: lower "
                "spec.training.learningRate, or add warmupEpochs (if the rate is already tiny, "
                "it moves nothing: raise it)",
                epoch, previous_loss, loss, guessing, classes, learning_rate, batch_size);
  return text;
}

}  // namespace adam::trainer
