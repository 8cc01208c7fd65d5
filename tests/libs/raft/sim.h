// A deterministic simulation of a Raft group: a seeded network that drops, delays, duplicates and
// reorders messages, partitions, and crash-restarts nodes from exactly what they persisted. It
// checks Raft's safety properties after every step and records the first violation.
//
// The state machine of every node is a hash chain over the entries it applied, so "every node
// applies the same sequence" is checked entry by entry against the global committed sequence.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <queue>
#include <sstream>
#include <string>
#include <vector>

#include "raft/raft.h"

namespace adam::raft::sim {

struct Faults {
  double drop = 0;       // probability a message is lost
  double duplicate = 0;  // probability a message is delivered twice
  int max_delay = 1;     // ticks: delivery after 1..max_delay ticks (so reordering)
  double partition = 0;  // per tick: probability a partition starts
  double crash = 0;      // per tick: probability an up node crashes
  double compact = 0;    // per tick and node: probability of a snapshot at the applied index
};

class Sim {
 public:
  Sim(uint64_t seed, int nodes, Faults faults, int election_ticks = 10)
      : seed_(seed), rng_(seed * 0x2545F4914F6CDD1Dull + 1), faults_(faults) {
    for (int i = 1; i <= nodes; ++i) ids_.push_back(static_cast<NodeId>(i));
    for (NodeId id : ids_) {
      SimNode& n = nodes_[id];
      n.config.id = id;
      n.config.peers = ids_;
      n.config.election_ticks = election_ticks;
      n.config.heartbeat_ticks = 2;
      n.config.seed = seed;
      n.config.max_entries_per_append = 8;
      Start(id);
    }
  }

  // One tick: faults, clock ticks, message delivery, client traffic.
  void Step(bool client_traffic = true) {
    ++now_;
    MaybeFaults();
    for (NodeId id : ids_)
      if (nodes_[id].node) {
        nodes_[id].node->Tick();
        Drain(id);
      }
    Deliver();
    if (client_traffic) {
      if (Chance(0.3)) ProposeAnywhere();
      if (Chance(0.05)) ReadAnywhere();
    }
    for (NodeId id : ids_) {
      SimNode& n = nodes_[id];
      if (n.node && Chance(faults_.compact) && n.node->applied() > n.node->snapshot().index) {
        const uint64_t at = n.node->applied();
        if (n.node->Compact(at, StateString(n)).ok()) n.disk.InstallSnapshot(n.node->snapshot());
      }
    }
  }

  // Stops faults, restarts every node and heals the network; then runs until every node applied
  // a fresh entry. Returns false if that does not happen within `max_ticks`.
  bool Converge(int max_ticks) {
    faults_ = Faults{};
    partition_.clear();
    for (NodeId id : ids_)
      if (!nodes_[id].node) Start(id);
    std::string final_value = "final-" + std::to_string(seed_);
    bool proposed = false;
    uint64_t final_index = 0;
    for (int t = 0; t < max_ticks && ok(); ++t) {
      Step(/*client_traffic=*/false);
      if (!proposed) {
        for (NodeId id : ids_) {
          SimNode& n = nodes_[id];
          if (n.node && n.node->role() == Role::kLeader) {
            auto index = n.node->Propose(final_value);
            if (index.ok()) {
              proposed = true;
              final_index = *index;
              Drain(id);
            }
            break;
          }
        }
        continue;
      }
      bool all = true;
      for (NodeId id : ids_) all = all && nodes_[id].applied >= final_index;
      if (all && committed_.size() >= final_index &&
          committed_[final_index - 1].data == final_value)
        return true;
      // A leader change may have dropped the uncommitted proposal: propose again.
      if (t % 200 == 199) proposed = false;
    }
    return false;
  }

  bool ok() const { return failure_.empty(); }
  const std::string& failure() const { return failure_; }
  size_t committed() const { return committed_.size(); }
  size_t leaders_seen() const { return leaders_.size(); }
  uint64_t reads_answered() const { return reads_answered_; }
  uint64_t crashes() const { return crashes_; }
  Node* node(NodeId id) { return nodes_[id].node ? &*nodes_[id].node : nullptr; }
  const std::vector<NodeId>& ids() const { return ids_; }
  std::optional<NodeId> Leader() {
    std::optional<NodeId> best;
    uint64_t term = 0;
    for (NodeId id : ids_)
      if (Node* n = node(id); n && n->role() == Role::kLeader && n->term() >= term) {
        best = id;
        term = n->term();
      }
    return best;
  }
  // Crashes `id`; it stays down until Restart (or, for faults, until down_until).
  void Crash(NodeId id) {
    nodes_[id].node.reset();
    nodes_[id].down_until = INT32_MAX;
    ++crashes_;
  }
  void Restart(NodeId id) { Start(id); }
  // Cuts `id` off from everyone (true) or heals it (false).
  void Isolate(NodeId id, bool isolated) {
    partition_.clear();
    if (isolated) {
      for (NodeId other : ids_) partition_[other] = other == id ? 1 : 0;
      heal_at_ = INT64_MAX;
    }
  }
  // Lets the process run until every node applied up to the same index (no client traffic).
  void Settle(int ticks) {
    for (int i = 0; i < ticks; ++i) Step(false);
  }
  // Snapshots node `id` at its applied index.
  bool CompactNow(NodeId id) {
    SimNode& n = nodes_[id];
    if (!n.node || !n.node->Compact(n.node->applied(), StateString(n)).ok()) return false;
    n.disk.InstallSnapshot(n.node->snapshot());
    return true;
  }
  uint64_t applied(NodeId id) const { return nodes_.at(id).applied; }
  std::vector<std::string> AppliedValues(NodeId id) const { return nodes_.at(id).values; }
  void ProposeTo(NodeId id, const std::string& value) {
    if (nodes_[id].node && nodes_[id].node->Propose(value).ok()) Drain(id);
  }

 private:
  struct SimNode {
    Config config;
    std::optional<Node> node;
    PersistentState disk;
    uint64_t applied = 0;
    uint64_t hash = 0;
    std::vector<std::string> values;  // applied normal entries' data (since the last restore)
    int down_until = 0;
  };
  struct InFlight {
    int64_t at;
    uint64_t seq;
    Message m;
    bool operator>(const InFlight& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  struct Committed {
    uint64_t term;
    std::string data;
    uint64_t hash;  // chain hash after this entry
  };

  uint64_t Rand() {
    uint64_t z = (rng_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  bool Chance(double p) { return p > 0 && static_cast<double>(Rand() % 1000000) < p * 1e6; }
  static uint64_t Chain(uint64_t h, const Entry& e) {
    h ^= e.term + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    for (char c : e.data) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
    return h * 0xBF58476D1CE4E5B9ull + e.index;
  }
  static std::string StateString(const SimNode& n) {
    return std::to_string(n.applied) + ":" + std::to_string(n.hash);
  }
  void Fail(const std::string& what) {
    if (failure_.empty()) failure_ = "tick " + std::to_string(now_) + ": " + what;
  }

  void Start(NodeId id) {
    SimNode& n = nodes_[id];
    StatusOr<Node> made = Node::Make(n.config, n.disk);
    if (!made.ok()) {
      Fail("node " + std::to_string(id) + " cannot restart: " + made.status().ToString());
      return;
    }
    n.node.emplace(std::move(*made));
    n.values.clear();
    RestoreFrom(id, n.disk.snapshot);
  }

  void RestoreFrom(NodeId id, const Snapshot& s) {
    SimNode& n = nodes_[id];
    n.applied = s.index;
    n.hash = 0;
    if (s.index == 0) return;
    const size_t colon = s.data.find(':');
    n.hash = std::stoull(s.data.substr(colon + 1));
    if (std::stoull(s.data.substr(0, colon)) != s.index)
      Fail("node " + std::to_string(id) + " snapshot index mismatch");
    if (s.index > committed_.size() || committed_[s.index - 1].hash != n.hash)
      Fail("node " + std::to_string(id) + " restored a snapshot at " + std::to_string(s.index) +
           " that does not match the committed sequence");
  }

  void Drain(NodeId id) {
    SimNode& n = nodes_[id];
    for (;;) {
      Ready rd = n.node->TakeReady();
      if (rd.empty()) break;
      n.disk.Persist(rd);
      for (Message& m : rd.messages) Send(std::move(m));
      if (rd.snapshot) RestoreFrom(id, *rd.snapshot);
      for (const Entry& e : rd.committed) Apply(id, e);
      for (const ReadState& r : rd.read_states) CheckRead(id, r);
    }
    CheckLeader(id);
  }

  void Apply(NodeId id, const Entry& e) {
    SimNode& n = nodes_[id];
    if (e.index != n.applied + 1) {
      Fail("node " + std::to_string(id) + " applied " + std::to_string(e.index) + " after " +
           std::to_string(n.applied));
      return;
    }
    n.hash = Chain(n.hash, e);
    n.applied = e.index;
    if (e.type == EntryType::kNormal) n.values.push_back(e.data);
    if (committed_.size() >= e.index) {
      const Committed& c = committed_[e.index - 1];
      if (c.term != e.term || c.data != e.data || c.hash != n.hash)
        Fail("node " + std::to_string(id) + " applied a different entry at index " +
             std::to_string(e.index) + " (term " + std::to_string(e.term) + " vs committed term " +
             std::to_string(c.term) + ")");
    } else {
      committed_.push_back({e.term, e.data, n.hash});
    }
  }

  void CheckLeader(NodeId id) {
    Node& node = *nodes_[id].node;
    if (node.role() != Role::kLeader) return;
    auto [it, inserted] = leaders_.emplace(node.term(), id);
    if (!inserted && it->second != id)
      Fail("two leaders in term " + std::to_string(node.term()) + ": " +
           std::to_string(it->second) + " and " + std::to_string(id));
    if (inserted) {
      // Leader completeness: a new leader holds every committed entry.
      for (uint64_t i = node.first_index(); i <= committed_.size(); ++i) {
        if (i > node.last_index() || node.TermAt(i) != committed_[i - 1].term ||
            node.EntryAt(i).data != committed_[i - 1].data) {
          Fail("leader " + std::to_string(id) + " of term " + std::to_string(node.term()) +
               " lacks committed entry " + std::to_string(i));
          break;
        }
      }
    }
  }

  void CheckRead(NodeId id, const ReadState& r) {
    ++reads_answered_;
    const auto it = reads_.find(r.context);
    if (it == reads_.end()) {
      Fail("node " + std::to_string(id) + " answered an unknown read " + r.context);
      return;
    }
    // Linearizable: the read sees every entry committed before it started.
    if (r.index < it->second)
      Fail("read " + r.context + " at index " + std::to_string(r.index) + " misses entry " +
           std::to_string(it->second) + " committed before it started");
    reads_.erase(it);
  }

  void Send(Message m) {
    if (Chance(faults_.drop)) return;
    const int copies = Chance(faults_.duplicate) ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
      const int64_t delay = 1 + static_cast<int64_t>(Rand() % std::max(1, faults_.max_delay));
      queue_.push({now_ + delay, seq_++, m});
    }
  }

  bool Connected(NodeId a, NodeId b) {
    if (partition_.empty()) return true;
    return partition_[a] == partition_[b];
  }

  void Deliver() {
    while (!queue_.empty() && queue_.top().at <= now_) {
      InFlight f = queue_.top();
      queue_.pop();
      SimNode& to = nodes_[f.m.to];
      if (!to.node || !Connected(f.m.from, f.m.to)) continue;
      to.node->Step(f.m);
      Drain(f.m.to);
    }
  }

  void ProposeAnywhere() {
    const NodeId id = ids_[Rand() % ids_.size()];
    SimNode& n = nodes_[id];
    if (!n.node) return;
    const std::string v = "v" + std::to_string(next_value_);
    if (n.node->Propose(v).ok()) {
      ++next_value_;
      Drain(id);
    }
  }

  void ReadAnywhere() {
    const NodeId id = ids_[Rand() % ids_.size()];
    SimNode& n = nodes_[id];
    if (!n.node) return;
    const std::string ctx = "r" + std::to_string(next_read_++);
    if (n.node->ReadIndex(ctx).ok()) {
      reads_[ctx] = committed_.size();
      Drain(id);
    }
  }

  void MaybeFaults() {
    if (!partition_.empty() && now_ >= heal_at_) partition_.clear();
    if (partition_.empty() && Chance(faults_.partition)) {
      for (NodeId id : ids_) partition_[id] = static_cast<int>(Rand() % 2);
      heal_at_ = now_ + 20 + static_cast<int64_t>(Rand() % 200);
    }
    for (NodeId id : ids_) {
      SimNode& n = nodes_[id];
      if (!n.node && now_ >= n.down_until) Start(id);
    }
    if (Chance(faults_.crash)) {
      const NodeId id = ids_[Rand() % ids_.size()];
      if (nodes_[id].node) {
        Crash(id);
        nodes_[id].down_until = static_cast<int>(now_ + 5 + static_cast<int64_t>(Rand() % 100));
      }
    }
  }

  uint64_t seed_;
  uint64_t rng_;
  Faults faults_;
  int64_t now_ = 0;
  std::vector<NodeId> ids_;
  std::map<NodeId, SimNode> nodes_;
  std::priority_queue<InFlight, std::vector<InFlight>, std::greater<>> queue_;
  uint64_t seq_ = 0;
  std::map<NodeId, int> partition_;
  int64_t heal_at_ = 0;
  std::vector<Committed> committed_;
  std::map<uint64_t, NodeId> leaders_;
  std::map<std::string, uint64_t> reads_;
  uint64_t next_value_ = 0;
  uint64_t next_read_ = 0;
  uint64_t reads_answered_ = 0;
  uint64_t crashes_ = 0;
  std::string failure_;
};

}  // namespace adam::raft::sim
