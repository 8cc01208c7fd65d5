// BatchQueue: the bounded FIFO between the trainer's prefetch thread and its worker threads.
// An item is a batch of images or an epoch-end marker; workers take batches but leave a marker
// at the head for the epoch's owner to take, so no worker runs into the next epoch. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <string>

#include "core/mutex.h"

namespace adam::trainer {

struct BatchItem {
  uint32_t epoch = 0;
  int count = 0;
  std::string pixels;
  std::string labels;
  bool end = false;           // marker: the epoch's data is over (flags below say why)
  bool epoch_closed = false;  // the quorum closed it before this trainer finished its share
  bool job_stopped = false;
};

class BatchQueue {
 public:
  explicit BatchQueue(size_t capacity) : capacity_(capacity) {}

  // Blocks while full. Returns false if the queue was closed.
  bool Push(BatchItem item) {
    MutexLock lock(mu_);
    lock.Await(not_full_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return closed_ || items_.size() < capacity_;
    });
    if (closed_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_all();
    return true;
  }

  // Takes the next batch. Returns false, taking nothing, when the head is an end marker or the
  // queue is closed.
  bool PopBatch(BatchItem* out) {
    MutexLock lock(mu_);
    lock.Await(not_empty_,
               [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_ || !items_.empty(); });
    if (closed_ || items_.front().end) return false;
    *out = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_all();
    return true;
  }

  // Takes the end marker at the head (waiting for it). Returns false if closed.
  bool PopMarker(BatchItem* out) {
    MutexLock lock(mu_);
    lock.Await(not_empty_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return closed_ || (!items_.empty() && items_.front().end);
    });
    if (closed_) return false;
    *out = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_all();
    return true;
  }

  // Wakes every waiter; later pushes and pops fail.
  void Close() {
    MutexLock lock(mu_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

 private:
  const size_t capacity_;
  Mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<BatchItem> items_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace adam::trainer
