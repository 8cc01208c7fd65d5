// The Raft consensus core: a deterministic state machine with no I/O, no clock and no threads.
//
// A driver owns one `Node` and calls `Tick()` at a fixed interval, `Step(message)` for every
// message that arrives, `Propose(data)` to append a command and `ReadIndex(context)` for a
// linearizable read. After any of these it calls `TakeReady()` and handles the batch in order:
//   1. persist `hard_state`, `snapshot` and `entries` (fsync) -- nothing else may happen first;
//   2. send `messages`;
//   3. restore the state machine from `snapshot` if set, then apply `committed` in order;
//   4. answer `read_states` once the state machine has applied up to their index.
//
// Implemented: leader election with randomized timeouts, pre-vote and check-quorum (a leader that
// has not heard from a quorum for an election timeout steps down; a node that heard from a live
// leader within the timeout ignores vote requests), log replication with probe/replicate flow
// control, commitment of current-term entries only (a leader appends a no-op on election),
// snapshots (`Compact`) and InstallSnapshot to followers that fell behind the log's start, and
// linearizable reads by ReadIndex (the leader records its commit index, confirms its leadership by
// a heartbeat round acknowledged by a quorum, and answers once applied up to that index; no clock
// assumptions). Membership is fixed at construction (no configuration changes).
//
// Not thread-safe: one thread (the driver's) uses a Node.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace adam::raft {

using NodeId = uint64_t;  // 1..n; 0 means none

enum class EntryType : uint8_t { kNormal = 0, kNoop = 1 };

struct Entry {
  uint64_t term = 0;
  uint64_t index = 0;
  EntryType type = EntryType::kNormal;
  std::string data;
  bool operator==(const Entry&) const = default;
};

struct HardState {
  uint64_t term = 0;
  NodeId vote = 0;
  uint64_t commit = 0;
  bool operator==(const HardState&) const = default;
};

struct Snapshot {
  uint64_t index = 0;  // last entry the snapshot covers
  uint64_t term = 0;   // that entry's term
  std::string data;    // the state machine, serialized by the application
};

enum class MessageType : uint8_t {
  kPreVote,
  kPreVoteResp,
  kVote,
  kVoteResp,
  kAppend,
  kAppendResp,
  kHeartbeat,
  kHeartbeatResp,
  kSnapshot,
};
const char* MessageTypeName(MessageType type);

struct Message {
  MessageType type = MessageType::kAppend;
  NodeId from = 0;
  NodeId to = 0;
  uint64_t term = 0;
  // Append: the entry before `entries`; votes: the candidate's last entry; AppendResp: the last
  // index the follower matched (accept) or the rejected probe index (reject).
  uint64_t log_term = 0;
  uint64_t index = 0;
  std::vector<Entry> entries;
  uint64_t commit = 0;
  bool reject = false;
  uint64_t reject_hint = 0;  // AppendResp reject: the follower's last index
  std::optional<Snapshot> snapshot;
  std::string context;  // Heartbeat(Resp): the ReadIndex round it confirms
};

// A linearizable read is safe once the state machine has applied `index`.
struct ReadState {
  uint64_t index = 0;
  std::string context;
};

enum class Role : uint8_t { kFollower, kPreCandidate, kCandidate, kLeader };
const char* RoleName(Role role);

struct Ready {
  std::optional<HardState> hard_state;  // changed since the last Ready
  std::optional<Snapshot> snapshot;     // installed from the leader
  // New or rewritten log entries, ascending and contiguous; persisted entries with an index >=
  // entries.front().index are replaced by them.
  std::vector<Entry> entries;
  std::vector<Message> messages;
  std::vector<Entry> committed;  // to apply, ascending, after the snapshot if any
  std::vector<ReadState> read_states;
  bool empty() const {
    return !hard_state && !snapshot && entries.empty() && messages.empty() && committed.empty() &&
           read_states.empty();
  }
};

// What a node persisted: restored after a crash.
struct PersistentState {
  HardState hard_state;
  Snapshot snapshot;
  std::vector<Entry> entries;  // after snapshot.index, contiguous
  // Applies the persistence part of `ready` (hard state, snapshot, entries) to this state.
  void Persist(const Ready& ready);
  // Replaces the entries up to `s.index` by `s` (after Node::Compact, or a received snapshot).
  void InstallSnapshot(const Snapshot& s);
};

struct Config {
  NodeId id = 0;
  std::vector<NodeId> peers;  // every member, including `id`
  int election_ticks = 10;    // a follower campaigns after [election, 2*election) silent ticks
  int heartbeat_ticks = 1;    // a leader sends heartbeats every heartbeat_ticks
  uint64_t seed = 0;          // for the randomized election timeout
  size_t max_entries_per_append = 256;
  size_t max_bytes_per_append = 1 << 20;
};

class Node {
 public:
  // A node starting from `state` (empty for a new member). `config.peers` must contain `id`.
  static StatusOr<Node> Make(const Config& config, const PersistentState& state = {});

  // Advances the logical clock by one tick.
  void Tick();
  // Handles a message addressed to this node. Messages for other nodes or from non-members are
  // ignored (counted in `ignored_messages()`).
  void Step(const Message& message);
  // Appends `data` as a new entry. Returns its index, or FailedPrecondition naming the leader
  // (`not the leader; leader is 2`) when this node is not the leader.
  StatusOr<uint64_t> Propose(std::string data);
  // Starts a linearizable read; its ReadState comes in a later Ready. FailedPrecondition when not
  // the leader. Reads started before the leader committed an entry of its term wait for it.
  Status ReadIndex(std::string context);
  // Replaces the log up to `index` (<= applied) by a snapshot holding `data`. Driver: persist the
  // snapshot and drop those entries from storage afterwards.
  Status Compact(uint64_t index, std::string data);
  // Makes this follower campaign now (tests; leadership transfer).
  void Campaign();

  Ready TakeReady();

  NodeId id() const { return id_; }
  Role role() const { return role_; }
  uint64_t term() const { return term_; }
  NodeId leader() const { return leader_; }
  uint64_t commit() const { return commit_; }
  uint64_t applied() const { return applied_; }
  uint64_t last_index() const { return offset_ + log_.size(); }
  uint64_t first_index() const { return offset_ + 1; }
  // The term of the entry at `index`; nullopt when compacted away (below snapshot) or beyond.
  std::optional<uint64_t> TermAt(uint64_t index) const;
  // The entry at `index` (first_index() <= index <= last_index()).
  const Entry& EntryAt(uint64_t index) const { return log_[index - offset_ - 1]; }
  const Snapshot& snapshot() const { return snapshot_; }
  uint64_t ignored_messages() const { return ignored_; }
  size_t quorum() const { return peers_.size() / 2 + 1; }

 private:
  struct Progress {
    uint64_t match = 0;
    uint64_t next = 1;
    enum State { kProbe, kReplicate, kSnapshot } state = kProbe;
    bool paused = false;  // probe: one append in flight
    bool recent_active = false;
    uint64_t pending_snapshot = 0;
  };
  struct PendingRead {
    uint64_t index = 0;
    std::string context;
    std::vector<NodeId> acks;
  };

  Node() = default;
  void BecomeFollower(uint64_t term, NodeId leader);
  void BecomePreCandidate();
  void BecomeCandidate();
  void BecomeLeader();
  void StartElection(bool pre);
  void Send(Message m);
  void SendAppend(NodeId to, bool allow_empty);
  void BroadcastAppend();
  void BroadcastHeartbeat(const std::string& context);
  void HandleAppend(const Message& m);
  void HandleSnapshot(const Message& m);
  void HandleVoteRequest(const Message& m);
  void StepLeader(const Message& m);
  void StepCandidate(const Message& m);
  void StepFollower(const Message& m);
  bool MaybeCommit();
  bool UpToDate(uint64_t log_term, uint64_t index) const;
  void AppendEntries(uint64_t after, const std::vector<Entry>& entries);
  void TruncateAfter(uint64_t index);
  void ResetElectionTimeout();
  bool CommittedInTerm() const;
  void ReleaseReads();
  uint64_t Random();

  NodeId id_ = 0;
  std::vector<NodeId> peers_;
  int election_ticks_ = 10;
  int heartbeat_ticks_ = 1;
  size_t max_entries_ = 256;
  size_t max_bytes_ = 1 << 20;
  uint64_t rng_ = 0;

  Role role_ = Role::kFollower;
  uint64_t term_ = 0;
  NodeId vote_ = 0;
  NodeId leader_ = 0;
  uint64_t commit_ = 0;
  uint64_t applied_ = 0;
  int election_elapsed_ = 0;
  int heartbeat_elapsed_ = 0;
  int randomized_timeout_ = 0;

  Snapshot snapshot_;       // log starts after snapshot_.index
  uint64_t offset_ = 0;     // == snapshot_.index
  std::vector<Entry> log_;  // entries offset_+1 .. offset_+log_.size()
  uint64_t stable_ = 0;     // entries <= stable_ were handed out for persistence
  bool snapshot_unstable_ = false;
  bool snapshot_to_apply_ = false;
  HardState last_hard_state_;

  std::map<NodeId, Progress> progress_;
  std::map<NodeId, bool> votes_;
  std::vector<PendingRead> reads_;          // confirmed-in-order ReadIndex rounds
  std::vector<std::string> waiting_reads_;  // before the first commit of this term
  std::vector<ReadState> read_states_;
  std::vector<Message> outbox_;
  uint64_t ignored_ = 0;
};

}  // namespace adam::raft
