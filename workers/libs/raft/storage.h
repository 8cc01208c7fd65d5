// Durable Raft state in a directory: an append-only log file and a snapshot file.
//
// `raft.log` is a sequence of records `[u32 length][u32 crc32][u8 kind][payload]` (little
// endian; the CRC covers kind and payload). Kind 1 is a hard state (term, vote, commit), kind 2 an
// entry (term, index, type, data). An entry with index i replaces every earlier entry with index
// >= i, so a follower's log truncation is just an append. `Persist` writes a Ready's entries, then
// its hard state, then fdatasyncs once (group commit) before returning: no entry, term or vote is
// acted on before it is on disk. (A hard state whose only change is the commit index is written
// without a sync of its own, as in etcd: the commit index is relearned from the leader.) `snapshot`
// holds the newest snapshot (written to a temp file, fsynced, renamed); after a snapshot the log is
// rewritten without the entries it covers.
//
// Opening: a torn final record (a crash in the middle of an append that was therefore never
// acknowledged) is cut off and reported; any other bad record is DataLoss naming the file and byte
// offset, and the node refuses to start rather than forget acknowledged entries.
//
// Not thread-safe: the Raft driver's thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "raft/raft.h"

namespace adam::raft {

struct ParsedLog {
  PersistentState state;   // snapshot not included (it lives in its own file)
  size_t valid_bytes = 0;  // the prefix that parsed cleanly
  bool torn_tail = false;  // a final partial or corrupt record followed valid_bytes
};

// Parses log file contents. Entries with index <= `snapshot_index` are dropped (the snapshot
// covers them). `name` is used in error messages.
StatusOr<ParsedLog> ParseLog(std::string_view bytes, uint64_t snapshot_index,
                             const std::string& name);
// Parses snapshot file contents.
StatusOr<Snapshot> ParseSnapshot(std::string_view bytes, const std::string& name);
// Encodes one record of each kind (tests, fuzz seeds).
std::string EncodeHardState(const HardState& hs);
std::string EncodeEntry(const Entry& e);
std::string EncodeSnapshot(const Snapshot& s);

class Storage {
 public:
  // Opens or creates `dir`. `torn_tail_bytes` (optional) receives how many bytes of a torn final
  // record were cut off. With a `cluster_id`, `dir` holds it in a file `cluster-id`: a folder
  // written for another id is refused (FAILED_PRECONDITION naming both), one without is claimed.
  static StatusOr<std::unique_ptr<Storage>> Open(const std::string& dir,
                                                 size_t* torn_tail_bytes = nullptr,
                                                 const std::string& cluster_id = "");
  ~Storage();

  // What is on disk: the state to construct a Node from.
  const PersistentState& state() const { return state_; }
  // Persists a Ready's snapshot, entries and hard state; fdatasync before returning.
  Status Persist(const Ready& ready);
  // Saves a snapshot taken by Node::Compact and drops the entries it covers from the log.
  Status SaveSnapshot(const Snapshot& snapshot);
  // Bytes in the log file (tests, metrics).
  uint64_t log_bytes() const { return log_bytes_; }

 private:
  Storage() = default;
  Status RewriteLog();
  Status WriteSnapshotFile(const Snapshot& snapshot);

  std::string dir_;
  int fd_ = -1;
  uint64_t log_bytes_ = 0;
  PersistentState state_;
};

}  // namespace adam::raft
