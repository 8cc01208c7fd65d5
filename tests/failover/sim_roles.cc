// The failover simulation's roles (sim.h, sim_parts.h): each parameter server's beat, catch-up,
// forwarding rounds and settling, the controller's commits and heartbeats, the trainers' pushes
// and pulls.
#include "failover/sim_parts.h"

namespace adam::failover_sim {

// ---- parameter servers ----

void Sim::ServerTick(Server& s) {
  ServerBeat(s);
  ServerCatchUp(s);
  ServerRound(s);
  ServerSettle(s);
}

void Sim::ServerBeat(Server& s) {
  if (s.beating && now_ >= s.beat_deadline) s.beating = false;  // answer lost or late
  if (s.beating || now_ < s.next_beat) return;
  s.beating = true;
  s.beat_deadline = now_ + kBeatDeadline;
  s.next_beat = now_ + kBeatTicks;
  s.beat_sent = s.clock.Now();
  const uint64_t beat = ++s.beat;
  const int i = int(s.id);
  const ps::ServerAddresses addr{"p" + std::to_string(i), Address(s.id), "h" + std::to_string(i)};
  v1::HeartbeatRequest req = ps::MakeHeartbeat(s.id, addr, s.incarnation, *s.routing, *s.store);
  const uint64_t life = s.life;
  // While a deposed leader still believes it leads, a server may still be talking to it.
  const bool to_deposed = controller_->deposed && Chance(0.5);
  Send(i, to_deposed ? DeposedNode() : ControllerNode(), 0,
       [this, i, life, beat, to_deposed, req = std::move(req)] {
         OnHeartbeat(i, life, beat, to_deposed, req);
       });
}

void Sim::ServerCatchUp(Server& s) {
  const std::vector<ps::Routing::CatchUp> want = s.routing->CatchUps();
  // Forget catch-ups of promotions that are over (deposed again, or a newer promotion) or late.
  for (auto it = s.catching.begin(); it != s.catching.end();) {
    const bool wanted = std::any_of(want.begin(), want.end(), [&](const ps::Routing::CatchUp& c) {
      return c.shard == it->first && c.term == it->second.c.term;
    });
    it = !wanted || now_ >= it->second.deadline ? s.catching.erase(it) : std::next(it);
  }
  for (const ps::Routing::CatchUp& c : want) {
    if (s.catching.count(c.shard)) continue;
    Server::CatchUp& cu = s.catching[c.shard];
    cu.c = c;
    cu.call = ++s.next_call;
    cu.deadline = now_ + kCatchUpDeadline;
    if (c.from.empty()) {
      // No other copy alive: what this server holds is the shard.
      auto taken = ps::FinishCatchUp(s.store.get(), s.routing.get(), c, {});
      Trace("ps-" + std::to_string(s.id) + " caught up shard " + std::to_string(c.shard) +
            " alone, version " + std::to_string(s.store->Version(c.shard)));
      if (!taken.ok()) Fail("catch-up: " + taken.status().message());
      ++counts_.catch_ups;
      s.catching.erase(c.shard);
      continue;
    }
    for (const std::string& a : c.from) {
      cu.answers[a] = std::nullopt;
      const int to = ServerOf(a);
      const int i = int(s.id);
      const uint64_t life = s.life, call = cu.call;
      const uint32_t shard = c.shard;
      Send(i, to, Life(to),
           [this, to, i, life, call, shard] { OnReadShard(to, i, life, call, shard); });
    }
  }
}

void Sim::OnReadShard(int i, int from, uint64_t from_life, uint64_t call, uint32_t shard) {
  Server& s = *servers_[size_t(i)];
  std::optional<ps::CopyState> st = ReadChecked(s, shard, "read by a promoted primary");
  if (!st) return;
  auto shared = std::make_shared<const ps::CopyState>(std::move(*st));
  const std::string address = Address(s.id);
  Send(i, from, from_life, [this, from, call, shard, address, shared] {
    Server& p = *servers_[size_t(from)];
    auto it = p.catching.find(shard);
    if (it == p.catching.end() || it->second.call != call) return;
    Server::CatchUp& cu = it->second;
    cu.answers[address] = *shared;
    std::vector<ps::CopyState> states;
    for (const auto& [a, answer] : cu.answers) {
      if (!answer) return;  // more to come
      states.push_back(*answer);
    }
    auto taken = ps::FinishCatchUp(p.store.get(), p.routing.get(), cu.c, states);
    Trace("ps-" + std::to_string(from) + " caught up shard " + std::to_string(shard) + " term " +
          std::to_string(cu.c.term) + " from " + std::to_string(states.size()) +
          " copies -> version " + std::to_string(p.store->Version(shard)));
    if (!taken.ok())
      Fail("catch-up of shard " + std::to_string(shard) + ": " + taken.status().message());
    ++counts_.catch_ups;
    p.catching.erase(it);
  });
}

void Sim::ServerRound(Server& s) {
  if (!s.calls.empty()) {
    if (now_ < s.round_deadline) return;
    // A copy that missed the deadline: it holds an unknown state.
    for (const auto& [key, c] : s.calls)
      ps::RecordForward(&s.sent, c.shard, c.address, c.version, false);
    s.calls.clear();
  }
  ps::ForgetCopies(&s.sent, s.routing->TakeRestarted());
  const uint64_t round = ++s.round;
  s.round_deadline = now_ + kForwardDeadline;
  for (const ps::Routing::Target& t : s.routing->Targets()) {
    if (t.catching_up) continue;
    const std::vector<std::string> due = ps::DueCopies(t, s.store->Version(t.shard), s.sent);
    if (due.empty()) continue;
    std::optional<ps::CopyState> st = ReadChecked(s, t.shard, "forwarding");
    if (!st) return;
    auto shared = std::make_shared<const ps::CopyState>(std::move(*st));
    for (const std::string& a : due) {
      s.calls[a + "/" + std::to_string(t.shard)] = {t.shard, a, shared->meta.version};
      const int to = ServerOf(a);
      const int i = int(s.id);
      const uint64_t life = s.life;
      const uint32_t shard = t.shard;
      Send(i, to, Life(to), [this, to, i, life, round, shard, shared] {
        OnForward(to, i, life, round, shard, shared);
      });
    }
  }
}

void Sim::OnForward(int i, int from, uint64_t from_life, uint64_t round, uint32_t shard,
                    std::shared_ptr<const ps::CopyState> state) {
  Server& s = *servers_[size_t(i)];
  ++counts_.forwards;
  const Status st =
      ps::AcceptForward(s.id, s.store.get(), s.routing.get(), shard, state->values.data(),
                        int64_t(state->values.size()), state->meta, state->epochs, uint32_t(from));
  if (st.ok()) (void)ReadChecked(s, shard, "forwarded to");
  Trace("ps-" + std::to_string(i) + " forward of shard " + std::to_string(shard) + " from ps-" +
        std::to_string(from) + " version " + std::to_string(state->meta.version) + " term " +
        std::to_string(state->meta.term) + ": " + (st.ok() ? "ok" : st.message()));
  const bool accepted = st.ok();
  const std::string address = Address(s.id);
  Send(i, from, from_life, [this, from, round, shard, address, accepted] {
    Server& p = *servers_[size_t(from)];
    if (p.round != round) return;
    auto it = p.calls.find(address + "/" + std::to_string(shard));
    if (it == p.calls.end()) return;
    ps::RecordForward(&p.sent, shard, address, it->second.version, accepted);
    p.calls.erase(it);
    ServerSettle(p);
  });
}

void Sim::ServerSettle(Server& s) {
  if (s.waiters.empty()) return;
  std::map<uint32_t, ps::Routing::Target> targets;
  for (auto& t : s.routing->Targets()) targets[t.shard] = std::move(t);
  std::vector<Server::Waiter> keep;
  for (const Server::Waiter& w : s.waiters) {
    std::string why;
    const ps::Durability d =
        ps::CheckDurable(*s.routing, targets, s.sent, {{w.shard, w.version}}, &why);
    if (d == ps::Durability::kWaiting) {
      keep.push_back(w);
      continue;
    }
    const bool ok = d == ps::Durability::kDurable;
    Trainer& t = *trainers_[size_t(w.trainer)];
    Trace("ps-" + std::to_string(s.id) + (ok ? " acknowledges" : " refuses") + " push " +
          std::to_string(w.trainer) + "/" + std::to_string(w.seq) + " (shard " +
          std::to_string(w.shard) + " version " + std::to_string(w.version) + ") " + why);
    if (ok) {
      // Acknowledged: from here on, every state served must hold it.
      t.acked_seq = std::max(t.acked_seq, w.seq);
      ++counts_.pushes_acked;
    } else {
      ++counts_.pushes_refused;
    }
    const uint64_t attempt = w.attempt;
    Send(int(s.id), TrainerNode(w.trainer), 0, [this, &t, attempt, ok] {
      if (!t.pushing || t.attempt != attempt) return;
      if (ok) {
        t.pushing = false;
      } else {
        t.sent = false;  // re-routed once a newer map is fetched
        TrainerFetchMap(t);
      }
    });
  }
  s.waiters = std::move(keep);
}

void Sim::OnPush(int i, int trainer, uint64_t trainer_life, uint64_t attempt, uint64_t seq,
                 uint32_t shard) {
  Server& s = *servers_[size_t(i)];
  Trainer& t = *trainers_[size_t(trainer)];
  std::vector<uint32_t> promoted;
  const std::string why = s.routing->Admit({shard}, &promoted);
  if (!why.empty()) {
    ++counts_.pushes_refused;
    Send(i, TrainerNode(trainer), trainer_life, [this, &t, attempt] {
      if (!t.pushing || t.attempt != attempt) return;
      t.sent = false;
      TrainerFetchMap(t);
    });
    return;
  }
  std::optional<ps::CopyState> before = ReadChecked(s, shard, "accepting a push");
  if (!before) return;
  CheckHoldsAcked(s, shard, *before, "accepted a push for");
  const uint64_t version = ApplyPush(*s.store, shard, uint32_t(trainer), t.session, seq);
  Trace("ps-" + std::to_string(i) + " applies push " + std::to_string(trainer) + "/" +
        std::to_string(seq) + " to shard " + std::to_string(shard) + " -> version " +
        std::to_string(version) + " term " + std::to_string(s.store->Term(shard)));
  s.waiters.push_back({trainer, trainer_life, attempt, seq, shard, version});
}

void Sim::OnPull(int i, int trainer, uint64_t trainer_life, uint32_t shard) {
  Server& s = *servers_[size_t(i)];
  if (s.routing->Admit({shard}, nullptr).empty()) {
    std::optional<ps::CopyState> st = ReadChecked(s, shard, "pulled");
    if (!st) return;
    CheckHoldsAcked(s, shard, *st, "served a pull of");
    ++counts_.pulls_served;
  }
  Trainer& t = *trainers_[size_t(trainer)];
  Send(i, TrainerNode(trainer), trainer_life, [&t] { t.pulling = false; });
}

// ---- the controller ----

void Sim::Commit(const v1::Command& c) {
  const v1::ControllerState before = controller_->machine.state();
  const Status s = controller_->machine.Apply(c);
  if (s.ok())
    Trace("commit " +
          std::string(c.has_reassign()    ? "reassign"
                      : c.has_register_() ? "register"
                      : c.has_resize()    ? "resize"
                                          : "copy_done") +
          " -> " + MapText(controller::ToShardMap(controller_->machine.state(), "")));
  if (s.ok() && c.has_reassign()) {
    if (c.reassign().dead_size() > 0) {
      ++counts_.failovers;
      // Between a promotion and the new primary's first forward to the other copies.
      second_targets_.clear();
      for (const v1::ShardRecord& r : controller_->machine.state().shards()) {
        if (!options_.second_pause) break;
        const v1::ShardRecord& old = before.shards(int(r.shard()));
        if (!r.replicas().empty() && !old.replicas().empty() && r.replicas(0) != old.replicas(0))
          second_targets_.push_back(int(r.replicas(0)));
      }
      if (options_.second_pause && !converging_ && !second_targets_.empty() && Chance(0.7))
        second_pause_at_ = now_ + Uniform(0, 6);
    } else {
      ++counts_.repairs;
      for (const v1::ShardRecord& r : controller_->machine.state().shards()) {
        const v1::ShardRecord& old = before.shards(int(r.shard()));
        if (!r.replicas().empty() && !old.replicas().empty() && r.replicas(0) != old.replicas(0))
          ++counts_.handoffs;
      }
    }
  }
}

void Sim::ControllerTick() {
  Controller& c = *controller_;
  if (c.deposed && now_ >= c.deposed_until) c.deposed.reset();
  if (!c.leading && now_ >= c.lead_at) {
    c.leader->Lead(c.clock.Now(), 2 * kElection);
    c.leading = true;
  }
  if (!c.leading || now_ % kJudgeTicks != 0) return;
  controller::Supervisor::Round round = c.leader->Judge(c.machine.state(), c.clock.Now());
  if (round.plan) {
    v1::Command cmd;
    *cmd.mutable_reassign() = std::move(*round.plan);
    Commit(cmd);
  }
}

void Sim::OnHeartbeat(int i, uint64_t server_life, uint64_t beat, bool to_deposed,
                      v1::HeartbeatRequest req) {
  Controller& c = *controller_;
  v1::HeartbeatResponse resp;
  if (to_deposed) {
    if (!c.deposed) return;  // it stepped down: no answer
    // The deposed leader: it renews the lease, answers with the map it has, commits nothing.
    auto b = c.deposed->Heartbeat(c.deposed_state, req, c.clock.Now());
    resp.set_accepted(b.accepted && !b.register_server);
    if (resp.accepted() && c.deposed_state.version() > req.map_version())
      *resp.mutable_map() = controller::ToShardMap(c.deposed_state, "old");
  } else if (c.leading) {
    auto b = c.leader->Heartbeat(c.machine.state(), req, c.clock.Now());
    resp.set_accepted(b.accepted);
    if (b.accepted) {
      if (b.register_server) {
        v1::Command cmd;
        *cmd.mutable_register_() = req.server();
        cmd.mutable_register_()->set_alive(true);
        Commit(cmd);
      }
      for (v1::CopyDone d : b.copies_done) {
        d.set_expected_version(c.machine.state().version());
        v1::Command cmd;
        *cmd.mutable_copy_done() = d;
        Commit(cmd);
      }
      if (c.machine.state().version() > req.map_version())
        *resp.mutable_map() = controller::ToShardMap(c.machine.state(), "leader");
    }
  }
  Send(to_deposed ? DeposedNode() : ControllerNode(), i, server_life,
       [this, i, beat, resp = std::move(resp)] {
         Server& s = *servers_[size_t(i)];
         if (!s.beating || s.beat != beat) return;
         s.beating = false;
         if (resp.accepted()) s.accepted_at = now_;
         if (resp.accepted() && ps::TakeHeartbeatAnswer(s.routing.get(), resp, s.beat_sent))
           Trace("ps-" + std::to_string(i) + " adopts " + MapText(resp.map()));
         // A server the job no longer wants exits once the map moved its copies off it (the
         // process's ControllerLink does the same).
         if (i >= wanted_ && s.routing->Retired()) {
           CrashServer(i);
           --counts_.crashes;
           ++counts_.retired;
           Trace("ps-" + std::to_string(i) + " retires");
         }
       });
}

// ---- trainers ----

void Sim::TrainerFetchMap(Trainer& t) {
  if (t.fetching && now_ < t.fetch_deadline) return;
  t.fetching = true;
  t.fetch_deadline = now_ + kBeatDeadline;
  const uint64_t fetch = ++t.fetch;
  Send(TrainerNode(t.index), ControllerNode(), 0, [this, &t, fetch] {
    // Any member answers with the map it has applied; the newest wins at the trainer.
    v1::ShardMap m = controller::ToShardMap(controller_->machine.state(), "");
    Send(ControllerNode(), TrainerNode(t.index), 0, [&t, fetch, m = std::move(m)] {
      if (t.fetch != fetch) return;
      t.fetching = false;
      if (!t.map || m.version() > t.map->version()) t.map = m;
    });
  });
}

void Sim::TrainerSend(Trainer& t) {
  if (!t.map) return TrainerFetchMap(t);
  const uint32_t shard = t.shard_of[t.seq - 1];
  const auto& r = t.map->shards(int(shard));
  if (r.replicas().empty()) return TrainerFetchMap(t);
  const int to = int(r.replicas(0));
  t.attempt++;
  t.sent = true;
  t.push_deadline = now_ + kPushDeadline;
  const int trainer = t.index;
  const uint64_t attempt = t.attempt, seq = t.seq;
  Send(TrainerNode(trainer), to, Life(to),
       [this, to, trainer, attempt, seq, shard] { OnPush(to, trainer, 0, attempt, seq, shard); });
}

void Sim::TrainerTick(Trainer& t) {
  if (t.fetching && now_ >= t.fetch_deadline) t.fetching = false;
  if (!t.map && !t.fetching) TrainerFetchMap(t);
  if (t.pushing) {
    if (t.sent && now_ >= t.push_deadline) {  // no answer: re-route on a fresh map
      t.sent = false;
      TrainerFetchMap(t);
    }
    if (!t.sent && !t.fetching) TrainerSend(t);
  } else if (!converging_ && Chance(0.3)) {
    t.seq++;
    t.shard_of.push_back(uint32_t(Uniform(0, int64_t(map_->shards().size()) - 1)));
    t.pushing = true;
    t.sent = false;
    if (!t.fetching) TrainerSend(t);
  }
  if (t.pulling && now_ >= t.pull_deadline) t.pulling = false;
  if (!t.pulling && t.map && Chance(0.1)) {
    const uint32_t shard = uint32_t(Uniform(0, int64_t(map_->shards().size()) - 1));
    const auto& r = t.map->shards(int(shard));
    if (r.replicas().empty()) return;
    const int to = int(r.replicas(0));
    t.pulling = true;
    t.pull_deadline = now_ + kBeatDeadline;
    const int trainer = t.index;
    Send(TrainerNode(trainer), to, Life(to),
         [this, to, trainer, shard] { OnPull(to, trainer, 0, shard); });
  }
}

}  // namespace adam::failover_sim
