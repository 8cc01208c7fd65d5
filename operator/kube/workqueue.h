// A rate-limited work queue of keys ("namespace/name"), after client-go's.
//
// A key is queued at most once; a key being processed is never handed to a second worker, and
// an Add while it is processed queues it again after Done, so no change is ever dropped.
// AddRateLimited delays a failing key exponentially (per key) until Forget. Delays are measured on
// the Options' clock. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "core/clock.h"
#include "core/mutex.h"

namespace adam::kube {

class WorkQueue {
 public:
  struct Options {
    std::chrono::milliseconds base_delay{50};  // first retry; doubles per failure
    std::chrono::milliseconds max_delay{60000};
    Clock* clock = Clock::Real();  // not owned; outlives the queue
  };
  WorkQueue() : WorkQueue(Options{}) {}
  explicit WorkQueue(Options options) : options_(options) {}

  // Queues `key` now (once, however often it is added before a worker takes it).
  void Add(const std::string& key);
  // Queues `key` once `delay` has passed, or sooner if added sooner: a key waits once, so the
  // adds of a burst within `delay` queue it once.
  void AddAfter(const std::string& key, std::chrono::milliseconds delay);
  // Queues `key` after its backoff: base_delay * 2^failures, at most max_delay.
  void AddRateLimited(const std::string& key);
  // Resets the key's backoff (after a success).
  void Forget(const std::string& key);
  int Requeues(const std::string& key) const;

  // Blocks until a key is due (returns it, marked processing) or the queue shuts down (nullopt).
  std::optional<std::string> Get();
  // Marks `key` processed; if it was added meanwhile, it is queued again.
  void Done(const std::string& key);
  void ShutDown();

  size_t Depth() const;      // keys waiting now (not delayed, not processing)
  uint64_t adds() const;     // every Add that queued or re-marked a key
  uint64_t retries() const;  // AddRateLimited calls

 private:
  void AddLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirty_ ABSL_GUARDED_BY(mu_);  // queued or to be requeued after Done
  std::set<std::string> processing_ ABSL_GUARDED_BY(mu_);
  std::multimap<Clock::TimePoint, std::string> delayed_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Clock::TimePoint> due_ ABSL_GUARDED_BY(mu_);  // each key's in delayed_
  std::map<std::string, int> failures_ ABSL_GUARDED_BY(mu_);
  uint64_t adds_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t retries_ ABSL_GUARDED_BY(mu_) = 0;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace adam::kube
