// DataSource: the data server's state: the augmented training cache, the test set, per-epoch
// shuffles, and the epoch bookkeeping behind Adam's straggler rule.
//
// Epoch e's order is a shuffle of the training set drawn from (seed, e), and each image in it
// uses one precomputed augmentation chosen from (seed, e, image). Trainer r of M gets positions
// r, r+M, r+2M, ... of that order, in batches of `batch_images`. Epoch e closes when
// ceil(quorum * M) trainers have finished their share of it; the rest are told to move on.
// A background thread shuffles the next epoch before it is asked for. Thread-safe.
//
// M may change while the job runs (SetTrainers: trainers scaled on a cluster). An epoch's shares
// are fixed when it is first asked for, with the M of that moment (M_e), so no image moves
// between trainers mid-epoch: a trainer added later has an empty share of it and starts with the
// next one, and only trainers below M_e count towards its quorum. The quorum follows the new M
// at once where it is smaller: ceil(quorum * min(M_e, M)), so an epoch whose removed trainers
// will never finish still closes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "data/augment.h"
#include "data/idx.h"

namespace adam::data_server {

struct DataSourceOptions {
  int trainers = 1;        // M
  double quorum = 0.75;    // fraction of trainers whose finish closes an epoch
  int batch_images = 256;  // images per batch
  uint64_t seed = 1;
  int max_cached_epochs = 8;  // shuffles kept in memory (recomputed on demand beyond that)
  std::vector<std::string> class_names;  // in label order; empty when the data set names none
};

struct BatchView {
  std::string pixels;  // count x image bytes; a string so it moves into a protobuf bytes field
  std::string labels;  // count bytes
  int count = 0;
  bool end_of_share = false;
  bool epoch_closed = false;
  bool job_stopped = false;
};

class DataSource {
 public:
  DataSource(std::unique_ptr<data::AugmentedCache> train, std::vector<uint8_t> train_labels,
             data::Dataset test, DataSourceOptions options);
  ~DataSource();

  // The trainers of the job from now on (see above); m >= 1.
  void SetTrainers(int m);
  int trainers() const;
  // Fills `out` with batch `batch_index` of `trainer`'s share of `epoch`. Fails for a trainer
  // index out of range (at or above both M and M_e).
  Status GetBatch(int trainer, uint32_t epoch, uint32_t batch_index, BatchView* out);
  // Records that `trainer` finished `epoch`: how many with a share of it have, whether it is
  // closed, and whether this call closed it.
  struct Finished {
    int finished = 0;
    bool closed = false;
    bool closed_now = false;
  };
  StatusOr<Finished> FinishEpoch(int trainer, uint32_t epoch);
  // Up to `max_count` test images from `offset`.
  void GetTestBatch(uint32_t offset, uint32_t max_count, BatchView* out) const;
  void Stop();
  bool stopped() const;

  int train_count() const { return train_->count(); }
  int test_count() const { return test_.count; }
  const data::Dataset& test() const { return test_; }
  const DataSourceOptions& options() const { return options_; }
  int variants() const { return train_->variants(); }
  // Number of trainers whose finish closes `epoch` (an epoch not yet asked for: the M of now).
  int quorum_count(uint32_t epoch) const;
  // Images in `trainer`'s share of `epoch` (0 for a trainer added after it started).
  int ShareSize(int trainer, uint32_t epoch) const;
  // Batches served from an epoch order that was ready (shuffled ahead by the prefetcher or an
  // earlier batch), and batches that had to wait for their epoch's shuffle.
  uint64_t order_hits() const { return hits_.load(std::memory_order_relaxed); }
  uint64_t order_misses() const { return misses_.load(std::memory_order_relaxed); }
  // Epoch orders ready beyond the newest epoch a trainer has asked for (the prefetch depth).
  int prefetched_epochs() const;

 private:
  std::shared_ptr<const std::vector<uint32_t>> Order(uint32_t epoch);
  std::vector<uint32_t> Shuffle(uint32_t epoch) const;
  // M_e, fixed at the first call for `epoch`.
  int SharesOfLocked(uint32_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int QuorumLocked(uint32_t epoch) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `trainer` finished `epoch` (a trainer with no share of it counts for nothing); closes the
  // epoch at its quorum. Returns the trainers finished.
  int MarkFinishedLocked(int trainer, uint32_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int ShareSizeOf(int trainer, int shares) const;
  void PrefetchLoop();

  std::unique_ptr<data::AugmentedCache> train_;
  std::vector<uint8_t> train_labels_;
  data::Dataset test_;
  DataSourceOptions options_;

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::map<uint32_t, std::shared_ptr<const std::vector<uint32_t>>> orders_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, std::set<int>> finished_ ABSL_GUARDED_BY(mu_);
  std::set<uint32_t> closed_ ABSL_GUARDED_BY(mu_);
  int trainers_ ABSL_GUARDED_BY(mu_);                    // M
  std::map<uint32_t, int> shares_ ABSL_GUARDED_BY(mu_);  // M_e of the epochs asked for
  uint32_t want_prefetch_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::thread prefetcher_;
  // Counters only, ordering nothing else: relaxed.
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
};

}  // namespace adam::data_server
