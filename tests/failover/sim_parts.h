// The failover simulation's inside, shared by sim.cc (the world: setup, the network, faults and
// the checks) and sim_roles.cc (each role's loops): the simulated server, trainer and controller,
// and the helpers both use. Not a public header.
#pragma once

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "failover/sim.h"

namespace adam::failover_sim {

struct Sim::Server {
  uint32_t id = 0;
  bool up = false;
  int64_t paused_until = 0;
  uint64_t life = 0;         // +1 on every start: messages to an earlier process are lost
  uint64_t incarnation = 0;  // as the controller sees it
  FakeClock clock;
  double rate = 1;
  std::unique_ptr<ps::Routing> routing;
  std::unique_ptr<ps::ParamStore> store;
  ps::SentVersions sent;
  // The heartbeat in flight (ControllerLink beats one at a time).
  uint64_t beat = 0;
  bool beating = false;
  int64_t beat_deadline = 0, next_beat = 0;
  Clock::TimePoint beat_sent{};
  int64_t accepted_at = -1000;  // tick of the last heartbeat the leader accepted
  // The forward round in flight: call id -> (shard, copy address, version).
  struct Call {
    uint32_t shard = 0;
    std::string address;
    uint64_t version = 0;
  };
  uint64_t round = 0;
  std::map<std::string, Call> calls;  // by copy address + shard
  int64_t round_deadline = 0;
  // Promotions being caught up, by shard.
  struct CatchUp {
    ps::Routing::CatchUp c;
    uint64_t call = 0;
    std::map<std::string, std::optional<ps::CopyState>> answers;  // by address
    int64_t deadline = 0;
  };
  std::map<uint32_t, CatchUp> catching;
  uint64_t next_call = 0;
  // Pushes applied, waiting for a quorum (Forwarder::WhenDurable).
  struct Waiter {
    int trainer = 0;
    uint64_t trainer_life = 0, attempt = 0, seq = 0;
    uint32_t shard = 0;
    uint64_t version = 0;
  };
  std::vector<Waiter> waiters;
};

struct Sim::Trainer {
  int index = 0;
  uint64_t session = 0;
  uint64_t seq = 0;                // pushes started
  std::vector<uint32_t> shard_of;  // the shard of push seq (index seq - 1)
  uint64_t acked_seq = 0;          // every push up to it was acknowledged
  bool pushing = false;            // push `seq` not yet acknowledged
  uint64_t attempt = 0;
  int64_t push_deadline = 0;
  bool sent = false;  // the current attempt is on the wire
  std::optional<v1::ShardMap> map;
  bool fetching = false;
  int64_t fetch_deadline = 0;
  uint64_t fetch = 0;
  bool pulling = false;
  int64_t pull_deadline = 0;
};

struct Sim::Controller {
  FakeClock clock;
  double rate = 1;
  controller::ShardState machine;
  std::unique_ptr<controller::Supervisor> leader;
  int64_t lead_at = 0;  // when `leader` starts to lead
  bool leading = false;
  std::unique_ptr<controller::Supervisor> deposed;  // still answering heartbeats until then
  v1::ControllerState deposed_state;
  int64_t deposed_until = 0;
};

inline std::string Address(uint32_t server) { return "r" + std::to_string(server); }
inline int ServerOf(const std::string& address) { return std::stoi(address.substr(1)); }

// A push of one trainer to one shard: 1.0 added to the trainer's float, identified by (session,
// seq), as ParamService queues it. Returns the shard's version once the push is in it.
inline uint64_t ApplyPush(ps::ParamStore& store, uint32_t shard, uint32_t trainer, uint64_t session,
                          uint64_t seq) {
  const int64_t n = store.ShardSize(shard);
  std::vector<float> delta(size_t(n), 0.f);
  delta[trainer] = 1.f;
  uint64_t applied = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  ps::Completion completion(1, [&] {
    std::lock_guard<std::mutex> l(mu);
    done = true;
    cv.notify_all();
  });
  ps::Op op;
  op.kind = ps::Op::Kind::kAdd;
  op.shard = shard;
  op.offset = 0;
  op.count = n;
  op.values = delta.data();
  op.trainer = trainer;
  op.session = session;
  op.seq = seq;
  op.part = 0;
  op.applied_version = &applied;
  op.done = &completion;
  store.Submit(&op, 1);
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done; });
  return applied;
}

inline std::string MapText(const v1::ShardMap& m) {
  std::string out = "v" + std::to_string(m.version()) + " [";
  for (const auto& r : m.shards()) {
    out += " " + std::to_string(r.shard()) + ":";
    for (uint32_t x : r.replicas()) out += std::to_string(x);
    if (r.copying_size()) out += "+";
    for (uint32_t x : r.copying()) out += std::to_string(x);
  }
  out += " ] alive ";
  for (const auto& sv : m.servers()) out += sv.alive() ? "1" : "0";
  return out;
}

}  // namespace adam::failover_sim
