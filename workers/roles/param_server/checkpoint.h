// Checkpoints: the parameter server's delayed persistence (a write-back cache of its shards).
//
// Every `interval` the Checkpointer takes the shards whose version moved since the last flush
// (reads through the shard workers, so each copy is consistent and includes every update
// acknowledged before it), compresses them (byte-plane shuffle + zstd) and writes one file,
// generation G, that also names for every clean shard the older generation holding its latest
// copy. The file is written to `ckpt-G.adam.tmp`, fsynced, renamed to `ckpt-G.adam` and the
// directory fsynced: a crash leaves either the whole new checkpoint or none of it. Files no
// longer needed by the newest two checkpoints are deleted.
//
// File layout (little-endian):
//   "ADAMCKP1" | u32 format (2) | u32 server | u64 generation | u64 model parameters |
//   u32 epochs (the job's epochs finished, ParamStore::epochs(); not in format 1) | u32 entries
//   entries x { u32 shard | u64 floats | u64 version | u64 source generation
//               [source == generation: u64 compressed bytes | zstd frame] }
//   u32 CRC-32 (zlib) of every byte before it | "ADAMEND1"
//
// Restore picks the newest checkpoint whose file and every file it refers to verify (magic,
// sizes, CRC, zstd frames) and match this server's shards; a bad one is named in the log and the
// previous one is tried. Thread-safe: one Checkpointer per server; its methods may be called from
// any thread.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/mutex.h"
#include "core/status.h"
#include "param_server/buffer_pool.h"
#include "param_server/param_store.h"

namespace adam::ps {

struct CheckpointEntry {
  uint32_t shard = 0;
  int64_t count = 0;
  uint64_t version = 0;
  uint64_t source = 0;        // generation whose file holds the values
  std::vector<float> values;  // when source is this file's generation
};

struct CheckpointFile {
  uint32_t server = 0;
  uint64_t generation = 0;
  int64_t num_params = 0;
  uint32_t epochs = 0;  // format 1: 0
  std::vector<CheckpointEntry> entries;
};

// "ckpt-<generation as 16 hex digits>.adam", and back: the generation of such a name, or 0 for
// any other name (paths included).
std::string CheckpointFileName(uint64_t generation);
uint64_t CheckpointGeneration(const std::string& name);

// Parses and verifies one checkpoint file's bytes. Entries may hold at most `max_floats` floats
// each. Errors name the byte offset and what is wrong.
StatusOr<CheckpointFile> ParseCheckpoint(std::string_view bytes, int64_t max_floats);

// The shards restored from the newest usable checkpoint.
struct Restored {
  uint64_t generation = 0;  // 0: nothing restored
  std::string file;
  uint32_t epochs = 0;  // the job's epochs finished when it was written
  struct Shard {
    uint64_t version = 0;
    uint64_t source = 0;
    std::vector<float> values;
  };
  std::map<uint32_t, Shard> shards;
};

struct CheckpointOptions {
  std::string dir;
  uint32_t server = 0;
  int64_t num_params = 0;
  std::chrono::milliseconds interval{30000};
  int zstd_level = 1;
  // Tests: sleep this long after writing half of a checkpoint (to kill a server mid-flush).
  std::chrono::milliseconds debug_pause_mid_flush{0};
  // Runs on the background thread after each flush that wrote a checkpoint (e.g. to send it to a
  // peer); may be empty.
  std::function<void()> after_flush;
  // Times the interval, the pause above and each flush (not owned).
  Clock* clock = Clock::Real();
};

// Reads `options.dir` for the server's newest usable checkpoint covering exactly `shards` (id ->
// floats). No checkpoint files: an empty Restored. Files but none usable: an error naming each.
// Leftover *.tmp files of an interrupted flush are removed.
StatusOr<Restored> RestoreCheckpoint(const CheckpointOptions& options,
                                     const std::map<uint32_t, int64_t>& shards);

struct CheckpointMetrics {
  prometheus::Counter* flushes = nullptr;     // adam_ps_checkpoint_flushes_total
  prometheus::Counter* bytes = nullptr;       // adam_ps_checkpoint_bytes_total (on disk)
  prometheus::Histogram* duration = nullptr;  // adam_ps_checkpoint_flush_seconds
  prometheus::Gauge* last_success = nullptr;  // adam_ps_checkpoint_last_success_timestamp_seconds
  prometheus::Gauge* generation = nullptr;    // adam_ps_checkpoint_generation
};

class Checkpointer {
 public:
  // `store` and `pool` must outlive it. `restored` (may be empty) says which generation holds
  // each shard's restored copy, so a clean restored shard is not written again.
  Checkpointer(ParamStore* store, BufferPool* pool, CheckpointOptions options,
               const Restored& restored, CheckpointMetrics metrics);
  ~Checkpointer();  // stops the background thread (without a last flush; call Flush first)

  // Starts flushing every interval on a background thread; Stop ends it (also on destruction).
  void Start();
  void Stop();
  // Flushes the dirty shards now; returns the generation written (0 when no shard was dirty and
  // the epochs finished had not moved).
  StatusOr<uint64_t> Flush();
  uint64_t generation() const;
  // The files of the newest complete checkpoint (the newest generation and those it refers to),
  // oldest first, opened: a prune that deletes one later cannot cut a reader short. Empty when no
  // checkpoint has been written or restored yet.
  struct OpenFile {
    std::string name;
    int fd = -1;  // owned by the caller: close it
  };
  std::vector<OpenFile> OpenNewest() const;
  const std::string& dir() const { return opt_.dir; }

 private:
  // A dirty shard's consistent copy, taken through the shard workers.
  struct ShardCopy {
    uint64_t version = 0;
    BufferPool::Buffer values;
  };
  StatusOr<uint64_t> FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes checkpoint `generation` of `ids` (`copies` in it, the others referring to the files
  // they are in) to its file, durably: a temporary file fsynced, renamed, the directory fsynced.
  // `*bytes`: the file's size.
  Status WriteGeneration(uint64_t generation, uint32_t epochs, const std::vector<uint32_t>& ids,
                         const std::map<uint32_t, ShardCopy>& copies, uint64_t* bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop();
  void Prune(uint64_t newest) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The shards among `ids` changed since the newest checkpoint.
  std::vector<uint32_t> Dirty(const std::vector<uint32_t>& ids) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checkpoint `generation`, durable, becomes the newest: `written` (shard -> version) are in its
  // file, the other shards of `ids` in the files they were in.
  void Commit(uint64_t generation, uint32_t epochs, const std::vector<uint32_t>& ids,
              const std::map<uint32_t, uint64_t>& written) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts a written checkpoint in the metrics and reports it as an event.
  void Record(uint64_t generation, size_t shards, uint32_t epochs, uint64_t bytes, double seconds);

  ParamStore* store_;
  BufferPool* pool_;
  CheckpointOptions opt_;
  CheckpointMetrics m_;
  mutable Mutex mu_;  // one flush at a time
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t last_generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t flushed_epochs_ ABSL_GUARDED_BY(mu_) = 0;  // the epochs in the newest checkpoint
  // Shard -> version in the newest checkpoint; shard -> the generation holding that copy.
  std::map<uint32_t, uint64_t> flushed_version_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, uint64_t> source_ ABSL_GUARDED_BY(mu_);
  // Generation -> the generations it refers to.
  std::map<uint64_t, std::vector<uint64_t>> refs_ ABSL_GUARDED_BY(mu_);
  Mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread thread_;
};

}  // namespace adam::ps
