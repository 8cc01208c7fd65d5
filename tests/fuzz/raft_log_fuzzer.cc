// libFuzzer target: bytes -> Raft log and snapshot file parsing (lengths, CRCs, record kinds,
// entry order), then a node built from whatever parsed.
#include <cstdint>
#include <string_view>

#include "raft/storage.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const uint64_t snapshot_index = size > 0 ? data[0] % 4 : 0;
  auto log = adam::raft::ParseLog(bytes, snapshot_index, "fuzz");
  if (log.ok()) {
    if (log->valid_bytes > size) __builtin_trap();
    uint64_t expect = snapshot_index + 1;
    for (const auto& e : log->state.entries)
      if (e.index != expect++) __builtin_trap();  // the parser's contract: contiguous
    adam::raft::Config c;
    c.id = 1;
    c.peers = {1, 2, 3};
    log->state.snapshot.index = snapshot_index;
    log->state.snapshot.term = snapshot_index;
    (void)adam::raft::Node::Make(c, log->state);  // must not crash, whatever the commit index
  }
  (void)adam::raft::ParseSnapshot(bytes, "fuzz");
  return 0;
}
