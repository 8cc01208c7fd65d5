#include "raft/wire.h"

#include <string>
#include <utility>

namespace adam::raft {

void MessageToProto(const Message& m, v1::RaftMessage* p) {
  p->set_type(static_cast<uint32_t>(m.type));
  p->set_from(m.from);
  p->set_to(m.to);
  p->set_term(m.term);
  p->set_log_term(m.log_term);
  p->set_index(m.index);
  for (const Entry& e : m.entries) {
    v1::RaftEntry* pe = p->add_entries();
    pe->set_term(e.term);
    pe->set_index(e.index);
    pe->set_type(static_cast<uint32_t>(e.type));
    pe->set_data(e.data);
  }
  p->set_commit(m.commit);
  p->set_reject(m.reject);
  p->set_reject_hint(m.reject_hint);
  if (m.snapshot) {
    p->set_has_snapshot(true);
    p->set_snapshot_index(m.snapshot->index);
    p->set_snapshot_term(m.snapshot->term);
    p->set_snapshot_data(m.snapshot->data);
  }
  p->set_context(m.context);
}

namespace {

// No log reaches 2^62 entries or terms: a larger index or term is corrupt, and refusing it keeps
// every index + 1 and every loop up to an index in the node finite.
constexpr uint64_t kMaxIndex = uint64_t{1} << 62;

Status CheckBound(const char* field, uint64_t value) {
  if (value < kMaxIndex) return OkStatus();
  return InvalidArgumentError(std::string("raft message: ") + field + " " + std::to_string(value) +
                              " beyond 2^62");
}

}  // namespace

StatusOr<Message> MessageFromProto(const v1::RaftMessage& p) {
  Message m;
  if (p.type() > static_cast<uint32_t>(MessageType::kSnapshot))
    return InvalidArgumentError("raft message: type " + std::to_string(p.type()) + " unknown");
  for (const auto& [field, value] : {std::pair<const char*, uint64_t>{"term", p.term()},
                                     {"log_term", p.log_term()},
                                     {"index", p.index()},
                                     {"commit", p.commit()},
                                     {"reject_hint", p.reject_hint()},
                                     {"snapshot_index", p.snapshot_index()},
                                     {"snapshot_term", p.snapshot_term()}})
    if (Status s = CheckBound(field, value); !s.ok()) return s;
  m.type = static_cast<MessageType>(p.type());
  m.from = p.from();
  m.to = p.to();
  m.term = p.term();
  m.log_term = p.log_term();
  m.index = p.index();
  uint64_t expect = p.index() + 1;
  for (const v1::RaftEntry& pe : p.entries()) {
    if (pe.type() > static_cast<uint32_t>(EntryType::kNoop))
      return InvalidArgumentError("raft message: entry type " + std::to_string(pe.type()));
    if (pe.index() != expect++)
      return InvalidArgumentError("raft message: entry index " + std::to_string(pe.index()) +
                                  " out of sequence");
    if (pe.term() > p.term() || pe.term() == 0)
      return InvalidArgumentError("raft message: entry term " + std::to_string(pe.term()) +
                                  " outside 1.." + std::to_string(p.term()));
    m.entries.push_back(Entry{pe.term(), pe.index(), static_cast<EntryType>(pe.type()), pe.data()});
  }
  if (m.type == MessageType::kSnapshot && !p.has_snapshot())
    return InvalidArgumentError("raft message: Snapshot without a snapshot");
  if (p.has_snapshot() && p.snapshot_term() > p.term())
    return InvalidArgumentError("raft message: snapshot_term " + std::to_string(p.snapshot_term()) +
                                " above the message's term " + std::to_string(p.term()));
  if (p.has_snapshot())
    m.snapshot = Snapshot{p.snapshot_index(), p.snapshot_term(), p.snapshot_data()};
  m.commit = p.commit();
  m.reject = p.reject();
  m.reject_hint = p.reject_hint();
  m.context = p.context();
  return m;
}

}  // namespace adam::raft
