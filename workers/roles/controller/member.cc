#include "controller/member.h"

#include <spdlog/spdlog.h>

#include "controller/shard_state.h"

namespace adam::controller {

// The controller's series, read from its Raft driver and its state by Sample (every 200 ms).
class SampledMetrics {
 public:
  SampledMetrics(metrics::MetricsServer& reg, Controller* controller)
      : controller_(controller),
        term_(reg.Gauge("adam_controller_term", "Raft term of this member")),
        leader_(reg.Gauge("adam_controller_is_leader", "1 while this member is the Raft leader")),
        commit_(reg.Gauge("adam_controller_commit_index", "Raft commit index")),
        applied_(reg.Gauge("adam_controller_applied_index", "Raft entries applied")),
        log_bytes_(reg.Gauge("adam_controller_log_bytes", "Bytes in the Raft log file")),
        version_(reg.Gauge("adam_controller_map_version", "Version of the shard map")),
        alive_(reg.Gauge("adam_controller_servers_alive", "Parameter servers marked alive")),
        under_(
            reg.Gauge("adam_controller_shards_under_replicated",
                      "Shards with fewer in-sync copies than spec.roles.parameterServer.copies")),
        wanted_(
            reg.Gauge("adam_controller_servers_wanted",
                      "Parameter servers the job asks for (spec.roles.parameterServer.replicas)")),
        heartbeats_(
            reg.Counter("adam_controller_heartbeats_total", "Heartbeats accepted (leader)")),
        failovers_(reg.Counter("adam_controller_failovers_total",
                               "Failovers committed for dead parameter servers (leader)")),
        restarts_(reg.Counter("adam_controller_server_restarts_total",
                              "Parameter servers seen heartbeating as a new process (leader)")),
        rebuilt_(reg.Counter("adam_controller_copies_rebuilt_total",
                             "New shard copies committed in sync (every member)")),
        rebalances_(
            reg.Counter("adam_controller_rebalances_total",
                        "Resizes of the server count seen through to a balanced map (leader)")),
        moved_(reg.Counter("adam_controller_copies_moved_total",
                           "Shard copies moved to other servers by rebalances (leader)")),
        handoffs_(reg.Counter("adam_controller_primary_handoffs_total",
                              "Primaries handed to another copy by rebalances (leader)")),
        leader_changes_(reg.Counter("adam_controller_leader_changes_total",
                                    "Times this member saw a different leader take over")),
        failover_seconds_(reg.Histogram("adam_controller_failover_seconds",
                                        "From a dead parameter server's last heartbeat to the "
                                        "committed map without it (leader)",
                                        {0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10})) {}

  void Sample() {
    const raft::DriverInfo info = controller_->raft_info();
    if (info.leader != 0 && info.leader != last_leader_) {
      if (last_leader_ != 0) leader_changes_.Increment();
      last_leader_ = info.leader;
    }
    for (double sec : controller_->TakeFailoverSeconds()) failover_seconds_.Observe(sec);
    term_.Set(double(info.term));
    leader_.Set(info.role == raft::Role::kLeader ? 1 : 0);
    commit_.Set(double(info.commit));
    applied_.Set(double(info.applied));
    log_bytes_.Set(double(info.log_bytes));
    const v1::ControllerState s = controller_->state();
    version_.Set(double(s.version()));
    int n_alive = 0, n_under = 0;
    for (const auto& sv : s.servers()) n_alive += sv.alive();
    for (const auto& sh : s.shards()) n_under += sh.replicas_size() < int(s.copies());
    alive_.Set(n_alive);
    wanted_.Set(double(ServersWanted(s)));
    under_.Set(n_under);
    const ControllerCounters c = controller_->counters();
    heartbeats_.Increment(double(c.heartbeats - last_.heartbeats));
    failovers_.Increment(double(c.failovers - last_.failovers));
    rebuilt_.Increment(double(c.copies_done - last_.copies_done));
    restarts_.Increment(double(c.restarts - last_.restarts));
    rebalances_.Increment(double(c.rebalances - last_.rebalances));
    moved_.Increment(double(c.copies_moved - last_.copies_moved));
    handoffs_.Increment(double(c.handoffs - last_.handoffs));
    last_ = c;
  }

 private:
  Controller* controller_;
  prometheus::Gauge &term_, &leader_, &commit_, &applied_, &log_bytes_, &version_, &alive_, &under_,
      &wanted_;
  prometheus::Counter &heartbeats_, &failovers_, &restarts_, &rebuilt_, &rebalances_, &moved_,
      &handoffs_, &leader_changes_;
  prometheus::Histogram& failover_seconds_;
  ControllerCounters last_;  // at the last sample
  raft::NodeId last_leader_ = 0;
};

Member::Member(std::unique_ptr<Controller> controller, std::string listen, int metrics_port,
               std::shared_ptr<const net::Transport> transport)
    : controller_(std::move(controller)),
      listen_(std::move(listen)),
      metrics_port_(metrics_port),
      transport_(std::move(transport)) {}

Member::~Member() { Stop(); }

Status Member::Start() {
  ADAM_ASSIGN_OR_RETURN(metrics_, metrics::MetricsServer::Start(
                                      listen_.substr(0, listen_.rfind(':')), metrics_port_));
  sampled_ = std::make_unique<SampledMetrics>(*metrics_, controller_.get());
  controller_->Start();
  sampler_.emplace(std::chrono::milliseconds(200), [this] { sampled_->Sample(); });
  ADAM_ASSIGN_OR_RETURN(listeners_, net::Listeners::Start(*transport_, listen_,
                                                          {controller_->controller_service(),
                                                           controller_->raft_service()}));
  return OkStatus();
}

void Member::Stop() {
  controller_->Stop();
  if (listeners_) listeners_->Shutdown();
  if (sampler_) sampler_->Stop();
}

events::Ready Member::ReadyEvent() const {
  return listeners_->ReadyEvent(metrics_ ? metrics_->port() : 0);
}

}  // namespace adam::controller
