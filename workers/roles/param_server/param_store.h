// ParamStore: the shards one parameter server holds, updated by per-shard worker threads.
//
// Every operation on a shard (add an update, apply a dense-layer update, read it) is an Op
// queued to the one worker thread that owns the shard: producers (gRPC handlers, the
// checkpointer) push Ops into the worker's lock-free queue and go on; the worker takes all queued
// Ops at once, groups them by shard and applies each shard's updates block by block (every queued
// update of a 32 KiB block before the next block, four per pass, so the block stays in cache),
// with vectorized loops and oneDNN's sgemm for dense-layer updates. Reads see every update queued
// before them.
// A shard is written only by its worker: no locks, no lost update. Workers are bound to cores
// with hwloc and allocate their shards after binding, so each shard lives on its worker's NUMA
// node. An Op's Completion runs on the worker once the Op is applied.
//
// Thread-safe: Submit and the synchronous helpers may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "shard/shard_map.h"
#include "update/update_plan.h"

namespace adam::ps {

// Runs `fn` once Done has been called `count` times (on the thread of the last Done). `fn` may
// destroy the Completion: it runs from a copy moved off it.
class Completion {
 public:
  Completion(int count, std::function<void()> fn) : pending_(count), fn_(std::move(fn)) {}
  void Done() {
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::function<void()> fn = std::move(fn_);
      fn();
    }
  }

 private:
  std::atomic<int> pending_;  // acq_rel: the last Done sees every other caller's writes
  std::function<void()> fn_;
};

// A dense-layer update for one shard: weights += sum_k e_k a_k^T over the shard's part of
// `layer`, bias += sum_k e_k. `e` holds, per image, the errors of `rows` only (ascending; every
// row of the layer that touches the shard must be there).
struct DenseArgs {
  const update::DenseLayer* layer = nullptr;
  const int32_t* rows = nullptr;
  int num_rows = 0;
  int images = 0;
  const float* a = nullptr;  // images x layer->in
  const float* e = nullptr;  // images x num_rows
};

// Trainer indices a shard's state keeps a PushMark for (the job's trainers are far fewer).
constexpr uint32_t kMaxTrainers = 1 << 16;

// The last push of one trainer applied to a shard's state (PushRequest.session and seq), so a
// push re-sent after its answer was lost is applied once.
struct PushMark {
  uint64_t session = 0;
  uint64_t seq = 0;
  uint32_t parts = 0;  // the push's parts on this shard applied so far
};

// What identifies a shard's state besides its floats: updates applied (`version`), the map
// version its primary was promoted at (`term`; states order by (term, version)), and the last
// push applied per trainer index.
struct ShardMeta {
  uint64_t version = 0;
  uint64_t term = 0;
  std::vector<PushMark> marks;
};

// What a conditional kSet did.
enum class SetResult : uint8_t { kApplied, kHeld, kStale };

struct Op {
  enum class Kind : uint8_t { kAdd, kDense, kRead, kSet, kTerm };
  Kind kind = Kind::kAdd;
  uint32_t shard = 0;
  // kAdd: values[0, count) are added to the shard's floats [offset, offset + count), or, with
  // `indices` (ascending), values[i] to the float at offset + indices[i].
  // kRead: the shard's floats [offset, offset + count) are copied to `out` (RunRead: the whole
  // shard), its version to *version.
  // kSet: the whole shard is replaced by `values` and its version, term and marks by *meta (a
  // copy forwarded by the shard's primary); when `conditional`, only if (meta->term,
  // meta->version) is newer than the shard's: a lower term is kStale, the same term at a version
  // not above the shard's kHeld (*result says which).
  // kTerm: the shard's term becomes at least *version.
  int64_t offset = 0;
  int64_t count = 0;
  const float* values = nullptr;
  const uint32_t* indices = nullptr;  // kAdd only; count of them
  float* out = nullptr;
  uint64_t* version = nullptr;
  ShardMeta* meta = nullptr;    // kRead: filled when set; kSet: the state's identity (required)
  bool conditional = false;     // kSet
  SetResult* result = nullptr;  // kSet, may be null
  // kAdd with session != 0: part `part` of push (session, seq) of trainer `trainer`; skipped if
  // the shard's state already has it. *applied_version (when set) becomes the shard's version
  // once the Op is in it.
  uint32_t trainer = 0;
  uint32_t part = 0;
  uint64_t session = 0;
  uint64_t seq = 0;
  uint64_t* applied_version = nullptr;
  DenseArgs dense;
  Completion* done = nullptr;  // may be null
  // Owned by the store between Submit and completion.
  Op* next = nullptr;
  uint32_t slot = 0;
};

struct StoreOptions {
  int threads = 0;    // worker threads; 0 = one per usable core, at most one per shard
  bool bind = false;  // bind workers to cores and their shards to the cores' NUMA nodes
};

class ParamStore {
 public:
  // Holds the shards that `map` assigns to `server`, initialised from `initial` (the full
  // parameter vector, map.num_params() floats; only read during construction).
  ParamStore(const shard::ShardMap& map, int server, const float* initial,
             StoreOptions options = {});
  ~ParamStore();  // applies every queued Op, then stops the workers
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  // Checks that `shard` is held here and [offset, offset + count) lies inside it.
  Status CheckRange(uint32_t shard, int64_t offset, int64_t count) const;
  // Size in floats of a held shard, or -1; its first float's index in the model.
  int64_t ShardSize(uint32_t shard) const;
  int64_t ShardOffset(uint32_t shard) const;
  std::vector<uint32_t> shard_ids() const;
  int64_t total_floats() const { return total_floats_; }
  int threads() const { return int(workers_.size()); }
  std::string placement() const { return placement_; }

  // Queues `n` checked Ops (see CheckRange). Each must stay valid until its Completion runs.
  void Submit(Op* ops, size_t n);

  // Synchronous helpers (queue, then wait): add a whole-shard delta, read a shard.
  Status Add(uint32_t shard, const float* delta, int64_t count);
  StatusOr<uint64_t> Read(uint32_t shard, float* out, int64_t count);
  // The whole state with its identity; SetState applies it only if newer (see Op::kSet).
  StatusOr<ShardMeta> ReadState(uint32_t shard, float* out, int64_t count);
  StatusOr<SetResult> SetState(uint32_t shard, const float* values, int64_t count,
                               const ShardMeta& meta);
  // Raises the shard's term to at least `term` (a promoted primary's).
  Status RaiseTerm(uint32_t shard, uint64_t term);
  uint64_t Term(uint32_t shard) const;

  // Updates applied to `shard` so far (plus the version it was restored with).
  uint64_t Version(uint32_t shard) const;
  // Before serving: the version a checkpointed shard was restored with.
  void RestoreVersion(uint32_t shard, uint64_t version);
  // The job's progress that travels with the parameters: the most epochs any trainer had
  // finished when it pushed (a clock's high 32 bits), as acknowledged pushes, forwards and the
  // restored checkpoint report it. Only rises. Raise it after the update that carried it is
  // applied, and read it before reading shards: a state read after `epochs()` holds every update
  // acknowledged before that epoch count was raised.
  void RaiseEpochs(uint32_t epochs);
  uint32_t epochs() const { return epochs_.load(std::memory_order_acquire); }
  // Ops queued and not yet applied, and bytes of update payload applied so far.
  int64_t queue_depth() const { return queued_.load(std::memory_order_relaxed); }
  uint64_t applied_bytes() const { return applied_bytes_.load(std::memory_order_relaxed); }

 private:
  struct ShardState;
  struct Worker;
  void WorkerLoop(Worker* w);
  // Checks a whole-shard Op, submits it and waits until it is applied.
  Status RunOne(Op* op, const char* what);
  // A kRead Op: the values, and the version or the whole identity (either may be null).
  Status RunRead(uint32_t shard, float* out, int64_t count, uint64_t* version, ShardMeta* meta);
  // Applies a run of queued updates (adds and dense updates) to their shard, then answers them.
  void ApplyRun(ShardState& s, std::vector<Op*>& run, std::vector<const float*>& whole);
  // Takes out of `run` the re-sent pushes `s` already has, answered as applied; records the rest
  // as their trainers' last pushes. False when nothing is left to apply.
  static bool DropResent(ShardState& s, std::vector<Op*>& run);
  // The whole-vector adds of `run`, block by block (every queued update of one block while it is
  // in cache); `whole` is the caller's scratch.
  static void AddBlocks(ShardState& s, const std::vector<Op*>& run,
                        std::vector<const float*>& whole);
  // A kRead, kSet or kTerm Op on its shard's worker (the adds before it already applied).
  static void Read(const ShardState& s, Op* op);
  static void Set(ShardState& s, Op* op);

  std::vector<std::unique_ptr<ShardState>> shards_;  // immutable after construction
  std::unordered_map<uint32_t, uint32_t> slot_of_;   // shard id -> index in shards_
  std::vector<std::unique_ptr<Worker>> workers_;
  int64_t total_floats_ = 0;
  std::string placement_;
  // Gauges and counters only: relaxed.
  std::atomic<int64_t> queued_{0};
  std::atomic<uint64_t> applied_bytes_{0};
  std::atomic<uint32_t> epochs_{0};  // release on raise, acquire on read (see epochs())
};

// dst[i] += src[i] for i < n, vectorized for the running CPU.
void AddInto(float* dst, const float* src, int64_t n);

// Applies a dense-layer update to one shard whose floats are `values`, starting at model index
// `shard_offset`, `shard_count` long. Exposed for tests.
void ApplyDense(float* values, int64_t shard_offset, int64_t shard_count, const DenseArgs& d);

}  // namespace adam::ps
