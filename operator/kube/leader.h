// Leader election on a coordination.k8s.io/v1 Lease, after client-go's leaderelection.
//
// A candidate takes the Lease when it is absent, held by itself, or not renewed for
// lease_duration as measured on this candidate's own clock since it last saw the record change
// (no clock sync assumed). The leader renews every retry_period; if it cannot renew for
// renew_deadline it steps down (on_stopped), before another candidate may take over
// (renew_deadline < lease_duration). Writes use the Lease's resourceVersion, so two candidates
// never both win one round. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "kube/client.h"

namespace adam::kube {

struct LeaderOptions {
  std::string name_space = "default";
  std::string name = "adam-operator";
  std::string identity;  // unique per candidate (pod name)
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
};

class LeaderElector {
 public:
  LeaderElector(Client* client, LeaderOptions options, std::function<void()> on_started,
                std::function<void()> on_stopped);
  ~LeaderElector();

  void Start();
  // Stops campaigning; a leader gives the Lease up (clears holderIdentity) so a successor need
  // not wait for it to expire.
  void Stop();
  bool IsLeader() const { return leader_.load(); }

  // One round: acquire or renew. True when this candidate holds the Lease afterwards.
  bool TryAcquireOrRenew();

 private:
  void Run();
  Json LeaseSpec(const Json& old_spec, bool transition) const;

  Client* client_;
  const LeaderOptions o_;
  std::function<void()> on_started_, on_stopped_;
  std::atomic<bool> leader_{false};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  // What this candidate last saw of the Lease, and when (its own clock).
  std::string observed_record_;
  std::chrono::steady_clock::time_point observed_at_{};
  std::chrono::steady_clock::time_point last_renew_{};
};

}  // namespace adam::kube
