#include "raft/raft.h"

#include <algorithm>

namespace adam::raft {

const char* MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kPreVote:
      return "PreVote";
    case MessageType::kPreVoteResp:
      return "PreVoteResp";
    case MessageType::kVote:
      return "Vote";
    case MessageType::kVoteResp:
      return "VoteResp";
    case MessageType::kAppend:
      return "Append";
    case MessageType::kAppendResp:
      return "AppendResp";
    case MessageType::kHeartbeat:
      return "Heartbeat";
    case MessageType::kHeartbeatResp:
      return "HeartbeatResp";
    case MessageType::kSnapshot:
      return "Snapshot";
  }
  return "?";
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kFollower:
      return "follower";
    case Role::kPreCandidate:
      return "pre-candidate";
    case Role::kCandidate:
      return "candidate";
    case Role::kLeader:
      return "leader";
  }
  return "?";
}

void PersistentState::Persist(const Ready& ready) {
  if (ready.hard_state) hard_state = *ready.hard_state;
  if (ready.snapshot) InstallSnapshot(*ready.snapshot);
  if (!ready.entries.empty()) {
    const uint64_t first = ready.entries.front().index;
    while (!entries.empty() && entries.back().index >= first) entries.pop_back();
    entries.insert(entries.end(), ready.entries.begin(), ready.entries.end());
  }
}

void PersistentState::InstallSnapshot(const Snapshot& s) {
  // Keep the entries after the snapshot only if they continue it with the same term.
  std::vector<Entry> kept;
  bool continues = false;
  for (const Entry& e : entries) {
    if (e.index == s.index && e.term == s.term) continues = true;
    if (e.index > s.index) kept.push_back(e);
  }
  if (!continues) kept.clear();
  snapshot = s;
  entries = std::move(kept);
}

StatusOr<Node> Node::Make(const Config& config, const PersistentState& state) {
  if (config.id == 0) return InvalidArgumentError("raft config: id must be >= 1");
  if (std::find(config.peers.begin(), config.peers.end(), config.id) == config.peers.end())
    return InvalidArgumentError("raft config: peers must include the node's own id " +
                                std::to_string(config.id));
  if (config.election_ticks < 2 || config.heartbeat_ticks < 1 ||
      config.heartbeat_ticks >= config.election_ticks)
    return InvalidArgumentError(
        "raft config: need election_ticks >= 2 and 1 <= heartbeat_ticks < election_ticks");
  uint64_t expect = state.snapshot.index + 1;
  for (const Entry& e : state.entries) {
    if (e.index != expect)
      return DataLossError("raft state: entry " + std::to_string(e.index) + " where " +
                           std::to_string(expect) + " was expected");
    ++expect;
  }
  Node n;
  n.id_ = config.id;
  n.peers_ = config.peers;
  std::sort(n.peers_.begin(), n.peers_.end());
  n.peers_.erase(std::unique(n.peers_.begin(), n.peers_.end()), n.peers_.end());
  n.election_ticks_ = config.election_ticks;
  n.heartbeat_ticks_ = config.heartbeat_ticks;
  n.max_entries_ = std::max<size_t>(1, config.max_entries_per_append);
  n.max_bytes_ = config.max_bytes_per_append;
  n.rng_ = config.seed * 0x9E3779B97F4A7C15ull + config.id;
  n.snapshot_ = state.snapshot;
  n.offset_ = state.snapshot.index;
  n.log_ = state.entries;
  n.stable_ = n.last_index();
  n.term_ = state.hard_state.term;
  n.vote_ = state.hard_state.vote;
  n.commit_ = std::max(state.hard_state.commit, state.snapshot.index);
  if (n.commit_ > n.last_index())
    return DataLossError("raft state: commit index " + std::to_string(n.commit_) +
                         " is beyond the last entry " + std::to_string(n.last_index()));
  n.applied_ = state.snapshot.index;
  n.snapshot_to_apply_ = false;
  n.last_hard_state_ = {n.term_, n.vote_, n.commit_};
  n.BecomeFollower(n.term_, 0);
  return n;
}

uint64_t Node::Random() {
  // SplitMix64: deterministic per (seed, id).
  uint64_t z = (rng_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::optional<uint64_t> Node::TermAt(uint64_t index) const {
  if (index == offset_) return snapshot_.term;
  if (index < offset_ || index > last_index()) return std::nullopt;
  return log_[index - offset_ - 1].term;
}

void Node::ResetElectionTimeout() {
  election_elapsed_ = 0;
  randomized_timeout_ = election_ticks_ + static_cast<int>(Random() % election_ticks_);
}

void Node::BecomeFollower(uint64_t term, NodeId leader) {
  if (term != term_) vote_ = 0;
  term_ = term;
  role_ = Role::kFollower;
  leader_ = leader;
  heartbeat_elapsed_ = 0;
  ResetElectionTimeout();
  reads_.clear();
  waiting_reads_.clear();
}

void Node::BecomePreCandidate() {
  role_ = Role::kPreCandidate;
  leader_ = 0;
  votes_.clear();
  ResetElectionTimeout();
}

void Node::BecomeCandidate() {
  role_ = Role::kCandidate;
  ++term_;
  vote_ = id_;
  leader_ = 0;
  votes_.clear();
  ResetElectionTimeout();
}

void Node::BecomeLeader() {
  role_ = Role::kLeader;
  leader_ = id_;
  heartbeat_elapsed_ = 0;
  election_elapsed_ = 0;
  progress_.clear();
  for (NodeId p : peers_) {
    Progress pr;
    pr.next = last_index() + 1;
    pr.recent_active = true;
    progress_[p] = pr;
  }
  // A no-op of the new term lets the leader commit earlier terms' entries (Raft section 5.4.2).
  AppendEntries(last_index(), {Entry{term_, last_index() + 1, EntryType::kNoop, {}}});
  progress_[id_].match = last_index();
  progress_[id_].next = last_index() + 1;
  if (!MaybeCommit()) BroadcastAppend();
}

void Node::Campaign() {
  if (role_ == Role::kLeader) return;
  StartElection(/*pre=*/true);
}

void Node::StartElection(bool pre) {
  if (pre)
    BecomePreCandidate();
  else
    BecomeCandidate();
  votes_[id_] = true;
  if (votes_.size() >= quorum()) {  // a single-node group
    if (pre)
      StartElection(false);
    else
      BecomeLeader();
    return;
  }
  const uint64_t last = last_index();
  const uint64_t last_term = *TermAt(last);
  for (NodeId p : peers_) {
    if (p == id_) continue;
    Message m;
    m.type = pre ? MessageType::kPreVote : MessageType::kVote;
    m.to = p;
    m.term = pre ? term_ + 1 : term_;
    m.index = last;
    m.log_term = last_term;
    Send(std::move(m));
  }
}

void Node::Tick() {
  if (role_ == Role::kLeader) {
    ++election_elapsed_;
    if (election_elapsed_ >= election_ticks_) {
      // Check quorum: step down if a quorum was not heard from during the last timeout.
      election_elapsed_ = 0;
      size_t active = 0;
      for (auto& [p, pr] : progress_) {
        if (p == id_ || pr.recent_active) ++active;
        pr.recent_active = false;
      }
      if (active < quorum()) {
        BecomeFollower(term_, 0);
        return;
      }
    }
    if (++heartbeat_elapsed_ >= heartbeat_ticks_) {
      heartbeat_elapsed_ = 0;
      BroadcastHeartbeat({});
    }
    return;
  }
  if (++election_elapsed_ >= randomized_timeout_) StartElection(/*pre=*/true);
}

void Node::Send(Message m) {
  m.from = id_;
  if (m.term == 0) m.term = term_;
  outbox_.push_back(std::move(m));
}

void Node::AppendEntries(uint64_t after, const std::vector<Entry>& entries) {
  TruncateAfter(after);
  for (const Entry& e : entries) log_.push_back(e);
}

void Node::TruncateAfter(uint64_t index) {
  if (index >= last_index()) return;
  log_.resize(index - offset_);
  stable_ = std::min(stable_, index);
}

bool Node::UpToDate(uint64_t log_term, uint64_t index) const {
  const uint64_t my_last = last_index();
  const uint64_t my_term = *TermAt(my_last);
  return log_term > my_term || (log_term == my_term && index >= my_last);
}

void Node::SendAppend(NodeId to, bool allow_empty) {
  Progress& pr = progress_[to];
  if (pr.state == Progress::kSnapshot || (pr.state == Progress::kProbe && pr.paused)) return;
  Message m;
  m.to = to;
  const std::optional<uint64_t> prev_term = TermAt(pr.next - 1);
  if (!prev_term) {
    // The entries it needs were compacted: send the snapshot.
    m.type = MessageType::kSnapshot;
    m.snapshot = snapshot_;
    pr.state = Progress::kSnapshot;
    pr.pending_snapshot = snapshot_.index;
    Send(std::move(m));
    return;
  }
  m.type = MessageType::kAppend;
  m.index = pr.next - 1;
  m.log_term = *prev_term;
  m.commit = commit_;
  size_t bytes = 0;
  for (uint64_t i = pr.next; i <= last_index() && m.entries.size() < max_entries_; ++i) {
    const Entry& e = EntryAt(i);
    if (!m.entries.empty() && bytes + e.data.size() > max_bytes_) break;
    bytes += e.data.size();
    m.entries.push_back(e);
  }
  if (m.entries.empty() && !allow_empty) return;
  if (pr.state == Progress::kReplicate) {
    if (!m.entries.empty()) pr.next = m.entries.back().index + 1;
  } else {
    pr.paused = true;
  }
  Send(std::move(m));
}

void Node::BroadcastAppend() {
  for (NodeId p : peers_)
    if (p != id_) SendAppend(p, /*allow_empty=*/true);
}

void Node::BroadcastHeartbeat(const std::string& context) {
  for (NodeId p : peers_) {
    if (p == id_) continue;
    Message m;
    m.type = MessageType::kHeartbeat;
    m.to = p;
    // Never tell a follower to commit beyond what it is known to hold.
    m.commit = std::min(progress_[p].match, commit_);
    m.context = context;
    Send(std::move(m));
  }
}

bool Node::MaybeCommit() {
  std::vector<uint64_t> matches;
  for (const auto& [p, pr] : progress_) matches.push_back(p == id_ ? last_index() : pr.match);
  std::sort(matches.begin(), matches.end(), std::greater<>());
  const uint64_t candidate = matches[quorum() - 1];
  if (candidate > commit_ && TermAt(candidate) == term_) {
    const bool first_in_term = !CommittedInTerm();
    commit_ = candidate;
    if (first_in_term) {
      // Reads that waited for the first commit of this term start their rounds now.
      std::vector<std::string> waiting = std::move(waiting_reads_);
      waiting_reads_.clear();
      for (std::string& ctx : waiting) (void)ReadIndex(std::move(ctx));
    }
    BroadcastAppend();
    return true;
  }
  return false;
}

bool Node::CommittedInTerm() const { return TermAt(commit_) == term_; }

StatusOr<uint64_t> Node::Propose(std::string data) {
  if (role_ != Role::kLeader)
    return FailedPreconditionError("not the leader; leader is " + std::to_string(leader_));
  const uint64_t index = last_index() + 1;
  log_.push_back(Entry{term_, index, EntryType::kNormal, std::move(data)});
  progress_[id_].match = index;
  progress_[id_].next = index + 1;
  if (!MaybeCommit()) BroadcastAppend();
  return index;
}

Status Node::ReadIndex(std::string context) {
  if (role_ != Role::kLeader)
    return FailedPreconditionError("not the leader; leader is " + std::to_string(leader_));
  if (!CommittedInTerm()) {
    waiting_reads_.push_back(std::move(context));
    return OkStatus();
  }
  if (quorum() == 1) {
    read_states_.push_back({commit_, std::move(context)});
    return OkStatus();
  }
  reads_.push_back({commit_, context, {id_}});
  BroadcastHeartbeat(context);
  return OkStatus();
}

void Node::ReleaseReads() {
  // A quorum acknowledging round k also confirms every earlier round.
  size_t confirmed = 0;
  for (size_t i = 0; i < reads_.size(); ++i)
    if (reads_[i].acks.size() >= quorum()) confirmed = i + 1;
  for (size_t i = 0; i < confirmed; ++i)
    read_states_.push_back({reads_[i].index, std::move(reads_[i].context)});
  reads_.erase(reads_.begin(), reads_.begin() + static_cast<long>(confirmed));
}

Status Node::Compact(uint64_t index, std::string data) {
  if (index <= offset_) return OkStatus();
  if (index > applied_)
    return FailedPreconditionError("raft compact: index " + std::to_string(index) +
                                   " is beyond the applied index " + std::to_string(applied_));
  const uint64_t term = *TermAt(index);
  log_.erase(log_.begin(), log_.begin() + static_cast<long>(index - offset_));
  offset_ = index;
  snapshot_ = Snapshot{index, term, std::move(data)};
  return OkStatus();
}

void Node::Step(const Message& m) {
  if (m.to != id_ || std::find(peers_.begin(), peers_.end(), m.from) == peers_.end() ||
      m.from == id_) {
    ++ignored_;
    return;
  }
  const bool is_vote = m.type == MessageType::kVote || m.type == MessageType::kPreVote;
  if (m.term > term_) {
    if (is_vote && leader_ != 0 && election_elapsed_ < election_ticks_) {
      // Check-quorum lease: we heard from a leader recently; a disruptive candidate is ignored.
      ++ignored_;
      return;
    }
    if (m.type == MessageType::kPreVote) {  // NOLINT(bugprone-branch-clone): empty on purpose
      // A pre-vote never changes our term.
    } else if (m.type == MessageType::kPreVoteResp && !m.reject) {
      // Granted for a future term: counted below.
    } else {
      const bool from_leader = m.type == MessageType::kAppend ||
                               m.type == MessageType::kHeartbeat ||
                               m.type == MessageType::kSnapshot;
      BecomeFollower(m.term, from_leader ? m.from : 0);
    }
  } else if (m.term < term_) {
    if (m.type == MessageType::kAppend || m.type == MessageType::kHeartbeat) {
      // A stale leader: tell it our term so it steps down.
      Message r;
      r.type = MessageType::kAppendResp;
      r.to = m.from;
      r.reject = true;
      r.index = 0;
      Send(std::move(r));
    } else if (m.type == MessageType::kPreVote) {
      Message r;
      r.type = MessageType::kPreVoteResp;
      r.to = m.from;
      r.reject = true;
      Send(std::move(r));
    } else {
      ++ignored_;
    }
    return;
  }

  if (is_vote) {
    HandleVoteRequest(m);
    return;
  }
  switch (role_) {
    case Role::kLeader:
      StepLeader(m);
      break;
    case Role::kPreCandidate:
    case Role::kCandidate:
      StepCandidate(m);
      break;
    case Role::kFollower:
      StepFollower(m);
      break;
  }
}

void Node::HandleVoteRequest(const Message& m) {
  const bool pre = m.type == MessageType::kPreVote;
  const bool can_vote = vote_ == m.from || (vote_ == 0 && leader_ == 0) || (pre && m.term > term_);
  Message r;
  r.type = pre ? MessageType::kPreVoteResp : MessageType::kVoteResp;
  r.to = m.from;
  if (can_vote && UpToDate(m.log_term, m.index)) {
    r.term = m.term;
    if (!pre) {
      vote_ = m.from;
      election_elapsed_ = 0;
    }
  } else {
    r.reject = true;
    r.term = term_;
  }
  Send(std::move(r));
}

void Node::StepCandidate(const Message& m) {
  const MessageType want =
      role_ == Role::kPreCandidate ? MessageType::kPreVoteResp : MessageType::kVoteResp;
  switch (m.type) {
    case MessageType::kAppend:
      BecomeFollower(m.term, m.from);
      HandleAppend(m);
      return;
    case MessageType::kHeartbeat:
      BecomeFollower(m.term, m.from);
      StepFollower(m);
      return;
    case MessageType::kSnapshot:
      BecomeFollower(m.term, m.from);
      HandleSnapshot(m);
      return;
    default:
      break;
  }
  if (m.type != want) return;
  votes_.emplace(m.from, !m.reject);
  size_t granted = 0, rejected = 0;
  for (const auto& [p, v] : votes_) (v ? granted : rejected)++;
  if (granted >= quorum()) {
    if (role_ == Role::kPreCandidate)
      StartElection(false);
    else
      BecomeLeader();
  } else if (rejected >= quorum()) {
    BecomeFollower(term_, 0);
  }
}

void Node::StepFollower(const Message& m) {
  switch (m.type) {
    case MessageType::kAppend:
      election_elapsed_ = 0;
      leader_ = m.from;
      HandleAppend(m);
      break;
    case MessageType::kHeartbeat: {
      election_elapsed_ = 0;
      leader_ = m.from;
      if (m.commit > commit_) commit_ = std::min(m.commit, last_index());
      Message r;
      r.type = MessageType::kHeartbeatResp;
      r.to = m.from;
      r.context = m.context;
      Send(std::move(r));
      break;
    }
    case MessageType::kSnapshot:
      election_elapsed_ = 0;
      leader_ = m.from;
      HandleSnapshot(m);
      break;
    default:
      break;
  }
}

void Node::HandleAppend(const Message& m) {
  Message r;
  r.type = MessageType::kAppendResp;
  r.to = m.from;
  if (m.index < commit_) {
    r.index = commit_;
    Send(std::move(r));
    return;
  }
  if (TermAt(m.index) == m.log_term) {
    // Append entries from the first one that is new or conflicts. A conflict at or below commit_
    // cannot come from a correct leader: such a message is dropped, never allowed to rewrite
    // committed entries.
    uint64_t last_new = m.index + m.entries.size();
    for (size_t i = 0; i < m.entries.size(); ++i) {
      const Entry& e = m.entries[i];
      if (TermAt(e.index) != e.term) {
        if (e.index <= commit_) {
          ++ignored_;
          return;
        }
        TruncateAfter(e.index - 1);
        log_.insert(log_.end(), m.entries.begin() + static_cast<long>(i), m.entries.end());
        break;
      }
    }
    commit_ = std::max(commit_, std::min(m.commit, last_new));
    r.index = last_new;
  } else {
    r.reject = true;
    r.index = m.index;
    r.reject_hint = std::min(m.index, last_index());
  }
  Send(std::move(r));
}

void Node::HandleSnapshot(const Message& m) {
  Message r;
  r.type = MessageType::kAppendResp;
  r.to = m.from;
  const Snapshot& s = *m.snapshot;
  if (s.index <= commit_) {
    r.index = commit_;
  } else if (TermAt(s.index) == s.term) {
    // We already hold the entries: just move the commit index.
    commit_ = s.index;
    r.index = commit_;
  } else {
    log_.clear();
    offset_ = s.index;
    snapshot_ = s;
    stable_ = s.index;
    commit_ = s.index;
    applied_ = s.index;
    snapshot_unstable_ = true;
    snapshot_to_apply_ = true;
    r.index = s.index;
  }
  Send(std::move(r));
}

void Node::StepLeader(const Message& m) {
  auto it = progress_.find(m.from);
  if (it == progress_.end()) return;
  Progress& pr = it->second;
  switch (m.type) {
    case MessageType::kAppendResp: {
      pr.recent_active = true;
      if (m.reject) {
        if (m.index == 0 && m.reject_hint == 0) return;  // a stale-term reply: nothing to do
        // Back off to the follower's hint (never below what it matched).
        if (pr.state == Progress::kReplicate || m.index == pr.next - 1) {
          pr.next = std::max(pr.match + 1, std::min(m.index, m.reject_hint + 1));
          pr.state = Progress::kProbe;
          pr.paused = false;
          SendAppend(m.from, /*allow_empty=*/true);
        }
        return;
      }
      pr.paused = false;
      if (m.index > pr.match) {
        pr.match = m.index;
        pr.next = std::max(pr.next, m.index + 1);
        if (pr.state == Progress::kSnapshot && pr.match >= pr.pending_snapshot) {
          pr.state = Progress::kProbe;
        }
        if (pr.state == Progress::kProbe) pr.state = Progress::kReplicate;
        if (MaybeCommit()) return;  // MaybeCommit broadcast appends already
      } else if (pr.state == Progress::kSnapshot && m.index >= pr.pending_snapshot) {
        pr.state = Progress::kReplicate;
        pr.next = m.index + 1;
      }
      if (pr.next <= last_index()) SendAppend(m.from, /*allow_empty=*/false);
      return;
    }
    case MessageType::kHeartbeatResp: {
      pr.recent_active = true;
      pr.paused = false;
      if (pr.state == Progress::kSnapshot) {
        // The snapshot or its answer may be lost: probe again (re-sends it if still needed).
        pr.state = Progress::kProbe;
        pr.next = pr.match + 1;
      }
      if (pr.match < last_index()) SendAppend(m.from, /*allow_empty=*/true);
      if (!m.context.empty()) {
        for (PendingRead& r : reads_)
          if (r.context == m.context &&
              std::find(r.acks.begin(), r.acks.end(), m.from) == r.acks.end())
            r.acks.push_back(m.from);
        ReleaseReads();
      }
      return;
    }
    default:
      return;
  }
}

Ready Node::TakeReady() {
  Ready rd;
  const HardState hs{term_, vote_, commit_};
  if (!(hs == last_hard_state_)) {
    rd.hard_state = hs;
    last_hard_state_ = hs;
  }
  if (snapshot_unstable_) {
    rd.snapshot = snapshot_;
    snapshot_unstable_ = false;
  }
  if (stable_ < last_index()) {
    const uint64_t from = std::max(stable_ + 1, first_index());
    for (uint64_t i = from; i <= last_index(); ++i) rd.entries.push_back(EntryAt(i));
    stable_ = last_index();
  }
  if (snapshot_to_apply_) snapshot_to_apply_ = false;
  for (uint64_t i = applied_ + 1; i <= commit_; ++i) rd.committed.push_back(EntryAt(i));
  applied_ = std::max(applied_, commit_);
  rd.messages = std::move(outbox_);
  outbox_.clear();
  rd.read_states = std::move(read_states_);
  read_states_.clear();
  return rd;
}

}  // namespace adam::raft
