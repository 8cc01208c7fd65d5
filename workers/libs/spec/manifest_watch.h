// ManifestWatcher: follows a running job's manifest file for the changes a running job takes
// (the trainer count: trainers scaled on a cluster; the parameter-server count: servers that
// join or leave). On Kubernetes the file is the job's
// ConfigMap, which the kubelet replaces in place (an atomic symlink swap) within about a minute
// of a change; the watcher reads it every `period` and calls `on_change` with the new job when
// its text changed and parses. A text that does not parse is logged once and otherwise ignored:
// the running job keeps the manifest it has. Thread-safe; the callback runs on the watcher's
// thread (or Poll's caller), one call at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/clock.h"
#include "core/mutex.h"
#include "spec/adamjob.h"

namespace adam::spec {

class ManifestWatcher {
 public:
  using OnChange = std::function<void(const AdamJob& job)>;

  // Remembers the file's text now, as the one the role started from. Starts no thread: Start.
  ManifestWatcher(std::string path, OnChange on_change, Clock* clock = Clock::Real(),
                  std::chrono::milliseconds period = std::chrono::seconds(2));
  ~ManifestWatcher();
  ManifestWatcher(const ManifestWatcher&) = delete;
  ManifestWatcher& operator=(const ManifestWatcher&) = delete;

  // Polls every period on a thread of its own until destroyed.
  void Start();
  // Reads the file once; returns whether on_change was called.
  bool Poll();

 private:
  void Loop();

  const std::string path_;
  const OnChange on_change_;
  Clock* const clock_;
  const std::chrono::milliseconds period_;
  Mutex poll_mu_;  // one Poll at a time
  std::string seen_ ABSL_GUARDED_BY(poll_mu_);
  Mutex mu_;
  std::condition_variable cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// What the data server and the parameter servers follow: the trainer count. `set(n)` runs (after
// a log line naming the new and the old count) each time the manifest's
// spec.roles.trainer.replicas differs from the count the role last had, starting from `current`.
// Polls on a thread of its own from now on; null when `path` is empty (a manifest not followed).
std::unique_ptr<ManifestWatcher> FollowTrainerCount(const std::string& path, int current,
                                                    std::function<void(int)> set,
                                                    Clock* clock = Clock::Real());

// What the controller and the local launcher follow: the parameter-server count (elastic
// servers), the same way.
std::unique_ptr<ManifestWatcher> FollowParamServerCount(const std::string& path, int current,
                                                        std::function<void(int)> set,
                                                        Clock* clock = Clock::Real());

// Both of the above: `count_of` reads the count, `what` names it in the log line.
std::unique_ptr<ManifestWatcher> FollowCount(const std::string& path, int current,
                                             std::function<int(const AdamJob&)> count_of,
                                             std::string what, std::function<void(int)> set,
                                             Clock* clock = Clock::Real());

}  // namespace adam::spec
