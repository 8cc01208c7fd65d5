// Leader election on a coordination.k8s.io/v1 Lease, after client-go's leaderelection.
//
// A candidate takes the Lease when it is absent, held by itself, or not renewed for
// lease_duration as measured on this candidate's own clock since it last saw the record change
// (no clock sync assumed). The leader renews every retry_period. Leading() turns false the moment
// renew_deadline has passed since the last successful renewal, whatever the campaigning thread
// is doing (an API call may hang), and a watchdog then calls on_stopped; a candidate that lost
// the Lease campaigns no more (the process is expected to exit and start again clean).
//
// Why this is safe: a standby takes over no sooner than lease_duration after it saw the last
// renewal, which is after that renewal happened. Writes fenced by Leading() (FencedClient) stop
// at renew_deadline; one already sent ends within the client's request timeout. So with
// renew_deadline + request timeout < lease_duration two leaders never write at once; the
// operator checks this when it starts. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <string>
#include <thread>

#include "core/clock.h"
#include "core/mutex.h"
#include "kube/client.h"

namespace adam::kube {

struct LeaderOptions {
  std::string name_space = "default";
  std::string name = "adam-operator";
  std::string identity;  // unique per candidate (pod name)
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  // Where the Lease's times are measured and the retries wait (not owned; tests: a FakeClock).
  Clock* clock = Clock::Real();
};

// renew_deadline < lease_duration, retry_period < renew_deadline, and room for one request of
// `request_timeout` between the deadline and the lease's end; INVALID_ARGUMENT naming the flag.
Status CheckLeaderTimes(const LeaderOptions& o, std::chrono::milliseconds request_timeout);

class LeaderElector {
 public:
  // `client`'s requests must be bounded (Config::request_timeout) for the guarantee above.
  LeaderElector(Client* client, LeaderOptions options, std::function<void()> on_started,
                std::function<void()> on_stopped);
  ~LeaderElector();

  void Start();
  // Stops campaigning; a leader gives the Lease up (clears holderIdentity) so a successor need
  // not wait for it to expire.
  void Stop();
  // True while this candidate holds the Lease and renewed it less than renew_deadline ago.
  bool Leading() const;

  // One round: acquire or renew. True when this candidate holds the Lease afterwards.
  bool TryAcquireOrRenew();

 private:
  void Run();
  void Watchdog();
  void StepDown(const char* why);
  Json LeaseSpec(const Json& old_spec, bool transition) const;

  Client* client_;
  const LeaderOptions o_;
  std::function<void()> on_started_, on_stopped_;
  // Nanoseconds of the clock at the last successful renewal; 0 while not leading. Read
  // by Leading() on any thread: relaxed is enough, it orders nothing else.
  std::atomic<int64_t> renewed_at_{0};
  std::atomic<bool> stop_{false};  // written under mu_ (so waits see it), read anywhere
  Mutex mu_;
  std::condition_variable cv_;
  bool stepped_down_ ABSL_GUARDED_BY(mu_) = false;  // on_stopped called for this leadership
  std::thread thread_, watchdog_;
  // What this candidate last saw of the Lease, and when (its own clock); the campaign thread's.
  std::string observed_record_;
  Clock::TimePoint observed_at_{};
};

// A Client whose writes (create, update, apply, delete) fail UNAVAILABLE unless `allowed()` is true
// when they start: the reconciler's writes stop the moment leadership may be lost. Reads and
// watches pass through. Thread-safe if `inner` is.
class FencedClient : public Client {
 public:
  FencedClient(Client* inner, std::function<bool()> allowed)
      : inner_(inner), allowed_(std::move(allowed)) {}

  StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) override {
    return inner_->Get(r, ns, name);
  }
  StatusOr<Json> List(const Resource& r, const std::string& ns, const ListOptions& o) override {
    return inner_->List(r, ns, o);
  }
  StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& object) override;
  StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& object) override;
  StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns,
                              const Json& object) override;
  StatusOr<Json> Apply(const Resource& r, const std::string& ns, const Json& object,
                       const std::string& manager) override;
  Status Delete(const Resource& r, const std::string& ns, const std::string& name) override;
  Status ForceDelete(const Resource& r, const std::string& ns, const std::string& name) override;
  Status Watch(const Resource& r, const std::string& ns, const WatchOptions& o,
               const std::function<bool(const WatchEvent&)>& on_event,
               const std::atomic<bool>* stop) override {
    return inner_->Watch(r, ns, o, on_event, stop);
  }

 private:
  Status Check(const char* verb, const Resource& r) const;
  Client* inner_;
  std::function<bool()> allowed_;
};

}  // namespace adam::kube
