// ReplicaSync: a trainer's replica against the parameter servers -- what its sync thread does at
// each push (the dense logs taken, the weights pushed and pulled, or, for a split replica, every
// worker's slice) and what that needs to keep between pushes: the trainer's push clock, the
// weights as last pulled, the logs' buffers and the bytes moved. Its own lock; the main thread
// uses it before the sync thread starts and after it ends (the clock a resumed job starts at,
// the weights an evaluation scores, the leave and the byte totals).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/clock.h"
#include "core/mutex.h"
#include "core/status.h"
#include "spec/adamjob.h"
#include "trainer/ps_client.h"
#include "trainer/push_gate.h"
#include "trainer/replica.h"
#include "trainer/slice_sync.h"
#include "trainer/trainer.h"
#include "update/update_plan.h"

namespace adam::trainer {

class ReplicaSync {
 public:
  // `replica` holds `initial` (the weights pulled at clock 0); none of the pointers is owned.
  // The filter (spec.training.communication) runs over the plan's delta spans.
  ReplicaSync(ModelReplica* replica, ParamServerClient* ps, const update::UpdatePlan* plan,
              std::vector<float> initial, const spec::CommunicationSpec& communication,
              PushGate* gate, const TrainerMetrics& metrics, Clock* clock);

  // The push clock of a trainer that starts at `epoch` (a resumed job, a restarted trainer).
  void StartAt(int epoch);
  // One push and pull: the clock moves to the next push, or at `epoch_end` to the next epoch's
  // first (so an epoch's end is a step every trainer reaches: param_server/clock_gate.h). The
  // images the gate counted before it are let go once the pull is in.
  Status Sync(bool epoch_end);
  // Tells the servers this trainer leaves (consistency stops waiting for it); best effort.
  void Leave();

  // The global weights as last pulled (a split replica's are its workers': empty).
  std::vector<float> Weights() const;
  // Bytes pushed (deltas and dense) and pulled so far, the split replica's slices included.
  uint64_t pushed_bytes() const;
  uint64_t pulled_bytes() const;
  uint64_t clock() const;

 private:
  Status SyncWhole(bool epoch_end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every worker pushes its slice, the trainer's own push moves its clock, every worker pulls its
  // slice.
  Status SyncSlices(SliceSyncer& sliced, bool epoch_end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Tick(bool epoch_end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a push and pull: the metrics, and the workers let go.
  void Synced(int64_t seen, Clock::TimePoint t0, Clock::TimePoint t1, uint64_t pushed,
              uint64_t pulled, int64_t held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ModelReplica* const replica_;
  ParamServerClient* const ps_;
  const update::UpdatePlan* const plan_;
  PushGate* const gate_;
  const TrainerMetrics m_;
  Clock* const clock_;

  mutable Mutex mu_;
  // The whole replica's weights against the servers (none for a split replica, whose workers
  // each keep their own slice's).
  std::optional<SliceSync> slices_ ABSL_GUARDED_BY(mu_);
  std::vector<DenseLog> logs_ ABSL_GUARDED_BY(mu_);  // per worker, swapped out at each push
  // Pushes so far: (epoch << 32) | pushes within the epoch.
  uint64_t push_clock_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t slice_push_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // a split replica's workers' own
  uint64_t slice_pull_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ring_waits_seen_ ABSL_GUARDED_BY(mu_) = 0;  // replica->ring_waits() at the last push
};

}  // namespace adam::trainer
