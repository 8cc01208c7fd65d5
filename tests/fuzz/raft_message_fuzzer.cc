// libFuzzer target: bytes -> a RaftBatch (what RaftTransport receives) -> messages -> Step into a
// follower and a leader. Whatever arrives, the node must neither crash nor break its own
// invariants (commit within the log, contiguous log).
#include <cstdint>
#include <string>

#include "adam/v1/controller.pb.h"
#include "raft/raft.h"
#include "raft/wire.h"

namespace {

void Check(const adam::raft::Node& n) {
  if (n.commit() > n.last_index() || n.applied() > n.commit()) __builtin_trap();
  for (uint64_t i = n.first_index(); i <= n.last_index(); ++i)
    if (n.EntryAt(i).index != i) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  adam::v1::RaftBatch batch;
  if (!batch.ParseFromArray(data, int(size))) return 0;
  adam::raft::Config c;
  c.id = 1;
  c.peers = {1, 2, 3};
  adam::raft::PersistentState st;
  for (uint64_t i = 1; i <= 4; ++i)
    st.entries.push_back({i <= 2 ? 1u : 2u, i, adam::raft::EntryType::kNormal, "x"});
  st.hard_state = {2, 0, 2};
  adam::raft::Node follower = *adam::raft::Node::Make(c, st);
  adam::raft::Node leader = *adam::raft::Node::Make(c, st);
  leader.Campaign();
  for (const auto& p : batch.messages()) {
    auto m = adam::raft::MessageFromProto(p);
    if (!m.ok()) continue;
    m->to = 1;
    follower.Step(*m);
    leader.Step(*m);
    (void)follower.TakeReady();
    (void)leader.TakeReady();
    Check(follower);
    Check(leader);
    follower.Tick();
    leader.Tick();
  }
  return 0;
}
