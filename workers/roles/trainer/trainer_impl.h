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
#include "trainer/replica.h"
#include "trainer/server_wait.h"
#include "trainer/slice_sync.h"
#include "trainer/split_replica.h"
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
        queue(size_t(std::max(1, opt.prefetch_batches))) {}

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
  // The sync thread's state (the main thread's too, before the sync thread starts and after it
  // ends).
  Mutex sync_mu;
  // The whole replica's weights against the servers (not for a split replica, whose workers
  // each keep their own slice's); the filter runs over the parameters that travel as weight
  // deltas (the plan's DeltaSpans).
  std::optional<SliceSync> slices ABSL_GUARDED_BY(sync_mu);
  // Bytes a split replica's slices pushed and pulled (its workers' own clients).
  uint64_t slice_push_bytes ABSL_GUARDED_BY(sync_mu) = 0;
  uint64_t slice_pull_bytes ABSL_GUARDED_BY(sync_mu) = 0;
  // Per worker, swapped out of the replica at each push.
  std::vector<DenseLog> logs ABSL_GUARDED_BY(sync_mu);
  int64_t ring_waits_seen ABSL_GUARDED_BY(sync_mu) = 0;  // replica->ring_waits() at the last push
  // Pushes so far: (epoch << 32) | pushes within the epoch, so an epoch's end is a step every
  // trainer reaches (see param_server/clock_gate.h).
  uint64_t clock ABSL_GUARDED_BY(sync_mu) = 0;
  // The epoch this trainer starts at (the job's epochs finished when it started): 0 for a new
  // job, the checkpoints' for a resumed one. Set before the prefetch thread starts.
  uint32_t first_epoch = 0;
  std::optional<update::UpdatePlan> plan;
  TestSet test;  // the main thread's: the test set and the last evaluation

  float lr = 0;  // this epoch's learning rate; set before the epoch's workers start
  std::atomic<int64_t> images_total{0};       // relaxed: statistics
  std::atomic<int64_t> images_since_sync{0};  // relaxed: a hint for the sync thread
  std::atomic<int64_t> drift_waits{0};        // relaxed: a count (see kMaxUnsyncedPushes)
  FirstError error;  // the run's first error; error.failed() stops every loop

  Mutex sync_wait_mu;
  std::condition_variable sync_cv;
  bool stop_sync ABSL_GUARDED_BY(sync_wait_mu) = false;
  // consistency: sync: workers wait at each push boundary until the push and pull are done.
  Mutex gate_mu;
  std::condition_variable gate_cv;

  // Keeps the first error and wakes every wait: the batch queue's, and the sync gate's.
  void Fail(const Status& s) {
    error.Set(s);
    queue.Close();
    MutexLock lock(gate_mu);
    gate_cv.notify_all();
  }

  Status CheckDataServer();
  Status FetchTestSet();
  Status Sync(bool epoch_end);
  // Sync of a split replica: every worker pushes its slice, the trainer's own push moves its
  // clock, every worker pulls its slice.
  Status SyncSlices(bool epoch_end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu);
  // After a push and pull: the metrics, and the workers let go.
  void Synced(int64_t seen, Clock::TimePoint t0, Clock::TimePoint t1, uint64_t pushed,
              uint64_t pulled, int64_t held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu);
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
