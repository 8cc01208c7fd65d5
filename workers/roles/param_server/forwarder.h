// Forwarder: a parameter server's copies kept current (routing.h describes the protocol): every
// `interval` each shard it is the primary of, when changed, sent whole to the shard's other
// copies; a promoted primary's catch-up from its copies; pushes answered once a quorum of copies
// holds them. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "adam/v1/replica.grpc.pb.h"
#include "core/mutex.h"
#include "net/grpc.h"
#include "param_server/param_store.h"
#include "param_server/routing.h"

namespace adam::ps {

class Forwarder {
 public:
  // `quorum`: pushes wait for WhenDurable (see Acknowledgement in routing.h); without it forwards
  // run every `interval` and pushes are answered once applied. Rounds, pauses and the lag are
  // measured on `routing`'s clock; a forward's own deadline is gRPC's, in real time.
  Forwarder(std::shared_ptr<const net::Transport> transport, uint32_t self, Routing* routing,
            ParamStore* store, std::chrono::milliseconds interval);
  ~Forwarder() { Stop(); }
  void Stop();
  uint64_t forwarded_bytes() const { return bytes_.load(); }
  // Replication lag: 0 when the last round left every copy of this server's primary shards at
  // the version it read, else the seconds since a round last did (a copy unreachable, or behind).
  // A round still running past one forward's deadline counts as behind: a copy is not answering.
  double lag_seconds() const;
  // Calls `done` (on the forwarder's thread) with OK once, for every (shard, version) in `need`,
  // a quorum of the shard's in-sync copies holds that version while this server is still its
  // primary; with FAILED_PRECONDITION naming why once this server may no longer serve one of
  // them (deposed, or its lease ran out); UNAVAILABLE when the forwarder stops.
  void WhenDurable(std::vector<std::pair<uint32_t, uint64_t>> need,
                   std::function<void(const grpc::Status&)> done);
  // Pushes waiting for a quorum now.
  size_t waiting() const;
  // How long one forward may take; a copy that misses it is skipped for the rest of its round,
  // so one unreachable copy holds a round up once, not once per shard.
  static constexpr std::chrono::milliseconds kForwardDeadline{1000};
  // How long a promoted primary waits for one copy's state before asking again.
  static constexpr std::chrono::milliseconds kCatchUpDeadline{500};

 private:
  struct Waiter {
    std::vector<std::pair<uint32_t, uint64_t>> need;
    std::function<void(const grpc::Status&)> done;
  };
  void Loop();
  // One forward of a shard's state to one of its copies.
  struct Call;
  // Returns whether it sent anything.
  bool Round();
  // Round's parts: a call for every copy due a forward (false if a shard could not be read or a
  // promoted primary is still catching up), then every call sent at once, its answers recorded as
  // they come (false if a copy did not take its forward).
  bool PrepareCalls(std::vector<std::unique_ptr<Call>>* calls);
  bool SendCalls(const std::vector<std::unique_ptr<Call>>& calls);
  void CatchUp(const std::vector<Routing::CatchUp>& catch_ups);
  // Answers the waiters that are durable or refused (loop thread).
  void Settle();
  v1::ReplicaService::Stub* Stub(const std::string& address);
  int64_t NowNs() const;  // routing's clock
  const std::shared_ptr<const net::Transport> transport_;
  const uint32_t self_;
  Routing* routing_;
  ParamStore* store_;
  const std::chrono::milliseconds interval_;
  // Loop thread only:
  std::map<std::string, std::unique_ptr<v1::ReplicaService::Stub>> stubs_;  // by address
  std::map<std::pair<uint32_t, std::string>, uint64_t> sent_;  // SentVersions (replication.h)
  // Written by the loop thread, read by lag_seconds() on the metrics thread: each a value on its
  // own (sequentially consistent, once a round); a reading that mixes two rounds is one round off.
  std::atomic<uint64_t> bytes_{0};
  std::atomic<bool> in_sync_{true};
  std::atomic<int64_t> round_started_ns_{0};  // 0 between rounds
  // Time (ns, routing's clock) of the last round that ended with every copy current.
  std::atomic<int64_t> in_sync_at_ns_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: runs Loop once everything above exists
};

}  // namespace adam::ps
