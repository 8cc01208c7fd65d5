#include "trainer/replica_sync.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace adam::trainer {

ReplicaSync::ReplicaSync(ModelReplica* replica, ParamServerClient* ps,
                         const update::UpdatePlan* plan, std::vector<float> initial,
                         const spec::CommunicationSpec& communication, PushGate* gate,
                         const TrainerMetrics& metrics, Clock* clock)
    : replica_(replica), ps_(ps), plan_(plan), gate_(gate), m_(metrics), clock_(clock) {
  MutexLock lock(mu_);
  // A split replica's workers each keep their own slice's; without a connector the whole vector
  // travels through the lead (SplitReplica's Read and Add).
  if (!replica_->slice_syncer()) {
    const auto n = int64_t(initial.size());
    slices_.emplace(ps_, std::move(initial), communication, plan_->DeltaSpans(n));
  }
  logs_.resize(size_t(replica_->threads()));
}

void ReplicaSync::StartAt(int epoch) {
  MutexLock lock(mu_);
  push_clock_ = uint64_t(epoch) << 32;
}

Status ReplicaSync::Sync(bool epoch_end) {
  MutexLock lock(mu_);
  SliceSyncer* sliced = replica_->slice_syncer();
  return sliced ? SyncSlices(*sliced, epoch_end) : SyncWhole(epoch_end);
}

void ReplicaSync::Tick(bool epoch_end) {
  push_clock_ = epoch_end ? ((push_clock_ >> 32) + 1) << 32 : push_clock_ + 1;
}

Status ReplicaSync::SyncWhole(bool epoch_end) {
  const int64_t seen = gate_->pending();
  // The dense logs first, then the weights: every logged image's update is in the snapshot (an
  // image logged later may be too: it is sent next time and its local effect comes back with
  // the pull after that).
  std::vector<DenseBatch> dense;
  for (int t = 0; t < replica_->threads(); ++t) {
    DenseLog& log = logs_[size_t(t)];
    replica_->TakeDenseLog(t, &log);
    if (log.images == 0) continue;
    for (size_t k = 0; k < plan_->dense().size(); ++k)
      dense.push_back(
          {plan_->dense()[k].layer, log.images, log.activations[k].data(), log.errors[k].data()});
  }
  Tick(epoch_end);
  const uint64_t pushed0 = ps_->pushed_bytes() + ps_->dense_bytes(), pulled0 = ps_->pulled_bytes();
  const auto t0 = clock_->Now();
  // The workers keep training while the weights are read and while the push and pull travel.
  ADAM_ASSIGN_OR_RETURN(const int64_t held,
                        slices_->Push([this](float* out) { return replica_->Read(out); },
                                      std::move(dense), push_clock_));
  const auto t1 = clock_->Now();
  ADAM_RETURN_IF_ERROR(
      slices_->Pull([this](const float* delta) { return replica_->Add(delta); }, push_clock_));
  Synced(seen, t0, t1, ps_->pushed_bytes() + ps_->dense_bytes() - pushed0,
         ps_->pulled_bytes() - pulled0, held);
  return OkStatus();
}

Status ReplicaSync::SyncSlices(SliceSyncer& sliced, bool epoch_end) {
  const int64_t seen = gate_->pending();
  Tick(epoch_end);
  const uint64_t pushed0 = ps_->pushed_bytes();
  const auto t0 = clock_->Now();
  ADAM_ASSIGN_OR_RETURN(const SliceCounts pushed, sliced.PushSlices());
  // Every slice is in: the trainer's clock moves (a push of the clock alone), and only then may
  // a pull at that clock, this replica's or another's, be served.
  PushArgs tick;
  tick.clock = push_clock_;
  ADAM_RETURN_IF_ERROR(ps_->Push(tick));
  const auto t1 = clock_->Now();
  ADAM_ASSIGN_OR_RETURN(const SliceCounts pulled, sliced.PullSlices(push_clock_));
  slice_push_bytes_ += pushed.pushed_bytes;
  slice_pull_bytes_ += pulled.pulled_bytes;
  Synced(seen, t0, t1, pushed.pushed_bytes + ps_->pushed_bytes() - pushed0, pulled.pulled_bytes,
         pushed.held);
  return OkStatus();
}

void ReplicaSync::Synced(int64_t seen, Clock::TimePoint t0, Clock::TimePoint t1, uint64_t pushed,
                         uint64_t pulled, int64_t held) {
  if (m_.push_seconds) m_.push_seconds->Observe(std::chrono::duration<double>(t1 - t0).count());
  if (m_.pull_seconds) m_.pull_seconds->Observe(clock_->SecondsSince(t1));
  if (m_.held_back) m_.held_back->Increment(double(held));
  // How stale the replica's weights were: images trained on them since the last pull.
  if (m_.staleness) m_.staleness->Set(double(seen));
  if (m_.map_version) m_.map_version->Set(double(ps_->shard_map_version()));
  if (m_.ring_waits) {
    const int64_t waits = replica_->ring_waits();
    m_.ring_waits->Increment(double(waits - ring_waits_seen_));
    ring_waits_seen_ = waits;
  }
  gate_->Synced(seen);
  if (m_.pushes) m_.pushes->Increment();
  if (m_.push_bytes) m_.push_bytes->Increment(double(pushed));
  if (m_.pull_bytes) m_.pull_bytes->Increment(double(pulled));
}

void ReplicaSync::Leave() {
  MutexLock lock(mu_);
  PushArgs leave;
  leave.clock = push_clock_;
  leave.leave = true;
  if (Status st = ps_->Push(leave); !st.ok()) spdlog::warn("leaving: {}", st.message());
}

std::vector<float> ReplicaSync::Weights() const {
  MutexLock lock(mu_);
  return slices_ ? slices_->w0() : std::vector<float>{};
}

uint64_t ReplicaSync::pushed_bytes() const {
  MutexLock lock(mu_);
  return ps_->pushed_bytes() + ps_->dense_bytes() + slice_push_bytes_;
}

uint64_t ReplicaSync::pulled_bytes() const {
  MutexLock lock(mu_);
  return ps_->pulled_bytes() + slice_pull_bytes_;
}

uint64_t ReplicaSync::clock() const {
  MutexLock lock(mu_);
  return push_clock_;
}

}  // namespace adam::trainer
