#include "controller/controller.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <optional>
#include <set>
#include <thread>

#include "controller/shard_state.h"
#include "controller/supervisor.h"
#include "core/mutex.h"
#include "core/role_events.h"
#include "core/thread_name.h"
#include "net/grpc.h"

namespace adam::controller {
namespace {

constexpr auto kWriteTimeout = std::chrono::milliseconds(2000);

}  // namespace

struct Controller::Impl final
    : public v1::Controller::WithCallbackMethod_Put<v1::Controller::Service>,
      public raft::StateMachine {
  ControllerOptions options;
  std::unique_ptr<raft::Driver> driver;

  mutable Mutex mu;
  std::condition_variable changed;
  ShardState machine ABSL_GUARDED_BY(mu);
  // Leader-local: the failure detector and planner (started afresh by OnRole).
  Supervisor supervisor_state ABSL_GUARDED_BY(mu);
  bool is_leader ABSL_GUARDED_BY(mu) = false;
  uint64_t announce_term ABSL_GUARDED_BY(mu) = 0;
  ControllerCounters counters ABSL_GUARDED_BY(mu);
  std::vector<double> failover_seconds ABSL_GUARDED_BY(mu);  // drained by TakeFailoverSeconds
  bool stopping ABSL_GUARDED_BY(mu) = false;
  std::thread supervisor;
  // Elastic servers: the count the job's manifest asks for (0: not said), and the leader's
  // account of the rebalance the last resize started.
  uint32_t servers_wanted ABSL_GUARDED_BY(mu) = 0;
  struct Rebalancing {
    Clock::TimePoint since{};
    uint32_t from = 0;
    uint64_t moved = 0;
    uint64_t handoffs = 0;
  };
  std::optional<Rebalancing> rebalancing ABSL_GUARDED_BY(mu);

  // ---- raft::StateMachine (loop thread) ----
  void Apply(const raft::Entry& e) override {
    v1::Command c;
    MutexLock l(mu);
    if (!c.ParseFromString(e.data)) {
      spdlog::error("controller: entry {} is not a command; skipped", e.index);
      return;
    }
    const uint64_t before = machine.state().version();
    const uint32_t wanted_before = ServersWanted(machine.state());
    const std::pair<uint64_t, uint64_t> moves =
        c.has_reassign() && c.reassign().dead().empty() && is_leader && rebalancing
            ? CountMoves(c.reassign())
            : std::pair<uint64_t, uint64_t>{0, 0};
    Status s = machine.Apply(c);
    if (!s.ok()) {
      spdlog::info("controller: entry {}: {}", e.index, s.message());
      return;
    }
    if (rebalancing) {
      rebalancing->moved += moves.first;
      rebalancing->handoffs += moves.second;
    }
    if (c.has_resize() && is_leader && machine.state().version() != before) {
      rebalancing = Rebalancing{options.clock->Now(), wanted_before, 0, 0};
      spdlog::info("controller: parameter servers {} -> {}: rebalancing", wanted_before,
                   c.resize().servers());
      events::Emit(events::ServersResized{.from = int(wanted_before),
                                          .to = int(c.resize().servers()),
                                          .map_version = machine.state().version()});
    }
    if (c.has_reassign() && !c.reassign().dead().empty()) AppliedDead(c.reassign());
    if (c.has_copy_done()) ++counters.copies_done;
    if (rebalancing && is_leader && c.has_reassign() && c.reassign().rebalanced()) EndRebalance();
    if (machine.state().version() != before) {
      changed.notify_all();
      if (is_leader) EmitCommitted();
    }
  }
  // A Reassign that marked servers dead, applied: a failover (counted, its detection times
  // kept, reported), unless the dead are servers that left the job, which stop heartbeating
  // once they retired holding nothing.
  void AppliedDead(const v1::Reassign& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    bool left = r.shards().empty();
    for (uint32_t d : r.dead()) left = left && d >= ServersWanted(machine.state());
    if (left) {
      if (is_leader) spdlog::info("controller: servers that left the job stopped");
      return;
    }
    if (!is_leader) return;
    ++counters.failovers;
    std::vector<uint32_t> dead;
    for (uint32_t d : r.dead()) {
      dead.push_back(d);
      if (auto silent = supervisor_state.SilentFor(d, options.clock->Now());
          silent && failover_seconds.size() < 1024)
        failover_seconds.push_back(*silent);
    }
    events::Emit(events::Failover{.dead = std::move(dead),
                                  .map_version = machine.state().version(),
                                  .shards = r.shards_size()});
  }
  // The leader's report of a new map version: copies missing, servers alive.
  void EmitCommitted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    int under = 0, alive = 0;
    for (const auto& r : machine.state().shards())
      under += r.replicas_size() < int(machine.state().copies());
    for (const auto& sv : machine.state().servers()) alive += sv.alive();
    events::Emit(events::ShardMapCommitted{
        .version = machine.state().version(), .under_replicated = under, .servers_alive = alive});
  }
  // What a rebalance step would commit, against the state before it: copies that start to
  // move, primaries handed off (counted once the step applied).
  std::pair<uint64_t, uint64_t> CountMoves(const v1::Reassign& r) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const v1::ControllerState& st = machine.state();
    std::pair<uint64_t, uint64_t> n{0, 0};
    for (const v1::ShardRecord& next : r.shards()) {
      if (next.shard() >= uint32_t(st.shards_size())) continue;
      const v1::ShardRecord& was = st.shards(int(next.shard()));
      // A move starts where none was, or where the last one ended (its copy in sync) and this
      // step starts another (a shard with copies on two leaving servers moves twice).
      n.first += next.has_move_from() &&
                 (!was.has_move_from() || (was.copying_size() == 0 && next.copying_size() > 0));
      n.second += !next.replicas().empty() && !was.replicas().empty() &&
                  next.replicas(0) != was.replicas(0);
    }
    return n;
  }
  void EndRebalance() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const v1::ControllerState& st = machine.state();
    const double seconds = options.clock->SecondsSince(rebalancing->since);
    counters.copies_moved += rebalancing->moved;
    counters.handoffs += rebalancing->handoffs;
    ++counters.rebalances;
    spdlog::info(
        "controller: rebalanced over {} servers in {:.2f} s: {} of {} copies moved, {} "
        "primaries handed off",
        ServersWanted(st), seconds, rebalancing->moved, uint64_t(st.shards_size()) * st.copies(),
        rebalancing->handoffs);
    events::Emit(events::Rebalanced{.from = int(rebalancing->from),
                                    .servers = int(ServersWanted(st)),
                                    .copies_moved = rebalancing->moved,
                                    .copies = uint64_t(st.shards_size()) * st.copies(),
                                    .handoffs = rebalancing->handoffs,
                                    .seconds = seconds,
                                    .map_version = st.version()});
    rebalancing.reset();
  }

  std::string TakeSnapshot() override {
    MutexLock l(mu);
    return machine.Serialize();
  }
  Status Restore(const raft::Snapshot& s) override {
    MutexLock l(mu);
    Status st = machine.Restore(s.data);
    changed.notify_all();
    return st;
  }

  std::string LeaderAddress() const {
    const raft::DriverInfo info = driver->info();
    auto it = options.raft.peers.find(info.leader);
    return it == options.raft.peers.end() ? std::string() : it->second;
  }

  Status Write(const v1::Command& c) {
    return driver->Propose(c.SerializeAsString(), kWriteTimeout).status();
  }

  // ---- Controller service (gRPC threads) ----
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    if (driver->info().role != raft::Role::kLeader) {
      resp->set_accepted(false);
      resp->set_leader_address(LeaderAddress());
      return grpc::Status::OK;
    }
    const v1::ServerRecord& in = req->server();
    bool need_register = false;
    std::vector<v1::CopyDone> done;
    {
      MutexLock l(mu);
      ++counters.heartbeats;
      const v1::ControllerState& s = machine.state();
      if (in.id() >= uint32_t(s.servers_size()))
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "heartbeat: server " + std::to_string(in.id()) +
                                " is not in the job (" + std::to_string(s.servers_size()) +
                                " servers)");
      const Supervisor::Beat beat = supervisor_state.Heartbeat(s, *req, options.clock->Now());
      if (beat.restart_seen) {
        ++counters.restarts;
        spdlog::warn("controller: server {} restarted (new incarnation): failing over its copies",
                     in.id());
        events::Emit(events::ServerRestarted{.server = in.id()});
      }
      if (!beat.accepted) {
        // No lease meanwhile: it keeps beating here and is answered once it is marked dead.
        resp->set_accepted(false);
        resp->set_leader_address(options.raft.peers.at(options.raft.id));
        return grpc::Status::OK;
      }
      if (beat.probation)
        events::Emit(events::ServerOnProbation{.server = in.id(),
                                               .ms = int64_t(options.server_probation.count())});
      need_register = beat.register_server;
      done = beat.copies_done;
    }
    if (need_register) {
      v1::Command c;
      *c.mutable_register_() = in;
      c.mutable_register_()->set_alive(true);
      if (Status s = Write(c); !s.ok()) return net::ToGrpc(s);
    }
    for (v1::CopyDone& d : done) {
      v1::Command c;
      {
        MutexLock l(mu);
        d.set_expected_version(machine.state().version());
      }
      *c.mutable_copy_done() = d;
      (void)Write(c);  // a stale version is simply re-reported by the next heartbeat
    }
    resp->set_accepted(true);
    MutexLock l(mu);
    if (machine.state().version() > req->map_version())
      *resp->mutable_map() = ToShardMap(machine.state(), options.raft.peers.at(options.raft.id));
    return grpc::Status::OK;
  }

  grpc::Status GetShardMap(grpc::ServerContext*, const v1::GetShardMapRequest* req,
                           v1::ShardMap* resp) override {
    if (req->linearizable()) {
      if (Status s = driver->ReadBarrier(kWriteTimeout); !s.ok()) {
        grpc::Status g = net::ToGrpc(s);
        return grpc::Status(g.error_code(), g.error_message() + "; leader: " + LeaderAddress());
      }
    }
    const std::string leader = LeaderAddress();
    MutexLock l(mu);
    *resp = ToShardMap(machine.state(), leader);
    return grpc::Status::OK;
  }

  grpc::Status WatchShardMap(grpc::ServerContext* ctx, const v1::GetShardMapRequest* req,
                             grpc::ServerWriter<v1::ShardMap>* writer) override {
    uint64_t sent = req->min_version();
    for (;;) {
      v1::ShardMap m;
      {
        MutexLock l(mu);
        // Real time, not the clock's: this polls gRPC's own state (the stream's cancellation).
        l.AwaitFor(changed, std::chrono::milliseconds(200),
                   [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
                     return stopping || machine.state().version() > sent;
                   });
        if (stopping) return grpc::Status::OK;
        if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
        if (machine.state().version() <= sent) continue;
        m = ToShardMap(machine.state(), {});
        sent = m.version();
      }
      m.set_leader_address(LeaderAddress());
      if (!writer->Write(m)) return grpc::Status::OK;
    }
  }

  // Callback API: no server thread waits while the write commits.
  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext* ctx, const v1::KeyValue* req,
                                v1::PutResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    v1::Command c;
    *c.mutable_put() = *req;
    driver->ProposeAsync(
        c.SerializeAsString(), kWriteTimeout, [this, reactor, resp](StatusOr<uint64_t> index) {
          if (!index.ok()) {
            grpc::Status g = net::ToGrpc(index.status());
            reactor->Finish(
                grpc::Status(g.error_code(), g.error_message() + "; leader: " + LeaderAddress()));
            return;
          }
          resp->set_index(*index);
          reactor->Finish(grpc::Status::OK);
        });
    return reactor;
  }

  grpc::Status GetStatus(grpc::ServerContext*, const v1::StatusRequest*,
                         v1::ControllerStatus* resp) override {
    const raft::DriverInfo info = driver->info();
    resp->set_id(options.raft.id);
    resp->set_role(raft::RoleName(info.role));
    resp->set_term(info.term);
    resp->set_leader(info.leader);
    resp->set_leader_address(LeaderAddress());
    resp->set_commit(info.commit);
    resp->set_applied(info.applied);
    MutexLock l(mu);
    resp->set_map_version(machine.state().version());
    return grpc::Status::OK;
  }

  // ---- the leader's supervisor ----
  // A round every `supervise_every` of the clock; a new leader is woken at once to announce
  // itself and, on a fresh group, write the initial map.
  void Supervise() {
    Clock* const clock = options.clock;
    auto next_round = clock->Now() + options.supervise_every;
    for (;;) {
      {
        MutexLock l(mu);
        clock->AwaitUntil(l, changed, next_round, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
          return stopping || announce_term != 0;
        });
        if (stopping) return;
      }
      const auto now = clock->Now();
      const bool due = now >= next_round;
      if (due) next_round = now + options.supervise_every;
      if (driver->info().role != raft::Role::kLeader) {
        MutexLock l(mu);
        if (!is_leader) announce_term = 0;  // deposed before announcing
        continue;
      }
      MaybeAnnounce();
      bool judged = false;
      if (std::optional<v1::Command> cmd = SuperviseRound(due, &judged)) (void)Write(*cmd);
      if (judged) {
        MutexLock l(mu);
        ++counters.supervisions;  // counted once the round's command is written
      }
    }
  }

  // What the leader's round writes, if anything: the initial map on a fresh group, else (when a
  // round is `due`) the failovers and repairs the servers' heartbeats call for; `judged` says
  // whether it judged the servers.
  std::optional<v1::Command> SuperviseRound(bool due, bool* judged) {
    MutexLock l(mu);
    const v1::ControllerState& s = machine.state();
    std::optional<v1::Command> cmd;
    if (s.shards_size() == 0) {
      cmd.emplace();
      *cmd->mutable_bootstrap() = options.bootstrap;
      return cmd;
    }
    if (!due) return cmd;
    if (servers_wanted != 0 && servers_wanted != ServersWanted(s)) {
      cmd.emplace();
      cmd->mutable_resize()->set_servers(servers_wanted);
      return cmd;
    }
    Supervisor::Round round = supervisor_state.Judge(s, options.clock->Now());
    *judged = round.judged;
    if (!round.plan) return cmd;
    cmd.emplace();
    *cmd->mutable_reassign() = std::move(*round.plan);
    std::string names;
    for (uint32_t d : round.dead) {
      if (!names.empty()) names += ',';
      names += std::to_string(d);
    }
    if (!round.dead.empty())
      spdlog::warn("controller: servers {} missed heartbeats for {} ms or restarted: failing over",
                   names, options.server_timeout.count());
    return cmd;
  }

  void OnRole(raft::Role role, uint64_t term) {
    {
      MutexLock l(mu);
      const bool leader = role == raft::Role::kLeader;
      if (leader && !is_leader) {
        // Grace: every server gets a full timeout from here, and the predecessor (which may
        // still have accepted heartbeats, and renewed primaries' leases, until check-quorum
        // deposed it: at most two election timeouts) is counted as if it led until then, so
        // every lease it granted has run out before this leader moves a shard.
        const auto election = options.raft.tick * options.raft.election_ticks;
        supervisor_state.Lead(options.clock->Now(), 2 * election);
        // A resize its predecessor started: this leader sees it through, counting from here.
        rebalancing.reset();
        if (machine.state().rebalancing())
          rebalancing = Rebalancing{options.clock->Now(), ServersWanted(machine.state()), 0, 0};
      }
      is_leader = leader;
    }
    if (role == raft::Role::kLeader) {
      MutexLock l(mu);
      announce_term = term;  // the supervisor announces once the leader has committed
      changed.notify_all();
    }
  }

  // A new leader is announced (event "controller_leader") once it has committed an entry of its
  // term and confirmed its leadership with a quorum: from then on it serves writes and reads.
  void MaybeAnnounce() {
    uint64_t term = 0;
    {
      MutexLock l(mu);
      term = announce_term;
      announce_term = 0;
    }
    if (term == 0) return;
    if (driver->ReadBarrier(std::chrono::milliseconds(1000)).ok() && driver->info().term == term)
      events::Emit(events::ControllerLeader{.id = options.raft.id, .term = term});
  }
};

Controller::Controller(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Controller::~Controller() { Stop(); }

StatusOr<std::unique_ptr<Controller>> Controller::Open(const ControllerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  {
    MutexLock l(impl->mu);
    impl->supervisor_state = Supervisor(
        {options.server_timeout, options.server_probation, options.flap_window, options.max_moves});
  }
  ADAM_ASSIGN_OR_RETURN(impl->driver, raft::Driver::Open(options.raft, impl.get()));
  Impl* p = impl.get();
  impl->driver->OnRoleChange([p](raft::Role r, uint64_t t) { p->OnRole(r, t); });
  return std::unique_ptr<Controller>(new Controller(std::move(impl)));
}

grpc::Service* Controller::controller_service() { return impl_.get(); }
grpc::Service* Controller::raft_service() { return impl_->driver->service(); }

void Controller::Start() {
  impl_->driver->Start();
  impl_->supervisor = NamedThread("supervise", [this] { impl_->Supervise(); });
}

void Controller::Stop() {
  {
    MutexLock l(impl_->mu);
    impl_->stopping = true;
    impl_->changed.notify_all();
  }
  if (impl_->supervisor.joinable()) impl_->supervisor.join();
  impl_->driver->Stop();
}

raft::DriverInfo Controller::raft_info() const { return impl_->driver->info(); }

v1::ControllerState Controller::state() const {
  MutexLock l(impl_->mu);
  return impl_->machine.state();
}

ControllerCounters Controller::counters() const {
  MutexLock l(impl_->mu);
  return impl_->counters;
}

void Controller::SetServersWanted(int servers) {
  MutexLock l(impl_->mu);
  impl_->servers_wanted = uint32_t(std::max(servers, 0));
  impl_->changed.notify_all();
}

std::vector<double> Controller::TakeFailoverSeconds() {
  MutexLock l(impl_->mu);
  std::vector<double> out;
  out.swap(impl_->failover_seconds);
  return out;
}

}  // namespace adam::controller
