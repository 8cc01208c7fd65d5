// A deterministic simulation of the failover protocol (param_server/routing.h): the controller
// leader's failure detector and planner (controller::Supervisor over controller::ShardState),
// parameter servers (ps::Routing, ps::ParamStore and the protocol's decisions in
// param_server/replication.h: forwards, durability, a copy's acceptance, a promoted primary's
// catch-up, heartbeats) and trainers that route pushes by the controller's map and re-send them
// (same session and sequence number) when refused. The code under test is the project's own; what
// the simulation replaces is threads, timers and gRPC: one seeded event loop moves every message
// and every clock.
//
// Faults, chosen by the seed: message delay (so reordering) and retransmission, partitions
// (one-way too), parameter-server crashes (a restart holds nothing: a new incarnation with zeroed
// shards), pauses (a process frozen while time goes on), controller leader changes (an election
// gap, and the deposed leader, a node of its own, still answering heartbeats with its stale map
// for up to two election timeouts), and every clock running fast or slow within a bound.
//
// Checked after every step, the first violation recorded:
// - one writer: at most one running server accepts updates for a shard at any moment;
// - no acknowledged update lost: every state a server serves or sends holds every push a server
//   acknowledged (one float per trainer counts the trainer's pushes applied to the shard, and its
//   push mark says which the state has: the count must match the mark, so a push applied twice or
//   a gap shows);
// Converge then heals everything and checks liveness: every push acknowledged, every shard back
// to its full set of copies, each holding exactly the primary's state.
//
// The promise is for the loss of any minority of machines at a time, so a server fault (a crash,
// a pause, a partition cutting a server off) starts only when the job is healthy: every server
// up, in touch with the leader and on the committed map, registered as the process it is, and
// every shard with all its copies in sync. With three copies, that is one server out at a time,
// and back (refilled) before the next. Leader changes, trainers cut off and late messages
// come at any time. With second_pause, the copy a failover promoted is frozen right after, the
// first server still out: two failures within one recovery. With any_partition, partitions cut any
// set of nodes at any time; that is beyond the promise, and only "one writer" and "copies converge"
// are checked.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "controller/shard_state.h"
#include "controller/supervisor.h"
#include "core/clock.h"
#include "param_server/param_store.h"
#include "param_server/replication.h"
#include "param_server/routing.h"
#include "shard/shard_map.h"

namespace adam::failover_sim {

using namespace std::chrono_literals;

struct Faults {
  // Probability a packet of a message is lost: gRPC runs over TCP, which sends it again, so the
  // message arrives late: 100..180 ms, so that two late heartbeats in a row stay within the
  // controller's failure timeout (a longer stall is a partition, and a fault of its own); with
  // any_partition, 200..400 ms. Messages are lost only to partitions and crashes.
  double drop = 0;
  int max_delay = 1;         // ticks: delivery after 1..max_delay ticks
  double partition = 0;      // per tick: probability a partition starts (if none is on)
  double one_way = 0.5;      // probability a partition cuts one direction only
  double crash = 0;          // per tick: probability a server crashes (when a minority may)
  double pause = 0;          // per tick: probability a running server is paused
  double leader_change = 0;  // per tick: probability the controller leader changes
  double drift = 0;          // every clock runs at 1 +- up to this
  double resize = 0;         // elastic: per tick, probability the server count changes
};

struct Options {
  int servers = 3;
  int copies = 3;
  int shards = 3;
  int trainers = 2;
  Faults faults;
  // Partitions cut any set of nodes (a majority of servers, the controller from all of them),
  // at any time: beyond the promise, so only "one writer" and "copies converge" are checked.
  bool any_partition = false;
  // The copy a failover just promoted frozen within a few ticks, before its first forward,
  // while the first fault may still be on: two failures within one recovery. A frozen server comes
  // back with what it held, so no acknowledged update may be lost: a shard whose survivors may lack
  // some must wait for it. Every check holds.
  bool second_pause = false;
  // Elastic servers: the job starts with servers - 1 of them; when it is healthy, the last one
  // joins (a Resize, then the process starts) or leaves (a Resize; it exits once the controller
  // has moved its copies, controller/shard_state.h PlanRebalance), at faults.resize per tick.
  // Primaries are handed over while their old primary still runs: "one writer" and "no
  // acknowledged update lost" are checked through every handoff.
  bool elastic = false;
  bool trace = false;  // every decision to stderr, for replaying a seed
};

// Simulated time: one tick is 5 ms. The periods are the real ones (routing.h, controller.h).
inline constexpr auto kTick = 5ms;
inline constexpr int64_t kBeatTicks = 10;         // ControllerLink: every 50 ms
inline constexpr int64_t kBeatDeadline = 100;     // its RPC deadline, 500 ms
inline constexpr int64_t kJudgeTicks = 4;         // the supervisor: every 20 ms
inline constexpr int64_t kForwardDeadline = 200;  // Forwarder::kForwardDeadline
inline constexpr int64_t kCatchUpDeadline = 100;  // Forwarder::kCatchUpDeadline
inline constexpr int64_t kPushDeadline = 200;     // a trainer re-routes a push after 1 s
inline constexpr int64_t kElectionTicks = 40;     // DriverOptions: 20 ticks of 10 ms
inline constexpr auto kElection = 200ms;

class Sim {
 public:
  Sim(uint64_t seed, Options options);
  ~Sim();

  // One tick: faults, then every node's timers, then the messages due.
  void Step();
  // Stops the faults, heals the network, restarts every crashed server, lets every paused one go
  // on, and finishes the trainers' pushes; returns whether every shard then has all its copies,
  // holding the primary's exact state and every push, within `max_ticks`.
  bool Converge(int max_ticks);

  bool ok() const { return failure_.empty(); }
  // The committed map, what each server says of each shard and what each trainer waits for.
  std::string Describe() const;
  const std::string& failure() const { return failure_; }
  // What happened, for the test's own "the faults did happen" checks.
  struct Counts {
    uint64_t pushes_acked = 0;
    uint64_t pushes_refused = 0;
    uint64_t pulls_served = 0;
    uint64_t failovers = 0;  // Reassign commands naming dead servers
    uint64_t repairs = 0;    // other Reassign commands
    uint64_t crashes = 0;
    uint64_t pauses = 0;
    uint64_t second_pauses = 0;  // second_pause: servers frozen right after a promotion
    uint64_t partitions = 0;
    uint64_t leader_changes = 0;
    uint64_t catch_ups = 0;
    uint64_t forwards = 0;
    uint64_t dropped = 0;  // messages lost to partitions
    uint64_t retransmits = 0;
    uint64_t resizes = 0;   // elastic: server count changes
    uint64_t retired = 0;   // elastic: servers that left and exited
    uint64_t handoffs = 0;  // primaries handed over by a rebalance (the old one alive)
    bool operator==(const Counts&) const = default;
  };
  const Counts& counts() const { return counts_; }
  int64_t now() const { return now_; }
  // A digest of every message taken off the queue, in order (its tick, its sequence number, its
  // ends, and whether it was delivered, dropped, held for a paused server or addressed to a
  // process that is gone): two runs of one seed that took the same path have the same digest.
  uint64_t trace_digest() const { return digest_; }

 private:
  struct Server;
  struct Trainer;
  struct Controller;
  struct Message {
    int64_t at = 0;
    uint64_t order = 0;
    int from = 0, to = 0;
    uint64_t to_life = 0;  // the destination process it was sent to
    std::function<void()> deliver;
    bool operator>(const Message& o) const { return std::tie(at, order) > std::tie(o.at, o.order); }
  };

  // Node ids: servers 0..S-1, the controller leader S, trainers S+1..S+T, and the deposed leader
  // (a member of its own, so a partition can leave a server talking to it alone) after them.
  int ControllerNode() const { return options_.servers; }
  int TrainerNode(int t) const { return options_.servers + 1 + t; }
  int DeposedNode() const { return options_.servers + 1 + options_.trainers; }
  int Nodes() const { return DeposedNode() + 1; }
  uint64_t Life(int node) const;
  bool Running(int node) const;  // up and not paused
  void Send(int from, int to, uint64_t to_life, std::function<void()> deliver);
  void Deliver();

  bool Chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  void Fail(const std::string& why);
  void Trace(const std::string& what) const;

  void InjectFaults();
  void StartServer(int i);
  void CrashServer(int i);
  void Resize();
  int Wanted() const { return wanted_; }
  bool Healthy() const;

  void ServerTick(Server& s);
  void ServerBeat(Server& s);
  void ServerCatchUp(Server& s);
  void ServerRound(Server& s);
  void ServerSettle(Server& s);
  void OnPush(int i, int trainer, uint64_t trainer_life, uint64_t attempt, uint64_t seq,
              uint32_t shard);
  void OnPull(int i, int trainer, uint64_t trainer_life, uint32_t shard);
  void OnForward(int i, int from, uint64_t from_life, uint64_t round, uint32_t shard,
                 std::shared_ptr<const ps::CopyState> state);
  void OnReadShard(int i, int from, uint64_t from_life, uint64_t call, uint32_t shard);
  void ForwardAnswered(Server& s, uint64_t round, const std::string& address, bool ok);

  void ControllerTick();
  void OnHeartbeat(int i, uint64_t server_life, uint64_t beat, bool to_deposed,
                   v1::HeartbeatRequest req);
  void Commit(const v1::Command& c);

  void TrainerTick(Trainer& t);
  void TrainerSend(Trainer& t);
  void TrainerFetchMap(Trainer& t);

  // The state of `shard` at server `i` (checked: its counts match its marks), or nullopt.
  std::optional<ps::CopyState> ReadChecked(Server& s, uint32_t shard, const char* where);
  void CheckHoldsAcked(const Server& s, uint32_t shard, const ps::CopyState& st, const char* where);
  void CheckOneWriter();
  uint64_t Count(int trainer, uint32_t shard, uint64_t up_to_seq) const;
  bool Converged();

  const uint64_t seed_;
  const Options options_;
  std::mt19937_64 rng_;
  int64_t now_ = 0;
  uint64_t order_ = 0;
  std::priority_queue<Message, std::vector<Message>, std::greater<Message>> queue_;
  std::set<std::pair<int, int>> cut_;  // directed links that drop everything
  int64_t second_pause_at_ = -1;       // second_pause: when the next one strikes
  bool second_paused_ = false;         // one struck since the job was last healthy
  std::vector<int> second_targets_;    // the servers the last failover made primaries
  int64_t heal_at_ = 0;
  std::unique_ptr<shard::ShardMap> map_;
  std::vector<float> zeros_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::unique_ptr<Trainer>> trainers_;
  std::unique_ptr<Controller> controller_;
  bool converging_ = false;
  int wanted_ = 0;  // the servers the job wants (elastic: servers - 1 or servers)
  std::string failure_;
  Counts counts_;
  uint64_t digest_ = 0;  // trace_digest()
  void Trace(const Message& m, int fate);
};

}  // namespace adam::failover_sim
