// The inside of a Trainer, shared by trainer.cc (setup, the threads, epochs) and trainer_eval.cc
// (the test set, evaluation, the model written). Not a public header.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <optional>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/role_events.h"
#include "core/thread_name.h"
#include "model/layout.h"
#include "trainer/batch_queue.h"
#include "trainer/label_mix.h"
#include "trainer/push_gate.h"
#include "trainer/replica.h"
#include "trainer/replica_sync.h"
#include "trainer/server_wait.h"
#include "trainer/split_replica.h"
#include "trainer/step_rate.h"
#include "trainer/test_set.h"
#include "trainer/trainer.h"
#include "update/update_plan.h"

namespace adam::trainer {

// A run's first error, kept once, and the flag every loop reads to stop (relaxed: a worker that
// reads it late trains one more slice, harmless).
class FirstError {
 public:
  // Keeps `s` unless an error is kept already; the flag is set either way.
  void Set(const Status& s) {
    MutexLock lock(mu_);
    if (first_.ok()) first_ = s;
    failed_.store(true, std::memory_order_relaxed);
  }
  Status Get() const {
    MutexLock lock(mu_);
    return first_;
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }

 private:
  mutable Mutex mu_;
  Status first_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> failed_{false};
};

struct Trainer::Impl {
  Impl(spec::AdamJob j, TrainerOptions o, TrainerMetrics mm, std::unique_ptr<DataClient> d,
       std::unique_ptr<ParamServerClient> p)
      : job(std::move(j)),
        opt(std::move(o)),
        m(mm),
        data(std::move(d)),
        ps(std::move(p)),
        queue(size_t(std::max(1, opt.prefetch_batches))),
        gate(job.training.push_every, job.training.consistency == spec::Consistency::kSync,
             m.drift_waits) {}

  spec::AdamJob job;
  TrainerOptions opt;
  TrainerMetrics m;
  std::unique_ptr<DataClient> data;
  std::unique_ptr<ParamServerClient> ps;
  std::optional<model::ModelLayout> layout;
  BatchQueue queue;

  // The replica: weights written by every worker without locks (Hogwild: the intended race).
  std::unique_ptr<ModelReplica> replica;
  std::vector<double> loss;     // per worker, this epoch; each written by its worker only
  std::vector<int64_t> images;  // per worker, this epoch
  // The epoch this trainer starts at (the job's epochs finished when it started): 0 for a new
  // job, the checkpoints' for a resumed one. Set before the prefetch thread starts.
  uint32_t first_epoch = 0;
  std::optional<update::UpdatePlan> plan;
  // The workers' images since the last push, against the sync thread.
  PushGate gate;
  // The replica against the servers: the sync thread's (the main thread's before it starts and
  // after it ends). Made by Setup.
  std::optional<ReplicaSync> sync;
  TestSet test;  // the main thread's: the test set and the last evaluation

  // The learning rate: the epoch's, started before its workers run; per step, read by the workers
  // at images_total (its share set by CheckDataServer).
  StepRate rate{job.training};
  // The training labels the prefetch thread was sent: what guessing costs on them (a collapse).
  LabelMix label_mix{spec::NumClasses(job.model)};
  std::atomic<int64_t> images_total{0};  // relaxed: statistics, and a step's place in its epoch
  FirstError error;                      // the run's first error; error.failed() stops every loop

  // Keeps the first error and wakes every wait: the batch queue's, and the push gate's.
  void Fail(const Status& s) {
    error.Set(s);
    queue.Close();
    gate.Close();
  }

  Status CheckDataServer();
  Status FetchTestSet();
  void TrainItem(int t, const BatchItem& item);
  void PrefetchLoop();
  void SyncLoop();
  double Evaluate();
  // The phases of Trainer::Run. Setup pulls the model and builds the replica.
  Status Setup(bool evaluates);
  // --evaluate-only: the model the servers hold, evaluated (and written when asked).
  StatusOr<TrainerResult> EvaluateOnly(Clock::TimePoint start);
  // Epochs `first` to the job's last, until an error, a divergence or the target ends them.
  void TrainEpochs(int first, bool evaluates, TrainerResult* result);
  // Where the job is, as the parameter servers know it: the first epoch to train.
  int FirstEpoch();
  // After epoch `e`'s images: the epoch closed with the data server, a sync, the epoch event and
  // metrics, the divergence check, the periodic model. False: training ends here.
  bool EndEpoch(int e, int first, bool evaluates, const BatchItem& marker,
                Clock::TimePoint epoch_start, double* previous_loss, TrainerResult* result);
  // An epoch's mean training loss: false (with a "diverged" event and result->diverged) when it
  // diverged; a warning when it rose since the last epoch.
  bool CheckLoss(int e, int first, double mean, double* previous_loss, TrainerResult* result);
  // Trainer 0 at the job's last epoch, after its own last sync: waits until the data server
  // closes it, asking every 50 ms, at most opt.last_epoch_wait (default: twice the epoch's time,
  // at least 30 s). True when the epoch was open at first and then closed: the other trainers'
  // last updates are in since this trainer's sync, so it pulls once more.
  bool WaitForEpochQuorum(const adam::v1::FinishEpochRequest& req, Clock::Duration epoch_time);
  // Stops the loops and tells the servers this trainer leaves.
  void Leave(std::thread& prefetcher, std::thread& syncer);
  // Writes the weights of the last evaluation to opt.model_out (when given) as ONNX; `epochs`
  // trained, or < 0 when not known (the evaluator).
  Status WriteModel(int epochs);
  // The "done" event: the run's figures (and the last evaluation's per class when `evaluates`).
  void EmitDone(const TrainerResult& result, Clock::TimePoint start, bool evaluates) const;
};

}  // namespace adam::trainer
