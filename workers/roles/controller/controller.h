// The parameter-server controller member: the Controller gRPC service over a Raft group whose
// state machine is the shard map (shard_state.h).
//
// Only the leader accepts heartbeats and writes; followers answer with the leader's address.
// The leader's supervisor thread (every 20 ms) bootstraps the map from the job when the group has
// none, declares a parameter server dead when it has not heartbeated for `server_timeout` (a new
// leader first grants every server a full timeout) or when it heartbeats under a new incarnation
// (it restarted, holding only its checkpoint), commits the failover plan (promote the freshest
// copy, add a copy elsewhere), and commits CopyDone when a new copy reports in sync. A server
// that flaps (back from the dead again within `flap_window` of its last return) is on probation
// for `server_probation`: it gets no new copies until it has beaten that long, so one whose
// heartbeats still stall (TCP backing off after a healed partition) is failed over again holding
// nothing instead of taking copies with it each time. A first return gets copies at once: a
// probation then would only leave its shards short of copies for longer.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "adam/v1/controller.grpc.pb.h"
#include "core/clock.h"
#include "core/status.h"
#include "raft/driver.h"

namespace adam::controller {

struct ControllerOptions {
  raft::DriverOptions raft;       // id, members' addresses, state dir, timing
  v1::ControllerState bootstrap;  // the initial map (from the job)
  std::chrono::milliseconds server_timeout{500};
  std::chrono::milliseconds server_probation{2000};
  std::chrono::milliseconds flap_window{10000};
  // How often the leader judges the servers' heartbeats.
  std::chrono::milliseconds supervise_every{20};
  // Copies being filled at once while servers join or leave (PlanRebalance).
  int max_moves = 8;
  // Where the supervisor's rounds, the failure detector, probation and a new leader's grace read
  // the time (not owned). Raft's ticks read raft.clock.
  Clock* clock = Clock::Real();
};

struct ControllerCounters {
  uint64_t heartbeats = 0;
  uint64_t failovers = 0;  // committed Reassign commands for dead servers
  uint64_t copies_done = 0;
  uint64_t restarts = 0;      // servers seen heartbeating under a new incarnation
  uint64_t supervisions = 0;  // rounds in which this leader judged the servers (and wrote)
  uint64_t rebalances = 0;    // resizes this leader saw through to a balanced map
  uint64_t copies_moved = 0;  // by those rebalances
  uint64_t handoffs = 0;      // primaries handed off by those rebalances
};

class Controller {
 public:
  static StatusOr<std::unique_ptr<Controller>> Open(const ControllerOptions& options);
  ~Controller();

  // Both services go on the member's one gRPC server (its address in options.raft.peers).
  grpc::Service* controller_service();
  grpc::Service* raft_service();
  void Start();
  void Stop();

  raft::DriverInfo raft_info() const;
  v1::ControllerState state() const;
  ControllerCounters counters() const;
  // The job's parameter-server count (spec.roles.parameterServer.replicas, followed in its
  // manifest): whichever member leads commits it (a Resize) when the map's differs, then moves
  // copies until every server holds its share (PlanRebalance; event "rebalanced").
  void SetServersWanted(int servers);
  // The failovers this leader committed since the last call, each as the seconds from the dead
  // server's last heartbeat to the commit of the map that replaced it (detection + commit).
  std::vector<double> TakeFailoverSeconds();

 private:
  struct Impl;
  explicit Controller(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace adam::controller
