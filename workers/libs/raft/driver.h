// The Raft driver: runs one `Node` over gRPC with durable `Storage`.
//
// One thread (the loop) owns the node: it ticks every `tick`, steps incoming messages, handles
// proposals and reads, and for each Ready persists (fdatasync) before it sends messages and
// applies entries, as raft.h requires. Messages go out on one long-lived client stream per peer
// (`RaftTransport.Stream`, gRPC's callback API), batching whatever queued while the previous
// write was in flight; a peer that is down costs dropped messages, which Raft tolerates. Every
// `snapshot_entries` applied entries the state machine is snapshotted and the log compacted.
//
// Propose/ReadBarrier/info are thread-safe; the state machine's methods are called only on the
// loop thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/clock.h"
#include "core/status.h"
#include "net/grpc.h"
#include "raft/raft.h"

namespace grpc {
class Service;
}

namespace adam::raft {

class StateMachine {
 public:
  virtual ~StateMachine() = default;
  // Applies a committed normal entry (in index order).
  virtual void Apply(const Entry& entry) = 0;
  // The state after every entry applied so far.
  virtual std::string TakeSnapshot() = 0;
  // Replaces the state by a snapshot's (at startup, or installed from the leader).
  virtual Status Restore(const Snapshot& snapshot) = 0;
};

struct DriverOptions {
  NodeId id = 0;
  std::map<NodeId, std::string> peers;  // every member's Raft address (host:port), own included
  std::string dir;                      // log and snapshot
  std::string cluster_id;               // the group the log belongs to (Storage::Open); "" = any
  std::chrono::milliseconds tick{10};
  int election_ticks = 20;  // campaign after 20..40 silent ticks (200..400 ms)
  int heartbeat_ticks = 2;
  uint64_t snapshot_entries = 8192;
  uint64_t seed = 0;
  // How the members reach each other (the job's mutual TLS, or plain text).
  std::shared_ptr<const net::Transport> transport = net::Transport::Plaintext();
  // Ticks, proposal deadlines and the waits of Propose/ReadBarrier (not owned).
  Clock* clock = Clock::Real();
};

struct DriverInfo {
  Role role = Role::kFollower;
  uint64_t term = 0;
  NodeId leader = 0;
  uint64_t commit = 0;
  uint64_t applied = 0;
  uint64_t proposals = 0;
  uint64_t log_bytes = 0;
  uint64_t ticks = 0;  // ticks the loop has taken (with what they led to, e.g. a campaign)
};

class Driver {
 public:
  // Opens the storage in options.dir, restores `machine` from it and builds the node. The loop
  // does not run until Start().
  static StatusOr<std::unique_ptr<Driver>> Open(const DriverOptions& options,
                                                StateMachine* machine);
  ~Driver();

  // The RaftTransport service to register on this member's gRPC server.
  grpc::Service* service();
  // Called on the loop thread whenever the role or term changes.
  void OnRoleChange(std::function<void(Role role, uint64_t term)> callback);
  void Start();
  void Stop();

  // Proposes `data` and waits until it is committed and applied here. Returns its index;
  // FailedPrecondition when not the leader (naming it), Aborted-like Unavailable when a new
  // leader replaced the entry, DeadlineExceeded on timeout (it may still commit).
  StatusOr<uint64_t> Propose(std::string data, std::chrono::milliseconds timeout);
  // The same without a waiting thread: `done` runs exactly once, on the driver's loop thread
  // (it must not block), with the index once applied here, or the error -- DeadlineExceeded
  // after `timeout` (it may still commit).
  void ProposeAsync(std::string data, std::chrono::milliseconds timeout,
                    std::function<void(StatusOr<uint64_t>)> done);
  // A linearizable read point: returns once this node (the leader) confirmed its leadership with
  // a quorum and applied everything committed before the call. FailedPrecondition elsewhere.
  Status ReadBarrier(std::chrono::milliseconds timeout);
  DriverInfo info() const;

 private:
  struct Impl;
  explicit Driver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace adam::raft
