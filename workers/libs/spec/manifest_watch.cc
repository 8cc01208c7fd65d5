// ManifestWatcher: reads the manifest every period, calls back on a parsed change.
#include "spec/manifest_watch.h"

#include <spdlog/spdlog.h>

#include "core/file.h"

namespace adam::spec {

ManifestWatcher::ManifestWatcher(std::string path, OnChange on_change, Clock* clock,
                                 std::chrono::milliseconds period)
    : path_(std::move(path)), on_change_(std::move(on_change)), clock_(clock), period_(period) {
  MutexLock lock(poll_mu_);
  seen_ = ReadWholeFile(path_).value_or("");
}

ManifestWatcher::~ManifestWatcher() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ManifestWatcher::Start() {
  thread_ = std::thread([this] { Loop(); });
}

bool ManifestWatcher::Poll() {
  MutexLock lock(poll_mu_);
  const auto text = ReadWholeFile(path_);
  if (!text || *text == seen_) return false;  // gone for a moment mid-swap, or unchanged
  seen_ = *text;
  auto job = ParseAdamJob(*text);
  if (!job.ok()) {
    spdlog::warn("{} changed but does not parse; keeping the manifest this role started with: {}",
                 path_, job.status().message());
    return false;
  }
  on_change_(*job);
  return true;
}

void ManifestWatcher::Loop() {
  MutexLock lock(mu_);
  while (!stopping_) {
    const auto until = clock_->Now() + period_;
    while (!stopping_ && clock_->Now() < until) clock_->WaitUntil(lock, cv_, until);
    if (stopping_) return;
    lock.Unlock();
    Poll();
    lock.Lock();
  }
}

std::unique_ptr<ManifestWatcher> FollowCount(const std::string& path, int current,
                                             std::function<int(const AdamJob&)> count_of,
                                             std::string what, std::function<void(int)> set,
                                             Clock* clock) {
  if (path.empty()) return nullptr;
  // Called on the watcher's thread only, one call at a time: `count` needs no lock.
  auto w = std::make_unique<ManifestWatcher>(
      path,
      [count = current, count_of = std::move(count_of), what = std::move(what),
       set = std::move(set)](const AdamJob& job) mutable {
        const int n = count_of(job);
        if (n == count) return;
        spdlog::info("the job now has {} {} (was {})", n, what, count);
        count = n;
        set(n);
      },
      clock);
  w->Start();
  return w;
}

std::unique_ptr<ManifestWatcher> FollowTrainerCount(const std::string& path, int current,
                                                    std::function<void(int)> set, Clock* clock) {
  return FollowCount(
      path, current, [](const AdamJob& job) { return job.roles.trainer.replicas; }, "trainers",
      std::move(set), clock);
}

std::unique_ptr<ManifestWatcher> FollowParamServerCount(const std::string& path, int current,
                                                        std::function<void(int)> set,
                                                        Clock* clock) {
  return FollowCount(
      path, current, [](const AdamJob& job) { return job.roles.parameter_server.replicas; },
      "parameter servers", std::move(set), clock);
}

}  // namespace adam::spec
