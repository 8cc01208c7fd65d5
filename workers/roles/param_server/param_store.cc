// ParamStore: per-shard single-writer worker threads fed by lock-free queues.
#include "param_server/param_store.h"

#include <dnnl.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/mpsc.h"
#include "core/mutex.h"
#include "core/thread_name.h"
#include "topology/topology.h"

namespace adam::ps {
namespace {

constexpr int64_t kBlockFloats =
    8192;  // 32 KiB: a block stays in L1/L2 while every update streams by

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

// Versions for AVX-512, AVX2 and baseline x86-64, picked at load time by an ifunc resolver. Not
// under sanitizers: the resolver runs before their runtime is initialised.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__) || defined(ADAM_NO_TARGET_CLONES)
#define ADAM_VECTOR_CLONES
#else
#define ADAM_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

ADAM_VECTOR_CLONES
void AddInto(float* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// dst[i] += a[i] + b[i] + c[i] + d[i]: four updates for one load and store of dst.
ADAM_VECTOR_CLONES
static void AddInto4(float* __restrict dst, const float* __restrict a, const float* __restrict b,
                     const float* __restrict c, const float* __restrict d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += (a[i] + b[i]) + (c[i] + d[i]);
}

ADAM_VECTOR_CLONES
static void AddInto2(float* __restrict dst, const float* __restrict a, const float* __restrict b,
                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += a[i] + b[i];
}

ADAM_VECTOR_CLONES
static void Axpy(float alpha, const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void ApplyDense(float* values, int64_t shard_offset, int64_t shard_count, const DenseArgs& d) {
  const update::DenseLayer& L = *d.layer;
  const int64_t lo = shard_offset, hi = shard_offset + shard_count;
  const int32_t* rows_end = d.rows + d.num_rows;
  auto column = [&](int64_t r) {  // index of row r in d.rows
    const int32_t* it = std::lower_bound(d.rows, rows_end, int32_t(r));
    ADAM_CHECK(it != rows_end && *it == r);
    return int64_t(it - d.rows);
  };
  const int64_t wlo = std::max(lo, L.weights), whi = std::min(hi, L.weights + L.units * L.in);
  if (wlo < whi) {
    const int64_t r_first = (wlo - L.weights) / L.in, r_last = (whi - 1 - L.weights) / L.in;
    const int64_t j_first = column(r_first);
    ADAM_CHECK(j_first + (r_last - r_first) < d.num_rows &&
               d.rows[j_first + (r_last - r_first)] ==
                   r_last);   // rows of one shard are consecutive
    int64_t full_begin = -1;  // first row of the current run of whole rows
    auto flush_full = [&](int64_t end_row) {
      if (full_begin < 0) return;
      const int64_t m = end_row - full_begin;
      // W[full_begin..end_row) += E[:, cols]^T x A, row-major, accumulating (beta 1).
      dnnl_sgemm('T', 'N', m, L.in, d.images, 1.f, d.e + j_first + (full_begin - r_first),
                 d.num_rows, d.a, L.in, 1.f, values + (L.weights + full_begin * L.in - lo), L.in);
      full_begin = -1;
    };
    for (int64_t r = r_first; r <= r_last; ++r) {
      const int64_t row = L.weights + r * L.in;
      const int64_t c0 = std::max(wlo, row) - row, c1 = std::min(whi, row + L.in) - row;
      if (c0 == 0 && c1 == L.in) {
        if (full_begin < 0) full_begin = r;
        continue;
      }
      flush_full(r);
      const int64_t j = j_first + (r - r_first);
      for (int k = 0; k < d.images; ++k)
        Axpy(d.e[int64_t{k} * d.num_rows + j], d.a + int64_t{k} * L.in + c0,
             values + (row + c0 - lo), c1 - c0);
    }
    flush_full(r_last + 1);
  }
  const int64_t blo = std::max(lo, L.bias), bhi = std::min(hi, L.bias + L.units);
  for (int64_t i = blo; i < bhi; ++i) {
    const int64_t j = column(i - L.bias);
    float sum = 0.f;
    for (int k = 0; k < d.images; ++k) sum += d.e[int64_t{k} * d.num_rows + j];
    values[i - lo] += sum;
  }
}

struct ParamStore::ShardState {
  uint32_t id = 0;
  int64_t offset = 0;
  int64_t count = 0;
  size_t worker = 0;
  std::unique_ptr<float, AlignedFree> values;  // written only by the owning worker
  // Written only by the owning worker (which reads them relaxed); stored with release after the
  // values they describe, loaded with acquire by other threads.
  std::atomic<uint64_t> version{0};
  std::atomic<uint64_t> term{0};
  std::vector<PushMark> marks;  // by trainer index; owned by the worker
  // Worker-local grouping of one drain's Ops.
  Op* head = nullptr;
  Op* tail = nullptr;
};

struct ParamStore::Worker {
  MpscStack<Op> queue;
  // A futex word: bumped after a push (the queue's own release orders the op), waited on with
  // acquire. stop: released by the destructor, acquired by the worker before it returns.
  std::atomic<uint32_t> wake{0};
  std::atomic<bool> stop{false};
  std::vector<uint32_t> slots;  // shards owned
  std::thread thread;
};

ParamStore::ParamStore(const shard::ShardMap& map, int server, const float* initial,
                       StoreOptions options) {
  for (const auto& s : map.shards()) {
    if (s.server != server) continue;
    auto st = std::make_unique<ShardState>();
    st->id = s.id;
    st->offset = s.offset;
    st->count = s.count;
    slot_of_.emplace(s.id, uint32_t(shards_.size()));
    shards_.push_back(std::move(st));
    total_floats_ += s.count;
  }
  std::optional<topology::Topology> topo;
  if (options.bind || options.threads <= 0) {
    auto t = topology::Topology::Discover();
    if (t.ok()) topo = std::move(*t);
  }
  int threads = options.threads > 0 ? options.threads : (topo ? int(topo->cores().size()) : 1);
  threads = std::max(1, std::min<int>(threads, std::max<size_t>(1, shards_.size())));
  std::vector<topology::Placement> places;
  if (options.bind && topo) places = topo->PlaceThreads(threads);
  for (int t = 0; t < threads; ++t) workers_.push_back(std::make_unique<Worker>());
  for (size_t i = 0; i < shards_.size(); ++i) {
    shards_[i]->worker = i % size_t(threads);
    workers_[i % size_t(threads)]->slots.push_back(uint32_t(i));
  }
  // Each worker binds itself, then allocates and fills its shards (first touch on its node).
  Mutex mu;
  std::condition_variable cv;
  int ready = 0, bound = 0;
  for (int t = 0; t < threads; ++t) {
    Worker* w = workers_[size_t(t)].get();
    w->thread = std::thread([&, w, t] {
      NameThisThread("apply-" + std::to_string(t));
      bool ok = false;
      if (!places.empty()) ok = topo->BindThisThread(places[size_t(t)]).ok();
      omp_set_num_threads(1);  // oneDNN's sgemm: the parallelism is ours
      for (uint32_t slot : w->slots) {
        ShardState& s = *shards_[slot];
        const size_t bytes = (size_t(s.count) * sizeof(float) + 63) / 64 * 64;
        s.values.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
        ADAM_CHECK(s.values != nullptr);
        std::memcpy(s.values.get(), initial + s.offset, size_t(s.count) * sizeof(float));
      }
      {
        // Notify under the lock: the constructor's cv and mu die as soon as it sees `ready`.
        MutexLock lock(mu);
        ++ready;
        bound += ok;
        cv.notify_all();
      }
      WorkerLoop(w);
    });
  }
  MutexLock lock(mu);
  lock.Await(cv, [&] { return ready == threads; });
  placement_ = std::to_string(threads) + " shard worker" + (threads == 1 ? "" : "s");
  if (!places.empty())
    placement_ += ", " + std::to_string(bound) + " bound to cores (" + topo->Describe() + ")";
}

ParamStore::~ParamStore() {
  for (auto& w : workers_) {
    w->stop.store(true, std::memory_order_release);
    w->wake.fetch_add(1, std::memory_order_release);
    w->wake.notify_one();
  }
  for (auto& w : workers_) w->thread.join();
}

Status ParamStore::CheckRange(uint32_t shard, int64_t offset, int64_t count) const {
  auto it = slot_of_.find(shard);
  if (it == slot_of_.end())
    return Status(StatusCode::kNotFound, "shard " + std::to_string(shard) + " is not held here");
  const int64_t size = shards_[it->second]->count;
  if (offset < 0 || count < 0 || offset > size || count > size - offset)
    return InvalidArgumentError("shard " + std::to_string(shard) + ": floats [" +
                                std::to_string(offset) + ", " + std::to_string(offset + count) +
                                ") are outside the shard's " + std::to_string(size));
  return OkStatus();
}

int64_t ParamStore::ShardSize(uint32_t shard) const {
  auto it = slot_of_.find(shard);
  return it == slot_of_.end() ? -1 : shards_[it->second]->count;
}

int64_t ParamStore::ShardOffset(uint32_t shard) const {
  auto it = slot_of_.find(shard);
  return it == slot_of_.end() ? -1 : shards_[it->second]->offset;
}

std::vector<uint32_t> ParamStore::shard_ids() const {
  std::vector<uint32_t> ids;
  for (const auto& s : shards_) ids.push_back(s->id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

uint64_t ParamStore::Version(uint32_t shard) const {
  auto it = slot_of_.find(shard);
  return it == slot_of_.end() ? 0 : shards_[it->second]->version.load(std::memory_order_acquire);
}

void ParamStore::RestoreVersion(uint32_t shard, uint64_t version) {
  auto it = slot_of_.find(shard);
  if (it != slot_of_.end()) shards_[it->second]->version.store(version, std::memory_order_release);
}

void ParamStore::RaiseEpochs(uint32_t epochs) {
  uint32_t seen = epochs_.load(std::memory_order_relaxed);
  while (seen < epochs && !epochs_.compare_exchange_weak(seen, epochs, std::memory_order_release,
                                                         std::memory_order_relaxed)) {
  }
}

void ParamStore::Submit(Op* ops, size_t n) {
  queued_.fetch_add(int64_t(n), std::memory_order_relaxed);
  // Queue everything first, then wake each worker concerned once.
  uint64_t woken_mask = 0;  // workers beyond 64 are always woken
  std::vector<size_t> to_wake;
  for (size_t i = 0; i < n; ++i) {
    Op& op = ops[i];
    auto it = slot_of_.find(op.shard);
    ADAM_CHECK(it != slot_of_.end());  // callers check first
    op.slot = it->second;
    const size_t w = shards_[op.slot]->worker;
    workers_[w]->queue.Push(&op);
    if (w >= 64 || !(woken_mask & (uint64_t{1} << w))) {
      if (w < 64) woken_mask |= uint64_t{1} << w;
      to_wake.push_back(w);
    }
  }
  for (size_t w : to_wake) {
    workers_[w]->wake.fetch_add(1, std::memory_order_release);
    workers_[w]->wake.notify_one();
  }
}

void ParamStore::Read(const ShardState& s, Op* op) {
  std::memcpy(op->out, s.values.get() + op->offset, size_t(op->count) * sizeof(float));
  if (op->version) *op->version = s.version.load(std::memory_order_relaxed);
  if (op->meta) {
    op->meta->version = s.version.load(std::memory_order_relaxed);
    op->meta->term = s.term.load(std::memory_order_relaxed);
    op->meta->marks = s.marks;
  }
  if (op->done) op->done->Done();
}

// A whole state: conditional when a copy receives it (an older term is stale, an older or equal
// version of the same term is held already).
void ParamStore::Set(ShardState& s, Op* op) {
  SetResult r = SetResult::kApplied;
  if (op->conditional) {
    const uint64_t term = s.term.load(std::memory_order_relaxed);
    const uint64_t version = s.version.load(std::memory_order_relaxed);
    if (op->meta->term < term) {
      r = SetResult::kStale;
    } else if (op->meta->term == term && op->meta->version <= version) {
      r = SetResult::kHeld;
    }
  }
  if (r == SetResult::kApplied) {
    std::memcpy(s.values.get(), op->values, size_t(s.count) * sizeof(float));
    s.version.store(op->meta->version, std::memory_order_release);
    s.term.store(op->meta->term, std::memory_order_release);
    s.marks = op->meta->marks;
  }
  if (op->result) *op->result = r;
  if (op->done) op->done->Done();
}

void ParamStore::WorkerLoop(Worker* w) {
  std::vector<uint32_t> touched;
  std::vector<Op*> run;
  std::vector<const float*> whole;
  for (;;) {
    const uint32_t seen = w->wake.load(std::memory_order_acquire);
    Op* list = w->queue.TakeAll();
    if (list == nullptr) {
      if (w->stop.load(std::memory_order_acquire)) return;
      w->wake.wait(seen, std::memory_order_acquire);
      continue;
    }
    // Group by shard, keeping each shard's order.
    touched.clear();
    while (list != nullptr) {
      Op* op = list;
      list = list->next;
      op->next = nullptr;
      ShardState& s = *shards_[op->slot];
      if (s.head == nullptr) {
        s.head = s.tail = op;
        touched.push_back(op->slot);
      } else {
        s.tail->next = op;
        s.tail = op;
      }
    }
    for (uint32_t slot : touched) {
      ShardState& s = *shards_[slot];
      Op* op = s.head;
      s.head = s.tail = nullptr;
      run.clear();
      int64_t done = 0;
      while (op != nullptr) {
        Op* next = op->next;
        if (op->kind == Op::Kind::kRead) {
          ApplyRun(s, run, whole);
          Read(s, op);
        } else if (op->kind == Op::Kind::kSet) {
          ApplyRun(s, run, whole);
          Set(s, op);
        } else if (op->kind == Op::Kind::kTerm) {
          ApplyRun(s, run, whole);
          if (*op->version > s.term.load(std::memory_order_relaxed))
            s.term.store(*op->version, std::memory_order_release);
          if (op->done) op->done->Done();
        } else {
          run.push_back(op);
        }
        ++done;
        op = next;
      }
      ApplyRun(s, run, whole);
      queued_.fetch_sub(done, std::memory_order_relaxed);
    }
  }
}

bool ParamStore::DropResent(ShardState& s, std::vector<Op*>& run) {
  std::vector<Op*> dropped;
  size_t kept = 0;
  for (Op* op : run) {
    if (op->kind == Op::Kind::kAdd && op->session != 0) {
      if (s.marks.size() <= op->trainer) s.marks.resize(size_t(op->trainer) + 1);
      PushMark& m = s.marks[op->trainer];
      if (m.session == op->session &&
          (op->seq < m.seq || (op->seq == m.seq && op->part < m.parts))) {
        dropped.push_back(op);
        continue;
      }
      if (m.session != op->session || m.seq != op->seq) m = PushMark{op->session, op->seq, 0};
      m.parts = op->part + 1;
    }
    run[kept++] = op;
  }
  run.resize(kept);
  if (!dropped.empty()) {
    const uint64_t now = s.version.load(std::memory_order_relaxed);
    for (Op* op : dropped) {
      if (op->applied_version) *op->applied_version = now;
      if (op->done) op->done->Done();
    }
  }
  return !run.empty();
}

// `whole` holds the updates covering a whole block.
void ParamStore::AddBlocks(ShardState& s, const std::vector<Op*>& run,
                           std::vector<const float*>& whole) {
  float* v = s.values.get();
  for (int64_t b = 0; b < s.count; b += kBlockFloats) {
    const int64_t b_end = std::min(s.count, b + kBlockFloats), n = b_end - b;
    whole.clear();
    for (const Op* op : run) {
      if (op->kind != Op::Kind::kAdd || op->indices != nullptr) continue;
      const int64_t lo = std::max(b, op->offset), hi = std::min(b_end, op->offset + op->count);
      if (lo == b && hi == b_end) {
        whole.push_back(op->values + (b - op->offset));
      } else if (lo < hi) {
        AddInto(v + lo, op->values + (lo - op->offset), hi - lo);
      }
    }
    size_t k = 0;
    for (; k + 4 <= whole.size(); k += 4)
      AddInto4(v + b, whole[k], whole[k + 1], whole[k + 2], whole[k + 3], n);
    if (k + 2 <= whole.size()) {
      AddInto2(v + b, whole[k], whole[k + 1], n);
      k += 2;
    }
    if (k < whole.size()) AddInto(v + b, whole[k], n);
  }
}

void ParamStore::ApplyRun(ShardState& s, std::vector<Op*>& run, std::vector<const float*>& whole) {
  // A re-sent push this state already has is dropped (answered, not applied).
  if (run.empty() || !DropResent(s, run)) return;
  float* v = s.values.get();
  uint64_t bytes = 0;
  bool any_add = false;
  for (const Op* op : run) any_add |= op->kind == Op::Kind::kAdd;
  if (any_add) AddBlocks(s, run, whole);
  for (const Op* op : run) {
    if (op->kind == Op::Kind::kAdd) {
      if (op->indices != nullptr) {  // a filtered push: its entries one by one
        float* at = v + op->offset;
        for (int64_t i = 0; i < op->count; ++i) at[op->indices[i]] += op->values[i];
      }
      bytes += uint64_t(op->count) * sizeof(float);
    } else {
      ApplyDense(v, s.offset, s.count, op->dense);
      bytes += uint64_t(op->dense.images) * uint64_t(op->dense.layer->in + op->dense.num_rows) *
               sizeof(float);
    }
  }
  const uint64_t now = s.version.fetch_add(run.size(), std::memory_order_release) + run.size();
  applied_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  for (Op* op : run) {
    if (op->applied_version) *op->applied_version = now;
    if (op->done) op->done->Done();
  }
  run.clear();
}

Status ParamStore::RunOne(Op* op, const char* what) {
  ADAM_RETURN_IF_ERROR(CheckRange(op->shard, 0, op->count));
  if (op->count != ShardSize(op->shard))
    return InvalidArgumentError("shard " + std::to_string(op->shard) + ": " + what + " has " +
                                std::to_string(op->count) + " floats, shard has " +
                                std::to_string(ShardSize(op->shard)));
  Mutex mu;
  std::condition_variable cv;
  bool finished = false;
  Completion done(1, [&] {
    MutexLock lock(mu);  // notify under the lock: cv dies when we return
    finished = true;
    cv.notify_one();
  });
  op->done = &done;
  Submit(op, 1);
  MutexLock lock(mu);
  lock.Await(cv, [&] { return finished; });
  return OkStatus();
}

Status ParamStore::Add(uint32_t shard, const float* delta, int64_t count) {
  Op op;
  op.kind = Op::Kind::kAdd;
  op.shard = shard;
  op.count = count;
  op.values = delta;
  return RunOne(&op, "delta");
}

Status ParamStore::RunRead(uint32_t shard, float* out, int64_t count, uint64_t* version,
                           ShardMeta* meta) {
  Op op;
  op.kind = Op::Kind::kRead;
  op.shard = shard;
  op.count = count;
  op.out = out;
  op.version = version;
  op.meta = meta;
  return RunOne(&op, "read");
}

StatusOr<uint64_t> ParamStore::Read(uint32_t shard, float* out, int64_t count) {
  uint64_t version = 0;
  ADAM_RETURN_IF_ERROR(RunRead(shard, out, count, &version, nullptr));
  return version;
}

StatusOr<ShardMeta> ParamStore::ReadState(uint32_t shard, float* out, int64_t count) {
  ShardMeta meta;
  ADAM_RETURN_IF_ERROR(RunRead(shard, out, count, nullptr, &meta));
  return meta;
}

StatusOr<SetResult> ParamStore::SetState(uint32_t shard, const float* values, int64_t count,
                                         const ShardMeta& meta) {
  ShardMeta copy = meta;
  SetResult result = SetResult::kApplied;
  Op op;
  op.kind = Op::Kind::kSet;
  op.shard = shard;
  op.count = count;
  op.values = values;
  op.meta = &copy;
  op.conditional = true;
  op.result = &result;
  ADAM_RETURN_IF_ERROR(RunOne(&op, "copy"));
  return result;
}

Status ParamStore::RaiseTerm(uint32_t shard, uint64_t term) {
  Op op;
  op.kind = Op::Kind::kTerm;
  op.shard = shard;
  op.count = ShardSize(shard);
  op.version = &term;
  return RunOne(&op, "term");
}

uint64_t ParamStore::Term(uint32_t shard) const {
  auto it = slot_of_.find(shard);
  return it == slot_of_.end() ? 0 : shards_[it->second]->term.load(std::memory_order_acquire);
}

}  // namespace adam::ps
