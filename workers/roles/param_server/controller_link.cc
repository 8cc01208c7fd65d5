#include "param_server/controller_link.h"

#include <random>

#include "core/role_events.h"
#include "param_server/replication.h"

namespace adam::ps {

ControllerLink::ControllerLink(std::shared_ptr<const net::Transport> transport, uint32_t self,
                               std::vector<std::string> members, Routing* routing,
                               const ParamStore* store)
    : transport_(std::move(transport)),
      self_(self),
      routing_(routing),
      store_(store),
      members_(std::move(members)),
      incarnation_(std::random_device{}() | (uint64_t{std::random_device{}()} << 32) | 1),
      beat_(
          std::chrono::milliseconds(50), [this] { Beat(); }, routing->clock()) {}

void ControllerLink::SetAddresses(const ServerAddresses& addresses) {
  MutexLock l(mu_);
  addresses_ = addresses;
}

void ControllerLink::Beat() {
  if (stubs_.empty())
    for (const auto& m : members_)
      stubs_.push_back(v1::Controller::NewStub(net::MakeChannel(*transport_, m)));
  ServerAddresses addr;
  {
    MutexLock l(mu_);
    if (!addresses_) return;
    addr = *addresses_;
  }
  const v1::HeartbeatRequest req = MakeHeartbeat(self_, addr, incarnation_, *routing_, *store_);
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  net::SetDeadline(&ctx, std::chrono::milliseconds(500));
  const auto sent = routing_->clock()->Now();
  const grpc::Status s = stubs_[target_]->Heartbeat(&ctx, req, &resp);
  if (!s.ok() || !resp.accepted()) {
    // Follow the leader's address when given, otherwise try the next member.
    size_t next = (target_ + 1) % stubs_.size();
    for (size_t i = 0; i < members_.size(); ++i)
      if (!resp.leader_address().empty() && members_[i] == resp.leader_address()) next = i;
    target_ = next;
    return;
  }
  heartbeats_.fetch_add(1);
  if (TakeHeartbeatAnswer(routing_, resp, sent))
    events::Emit(events::ShardMap{.version = resp.map().version()});
  if (int(self_) >= wanted_.load() && routing_->Retired()) {
    std::function<void()> retired;
    {
      MutexLock l(mu_);
      retired.swap(on_retired_);
    }
    if (retired) retired();
  }
}

}  // namespace adam::ps
