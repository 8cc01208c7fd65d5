// DataSource: shuffles, shares, batches and epoch quorum.
#include "data_server/data_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/thread_name.h"
#include "shard/shard_map.h"

namespace adam::data_server {

DataSource::DataSource(std::unique_ptr<data::AugmentedCache> train,
                       std::vector<uint8_t> train_labels, data::Dataset test,
                       DataSourceOptions options)
    : train_(std::move(train)),
      train_labels_(std::move(train_labels)),
      test_(std::move(test)),
      options_(std::move(options)),
      trainers_(std::max(1, options_.trainers)) {
  prefetcher_ = NamedThread("prefetch", [this] { PrefetchLoop(); });
}

DataSource::~DataSource() {
  {
    MutexLock lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
  prefetcher_.join();
}

void DataSource::SetTrainers(int m) {
  MutexLock lock(mu_);
  trainers_ = std::max(1, m);
  // A smaller quorum may close epochs at once.
  for (const auto& [epoch, done] : finished_)
    if (int(done.size()) >= QuorumLocked(epoch)) closed_.insert(epoch);
}

int DataSource::trainers() const {
  MutexLock lock(mu_);
  return trainers_;
}

int DataSource::SharesOfLocked(uint32_t epoch) {
  auto [it, fresh] = shares_.emplace(epoch, trainers_);
  const int shares = it->second;
  // Epochs long past are rarely asked for again; keep the bookkeeping bounded. The entry just
  // made may be the oldest (a restarted trainer asking for epoch 0 late in a long job) and go at
  // once, so `it` is not read after this.
  while (fresh && shares_.size() > 64) shares_.erase(shares_.begin());
  return shares;
}

int DataSource::QuorumLocked(uint32_t epoch) const {
  auto it = shares_.find(epoch);
  const int m = std::min(it == shares_.end() ? trainers_ : it->second, trainers_);
  const int q = int(std::ceil(options_.quorum * m - 1e-9));
  return std::clamp(q, 1, m);
}

int DataSource::quorum_count(uint32_t epoch) const {
  MutexLock lock(mu_);
  return QuorumLocked(epoch);
}

int DataSource::ShareSizeOf(int trainer, int shares) const {
  const int n = train_->count();
  return trainer < std::min(n, shares) ? (n - trainer + shares - 1) / shares : 0;
}

int DataSource::ShareSize(int trainer, uint32_t epoch) const {
  MutexLock lock(mu_);
  auto it = shares_.find(epoch);
  return ShareSizeOf(trainer, it == shares_.end() ? trainers_ : it->second);
}

std::vector<uint32_t> DataSource::Shuffle(uint32_t epoch) const {
  std::vector<uint32_t> order(size_t(train_->count()));
  std::iota(order.begin(), order.end(), 0u);
  std::mt19937_64 rng(shard::Mix64(options_.seed * 1000003ULL + epoch));
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

std::shared_ptr<const std::vector<uint32_t>> DataSource::Order(uint32_t epoch) {
  {
    MutexLock lock(mu_);
    auto it = orders_.find(epoch);
    if (want_prefetch_ < epoch + 1) {
      want_prefetch_ = epoch + 1;
      cv_.notify_all();
    }
    if (it != orders_.end()) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  auto order = std::make_shared<const std::vector<uint32_t>>(Shuffle(epoch));
  MutexLock lock(mu_);
  orders_.emplace(epoch, order);
  while (int(orders_.size()) > options_.max_cached_epochs) orders_.erase(orders_.begin());
  return order;
}

int DataSource::prefetched_epochs() const {
  MutexLock lock(mu_);
  int n = 0;
  for (const auto& [e, order] : orders_)
    if (e + 1 >= want_prefetch_ && want_prefetch_ > 0) ++n;  // the next epoch onwards
  return n;
}

void DataSource::PrefetchLoop() {
  MutexLock lock(mu_);
  while (true) {
    lock.Await(cv_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return shutdown_ || (want_prefetch_ && !orders_.count(want_prefetch_));
    });
    if (shutdown_) return;
    const uint32_t e = want_prefetch_;
    lock.Unlock();
    auto order = std::make_shared<const std::vector<uint32_t>>(Shuffle(e));
    lock.Lock();
    orders_.emplace(e, order);
    while (int(orders_.size()) > options_.max_cached_epochs) orders_.erase(orders_.begin());
  }
}

Status DataSource::GetBatch(int trainer, uint32_t epoch, uint32_t batch_index, BatchView* out) {
  *out = BatchView();
  int shares = 0;
  {
    MutexLock lock(mu_);
    shares = SharesOfLocked(epoch);
    if (trainer < 0 || trainer >= std::max(trainers_, shares))
      return InvalidArgumentError("trainer " + std::to_string(trainer) + " is out of range [0, " +
                                  std::to_string(trainers_) + ")");
    // A trainer asking for this epoch's images has finished the one before: a data server that
    // restarted learns it again from the requests, so the quorum still closes that epoch.
    if (epoch > 0) MarkFinishedLocked(trainer, epoch - 1);
    out->job_stopped = stopped_;
    out->epoch_closed = closed_.count(epoch) > 0;
  }
  if (out->job_stopped || out->epoch_closed) return OkStatus();
  const int share = ShareSizeOf(trainer, shares);
  const int64_t first = int64_t{batch_index} * options_.batch_images;
  if (first >= share) {
    out->end_of_share = true;
    return OkStatus();
  }
  const int count = int(std::min<int64_t>(options_.batch_images, share - first));
  auto order = Order(epoch);
  const int64_t bytes = train_->image_bytes();
  out->count = count;
  out->pixels.resize(size_t(count * bytes));
  out->labels.resize(size_t(count));
  for (int k = 0; k < count; ++k) {
    const uint32_t img = (*order)[size_t((first + k) * shares + trainer)];
    const int variant = int(shard::Mix64(options_.seed ^ (uint64_t{epoch} << 32 | img)) %
                            uint64_t(train_->variants()));
    std::memcpy(out->pixels.data() + k * bytes, train_->Image(variant, int(img)), size_t(bytes));
    out->labels[size_t(k)] = char(train_labels_[img]);
  }
  out->end_of_share = first + count >= share;
  return OkStatus();
}

StatusOr<DataSource::Finished> DataSource::FinishEpoch(int trainer, uint32_t epoch) {
  MutexLock lock(mu_);
  const int shares = SharesOfLocked(epoch);
  if (trainer < 0 || trainer >= std::max(trainers_, shares))
    return InvalidArgumentError("trainer " + std::to_string(trainer) + " is out of range [0, " +
                                std::to_string(trainers_) + ")");
  const bool was_closed = closed_.count(epoch) > 0;
  Finished f;
  f.finished = MarkFinishedLocked(trainer, epoch);
  f.closed = closed_.count(epoch) > 0;
  f.closed_now = f.closed && !was_closed;
  return f;
}

int DataSource::MarkFinishedLocked(int trainer, uint32_t epoch) {
  auto& done = finished_[epoch];
  // A trainer added after the epoch started had no share of it: its finish proves nothing.
  if (trainer < SharesOfLocked(epoch)) done.insert(trainer);
  if (int(done.size()) >= QuorumLocked(epoch)) closed_.insert(epoch);
  return int(done.size());
}

void DataSource::GetTestBatch(uint32_t offset, uint32_t max_count, BatchView* out) const {
  *out = BatchView();
  if (offset >= uint32_t(test_.count)) {
    out->end_of_share = true;
    return;
  }
  const int count = int(std::min<uint32_t>(max_count, uint32_t(test_.count) - offset));
  const int64_t bytes = test_.image_bytes();
  out->count = count;
  out->pixels.assign(reinterpret_cast<const char*>(test_.pixels.data()) + offset * bytes,
                     size_t(count * bytes));
  out->labels.assign(reinterpret_cast<const char*>(test_.labels.data()) + offset, size_t(count));
  out->end_of_share = offset + count >= uint32_t(test_.count);
}

void DataSource::Stop() {
  MutexLock lock(mu_);
  stopped_ = true;
}

bool DataSource::stopped() const {
  MutexLock lock(mu_);
  return stopped_;
}

}  // namespace adam::data_server
