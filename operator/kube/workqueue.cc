// WorkQueue.
#include "kube/workqueue.h"

#include <algorithm>
#include <cmath>

namespace adam::kube {

void WorkQueue::AddLocked(const std::string& key) {
  if (shut_down_) return;
  ++adds_;
  if (dirty_.count(key)) return;
  dirty_.insert(key);
  if (processing_.count(key)) return;  // requeued by Done
  queue_.push_back(key);
  cv_.notify_one();
}

void WorkQueue::Add(const std::string& key) {
  MutexLock lock(mu_);
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, std::chrono::milliseconds delay) {
  MutexLock lock(mu_);
  if (delay <= std::chrono::milliseconds(0)) return AddLocked(key);
  if (shut_down_) return;
  const Clock::TimePoint at = options_.clock->Now() + delay;
  // One wait per key: a key already due no later is left as it is (what it is due for covers
  // this add too); one due later is moved to `at`.
  if (auto due = due_.find(key); due != due_.end()) {
    if (due->second <= at) return;
    auto [first, last] = delayed_.equal_range(due->second);
    for (auto d = first; d != last; ++d)
      if (d->second == key) {
        delayed_.erase(d);
        break;
      }
  }
  delayed_.emplace(at, key);
  due_[key] = at;
  cv_.notify_all();
}

void WorkQueue::AddRateLimited(const std::string& key) {
  std::chrono::milliseconds delay;
  {
    MutexLock lock(mu_);
    const int n = failures_[key]++;
    ++retries_;
    const double d = double(options_.base_delay.count()) * std::pow(2.0, std::min(n, 30));
    delay = std::chrono::milliseconds(int64_t(std::min(d, double(options_.max_delay.count()))));
  }
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) {
  MutexLock lock(mu_);
  failures_.erase(key);
}

int WorkQueue::Requeues(const std::string& key) const {
  MutexLock lock(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

std::optional<std::string> WorkQueue::Get() {
  MutexLock lock(mu_);
  while (true) {
    if (shut_down_) return std::nullopt;
    const auto now = options_.clock->Now();
    while (!delayed_.empty() && delayed_.begin()->first <= now) {
      const std::string key = delayed_.begin()->second;
      delayed_.erase(delayed_.begin());
      due_.erase(key);
      AddLocked(key);
    }
    if (!queue_.empty()) {
      std::string key = queue_.front();
      queue_.pop_front();
      dirty_.erase(key);
      processing_.insert(key);
      return key;
    }
    if (delayed_.empty()) {
      lock.Wait(cv_);
    } else {
      // A copy: while this waits, another worker may take (and erase) that entry. Found by ASan.
      const Clock::TimePoint until = delayed_.begin()->first;
      options_.clock->WaitUntil(lock, cv_, until);
    }
  }
}

void WorkQueue::Done(const std::string& key) {
  MutexLock lock(mu_);
  processing_.erase(key);
  if (dirty_.count(key)) {
    queue_.push_back(key);
    cv_.notify_one();
  }
}

void WorkQueue::ShutDown() {
  MutexLock lock(mu_);
  shut_down_ = true;
  cv_.notify_all();
}

size_t WorkQueue::Depth() const {
  MutexLock lock(mu_);
  return queue_.size();
}

uint64_t WorkQueue::adds() const {
  MutexLock lock(mu_);
  return adds_;
}

uint64_t WorkQueue::retries() const {
  MutexLock lock(mu_);
  return retries_;
}

}  // namespace adam::kube
