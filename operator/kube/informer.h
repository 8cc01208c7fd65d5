// An informer: a local cache of one resource kept current by list, then watch.
//
// It lists (recording the list's resourceVersion), then watches from that version, applying
// every event to the cache and passing it to the handler. Bookmarks advance the version without
// an event. A 410 Gone (the version was compacted) lists again and reports the difference as
// events; any other broken stream reconnects from the last version after a backoff (100 ms
// doubling to 5 s). Thread-safe; the handler runs on the informer's thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/mutex.h"
#include "kube/client.h"

namespace adam::kube {

class Informer {
 public:
  using Handler = std::function<void(const WatchEvent&)>;

  // Watches `resource` in `ns` ("" = every namespace) matching `label_selector`. Its back-off
  // between failed lists and watches, and WaitForSync, wait on `clock` (not owned).
  Informer(Client* client, Resource resource, std::string ns, std::string label_selector,
           Handler handler, Clock* clock = Clock::Real());
  ~Informer();

  void Start();
  void Stop();
  // True once the first list has filled the cache.
  bool Synced() const { return synced_.load(); }
  // Blocks until synced or `timeout`; returns Synced().
  bool WaitForSync(std::chrono::milliseconds timeout) const;

  // Cache reads: copies.
  std::optional<Json> Get(const std::string& ns, const std::string& name) const;
  std::vector<Json> List(const std::string& label_key = "",
                         const std::string& label_value = "") const;

  uint64_t lists() const { return lists_.load(); }      // lists made (1 + relists)
  uint64_t watches() const { return watches_.load(); }  // watch streams opened
  std::string resource_version() const;

 private:
  void Run();
  Status ListOnce();
  void Apply(const WatchEvent& ev);
  void Notify(const WatchEvent& ev);

  Client* client_;
  const Resource resource_;
  const std::string ns_;
  const std::string selector_;
  Handler handler_;
  Clock* const clock_;
  mutable Mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, Json> cache_ ABSL_GUARDED_BY(mu_);  // "ns/name" -> object
  std::string version_ ABSL_GUARDED_BY(mu_);
  // synced_ and stop_: written under mu_ (so WaitForSync and sleeps see them), read without it
  // as values on their own; the cache they describe is read under mu_. lists_, watches_: counters.
  std::atomic<bool> synced_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> lists_{0};
  std::atomic<uint64_t> watches_{0};
  std::thread thread_;
};

// "namespace/name" of an object.
std::string KeyOf(const Json& object);

}  // namespace adam::kube
