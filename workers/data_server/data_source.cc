// DataSource: shuffles, shares, batches and epoch quorum.
#include "data_server/data_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "shard/shard_map.h"

namespace adam::data_server {

DataSource::DataSource(std::unique_ptr<data::AugmentedCache> train,
                       std::vector<uint8_t> train_labels, data::Dataset test,
                       DataSourceOptions options)
    : train_(std::move(train)),
      train_labels_(std::move(train_labels)),
      test_(std::move(test)),
      options_(options) {
  prefetcher_ = std::thread([this] { PrefetchLoop(); });
}

DataSource::~DataSource() {
  {
    MutexLock lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
  prefetcher_.join();
}

int DataSource::quorum_count() const {
  const int q = int(std::ceil(options_.quorum * options_.trainers - 1e-9));
  return std::clamp(q, 1, options_.trainers);
}

int DataSource::ShareSize(int trainer) const {
  const int n = train_->count(), m = options_.trainers;
  return trainer < n ? (n - trainer + m - 1) / m : 0;
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
  if (trainer < 0 || trainer >= options_.trainers)
    return InvalidArgumentError("trainer " + std::to_string(trainer) + " is out of range [0, " +
                                std::to_string(options_.trainers) + ")");
  *out = BatchView();
  {
    MutexLock lock(mu_);
    out->job_stopped = stopped_;
    out->epoch_closed = closed_.count(epoch) > 0;
  }
  if (out->job_stopped || out->epoch_closed) return OkStatus();
  const int share = ShareSize(trainer);
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
    const uint32_t img = (*order)[size_t((first + k) * options_.trainers + trainer)];
    const int variant = int(shard::Mix64(options_.seed ^ (uint64_t{epoch} << 32 | img)) %
                            uint64_t(train_->variants()));
    std::memcpy(out->pixels.data() + k * bytes, train_->Image(variant, int(img)), size_t(bytes));
    out->labels[size_t(k)] = char(train_labels_[img]);
  }
  out->end_of_share = first + count >= share;
  return OkStatus();
}

StatusOr<std::pair<int, bool>> DataSource::FinishEpoch(int trainer, uint32_t epoch) {
  if (trainer < 0 || trainer >= options_.trainers)
    return InvalidArgumentError("trainer " + std::to_string(trainer) + " is out of range");
  MutexLock lock(mu_);
  auto& done = finished_[epoch];
  done.insert(trainer);
  if (int(done.size()) >= quorum_count()) closed_.insert(epoch);
  return std::make_pair(int(done.size()), closed_.count(epoch) > 0);
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
