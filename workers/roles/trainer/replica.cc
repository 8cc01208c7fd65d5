// Replica: bound worker threads, per-thread oneDNN contexts, Hogwild training, evaluation.
#include "trainer/replica.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/hogwild.h"
#include "core/mutex.h"
#include "core/thread_name.h"
#include "model/network.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "topology/topology.h"

namespace adam::trainer {

struct Replica::Impl {
  // Private weights: a worker's published steps, in slots of `rows` (the batch) rows per dense
  // layer, of which a step uses `used` (fewer for a remainder).
  struct Ring {
    int64_t capacity = 0, rows = 0;
    std::vector<int64_t> used;             // capacity: rows of each slot's step
    std::vector<float> steps;              // capacity x looped floats: -lr * gradient
    std::vector<std::vector<float>> a, e;  // per dense layer: capacity*rows x in, x units
    // Steps published: stored with release after the step's slot is written, loaded with acquire
    // by readers before they read it.
    alignas(64) std::atomic<int64_t> head{0};
  };
  struct alignas(64) Cursor {
    // Steps of one producer that one reader has applied: released by the reader, acquired by the
    // producer before it reuses their slots.
    std::atomic<int64_t> done{0};
  };
  struct Private {
    std::vector<float> w;  // this worker's copy of the weights
    Ring ring;
    Mutex add_mu;
    std::vector<float> add ABSL_GUARDED_BY(add_mu);  // AddToWeights not yet in w
    // A hint that `add` holds something: set with release after writing it under add_mu; the
    // worker's acquire load only decides whether to take add_mu, which orders the data.
    std::atomic<bool> has_add{false};
    std::atomic<int64_t> waits{0};  // steps published only after waiting for room; a counter
    // Drain's scratch: each producer's head, and the rows gathered for one sgemm per layer.
    std::vector<int64_t> drain_to;
    std::vector<std::vector<float>> gather_a, gather_e;  // per dense layer
    int64_t gather_rows = 0;
  };
  struct DenseLayer {
    int layer;
    int64_t in, units;
    int64_t weights, bias;  // offsets in the parameters
  };
  struct Worker {
    std::unique_ptr<model::Network> net;      // `batch` images
    std::unique_ptr<model::Network> net_one;  // remainders
    std::unique_ptr<model::Network> eval;     // `eval_batch` images, reads eval_params
    std::unique_ptr<model::Network> eval_one;
    std::unique_ptr<Mutex> log_mu = std::make_unique<Mutex>();
    DenseLog log ABSL_GUARDED_BY(*log_mu);
    std::unique_ptr<Private> own;  // private weights only
    std::vector<float> velocity;   // momentum or weight decay: net's and net_one's step state
  };
  model::ModelLayout layout;
  ReplicaOptions options;
  std::optional<topology::Topology> topo;
  std::vector<topology::Placement> places;
  int bound = 0;
  std::vector<float> w;            // the Hogwild weights
  std::vector<float> eval_params;  // what Evaluate measures
  std::vector<Worker> workers;
  // Private weights.
  std::vector<DenseLayer> dense;          // every dense and softmax layer
  std::vector<model::ParamRange> looped;  // the rest (conv weights, conv biases)
  int64_t looped_count = 0;
  std::unique_ptr<Cursor[]> cursors;  // [reader * threads + producer]
  bool exchanging = false;            // rings built (set once after Create's workers)
  // Workers whose RunWorkers call has returned: acq_rel increments and acquire loads, so a worker
  // that sees them all sees every step they published before.
  std::atomic<int> finished{0};

  explicit Impl(model::ModelLayout l) : layout(std::move(l)) {}
  void ApplyHeld(Worker& wk, model::Network* net);
  Cursor& cursor(int reader, int producer) {
    return cursors[size_t(reader) * size_t(options.threads) + size_t(producer)];
  }
  void Publish(int t, const model::Network& net);
  void Drain(int t, model::Network* own);
  // Drain's parts: the looped (convolution) steps, `own`'s held ones and the peers' up to
  // pv.drain_to; and dense layer k's rows, gathered and applied in sgemms (logged into `log` if
  // not null).
  void DrainLooped(int t, model::Network* own, Private& pv);
  void DrainDense(int t, model::Network* own, Private& pv, size_t k, DenseLog* log);
  void ApplyAdds(Private& p);
  void MergeCopies();
  // Private weights: which layers' steps travel as rows (dense) and which as looped ranges.
  void SplitLayers();
  // Private weights: worker `wk`'s own copy of `initial`, its ring and its gather buffers.
  void AllocatePrivate(Worker& wk, const float* initial);
  // Worker `wk`'s Networks over `params` (training) and eval_params (evaluation).
  Status MakeNetworks(Worker& wk, float* params);
};

namespace {

Status CheckReplicaOptions(const ReplicaOptions& options) {
  if (options.threads < 1) return InvalidArgumentError("replica: threads must be >= 1");
  if (options.private_weights && options.apply_every > 1)
    return InvalidArgumentError("replica: private weights apply every step (apply_every 1)");
  if (options.ring_steps < 1) return InvalidArgumentError("replica: ring_steps must be >= 1");
  if ((options.momentum != 0 || options.weight_decay != 0) &&
      (options.private_weights || options.apply_every > 1))
    return InvalidArgumentError(
        "replica: momentum and weight decay need shared weights and every step applied at once");
  return OkStatus();
}

}  // namespace

void Replica::Impl::SplitLayers() {
  for (size_t i = 0; i < layout.shapes().size(); ++i) {
    const auto& l = layout.spec().layers[i];
    const auto& p = layout.params()[i];
    if (l.type == spec::LayerType::kConv) {
      looped.insert(looped.end(), {p.weights, p.bias});
      looped_count += p.weights.count + p.bias.count;
    } else if (l.type == spec::LayerType::kDense || l.type == spec::LayerType::kSoftmax) {
      dense.push_back(
          {int(i), layout.shapes()[i].in.size(), p.bias.count, p.weights.offset, p.bias.offset});
    }
  }
  const auto threads = size_t(options.threads);
  cursors = std::make_unique<Cursor[]>(threads * threads);
}

void Replica::Impl::AllocatePrivate(Worker& wk, const float* initial) {
  wk.own = std::make_unique<Private>();
  Private& pv = *wk.own;
  pv.w.assign(initial, initial + layout.num_params());
  {
    MutexLock lock(pv.add_mu);
    pv.add.assign(pv.w.size(), 0.f);
  }
  Ring& ring = pv.ring;
  ring.capacity = options.ring_steps;
  ring.rows = options.batch;
  ring.used.assign(size_t(ring.capacity), 0);
  ring.steps.resize(size_t(ring.capacity * looped_count));
  for (const auto& d : dense) {
    ring.a.emplace_back(size_t(ring.capacity * ring.rows * d.in));
    ring.e.emplace_back(size_t(ring.capacity * ring.rows * d.units));
  }
  pv.drain_to.assign(size_t(options.threads), 0);
  pv.gather_rows = std::max<int64_t>(64, options.batch);
  for (const auto& d : dense) {
    pv.gather_a.emplace_back(size_t(pv.gather_rows * d.in));
    pv.gather_e.emplace_back(size_t(pv.gather_rows * d.units));
  }
}

Status Replica::Impl::MakeNetworks(Worker& wk, float* params) {
  model::StepRule rule{.momentum = options.momentum,
                       .weight_decay = options.weight_decay,
                       .label_smoothing = options.label_smoothing};
  if (!rule.plain()) {  // the worker's batch and remainder Networks share one velocity
    wk.velocity.assign(size_t(layout.num_params()), 0.f);
    rule.velocity = wk.velocity.data();
  }
  Status error;
  auto make = [&](std::unique_ptr<model::Network>* out, int batch, float* weights,
                  model::NetworkMode mode, int apply_every = 1) {
    if (!error.ok()) return;
    // Private weights: the Network holds each step for Drain to apply with the peers'.
    auto net = model::Network::Create(layout, batch, weights, nullptr, mode, apply_every,
                                      options.private_weights,
                                      mode == model::NetworkMode::kSgd ? rule : model::StepRule{});
    if (net.ok())
      *out = std::move(*net);
    else
      error = net.status();
  };
  make(&wk.net, options.batch, params, model::NetworkMode::kSgd, options.apply_every);
  make(&wk.net_one, 1, params, model::NetworkMode::kSgd, options.apply_every);
  if (options.evaluate) {
    make(&wk.eval, options.eval_batch, eval_params.data(), model::NetworkMode::kInference);
    make(&wk.eval_one, 1, eval_params.data(), model::NetworkMode::kInference);
  }
  return error;
}

Replica::Replica(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Replica::~Replica() = default;

StatusOr<std::unique_ptr<Replica>> Replica::Create(const model::ModelLayout& layout,
                                                   const ReplicaOptions& options,
                                                   const float* initial) {
  ADAM_RETURN_IF_ERROR(CheckReplicaOptions(options));
  auto impl = std::make_unique<Impl>(layout);
  Impl& m = *impl;
  m.options = options;
  const auto n = size_t(layout.num_params());
  if (!options.private_weights) m.w.assign(initial, initial + n);
  m.eval_params.assign(initial, initial + n);
  m.workers.resize(size_t(options.threads));
  if (options.private_weights) m.SplitLayers();
  for (auto& wk : m.workers) {
    MutexLock lock(*wk.log_mu);
    wk.log.activations.resize(options.record_layers.size());
    wk.log.errors.resize(options.record_layers.size());
  }
  if (options.bind) {
    auto topo = topology::Topology::Discover();
    if (topo.ok()) {
      m.topo = std::move(*topo);
      m.places = m.topo->PlaceThreads(options.threads);
    }
  }
  std::unique_ptr<Replica> r(new Replica(std::move(impl)));
  std::vector<Status> errors(static_cast<size_t>(options.threads));
  r->RunWorkers([&](int t) {
    Impl& s = *r->impl_;
    auto& wk = s.workers[size_t(t)];
    float* params = s.w.data();
    if (s.options.private_weights) {  // allocated here: first touched on the worker's node
      s.AllocatePrivate(wk, initial);
      params = wk.own->w.data();
    }
    errors[size_t(t)] = s.MakeNetworks(wk, params);
  });
  for (const auto& e : errors) ADAM_RETURN_IF_ERROR(e);
  for (int l : options.record_layers)
    if (r->impl_->workers[0].net->dense_io(l).src == nullptr)
      return InvalidArgumentError("layer " + std::to_string(l) + " is not a dense layer to record");
  if (options.private_weights) {
    // The ring carries exactly what Backward updates: its looped ranges, then the dense layers.
    const auto& ranges = r->impl_->workers[0].net->looped_ranges();
    ADAM_CHECK(ranges.size() == r->impl_->looped.size());
    for (size_t i = 0; i < ranges.size(); ++i)
      ADAM_CHECK(ranges[i].offset == r->impl_->looped[i].offset &&
                 ranges[i].count == r->impl_->looped[i].count);
    r->impl_->exchanging = true;
  }
  return r;
}

int Replica::threads() const { return impl_->options.threads; }
int64_t Replica::num_params() const { return impl_->layout.num_params(); }
void Replica::ReadWeights(float* out) {
  Impl& m = *impl_;
  const size_t n = size_t(m.layout.num_params());
  if (!m.options.private_weights) {
    HogwildScope hogwild;  // workers keep writing w meanwhile
    std::memcpy(out, m.w.data(), n * sizeof(float));
    return;
  }
  Impl::Private& p = *m.workers[0].own;
  MutexLock lock(p.add_mu);
  {
    HogwildScope hogwild;  // worker 0 keeps writing its copy meanwhile
    std::memcpy(out, p.w.data(), n * sizeof(float));
  }
  if (p.has_add.load(std::memory_order_relaxed))
    for (size_t i = 0; i < n; ++i) out[i] += p.add[i];
}

int64_t Replica::ring_waits() const {
  int64_t n = 0;
  for (const auto& wk : impl_->workers)
    if (wk.own) n += wk.own->waits.load(std::memory_order_relaxed);
  return n;
}

void Replica::AddToWeights(const float* delta) {
  Impl& m = *impl_;
  const size_t n = size_t(m.layout.num_params());
  if (!m.options.private_weights) {
    HogwildScope hogwild;
    for (size_t i = 0; i < n; ++i) m.w[i] += delta[i];
    return;
  }
  for (auto& wk : m.workers) {
    Impl::Private& p = *wk.own;
    MutexLock lock(p.add_mu);
    for (size_t i = 0; i < n; ++i) p.add[i] += delta[i];
    p.has_add.store(true, std::memory_order_release);
  }
}

// A worker's copy takes what AddToWeights queued for it.
void Replica::Impl::ApplyAdds(Private& p) {
  if (!p.has_add.load(std::memory_order_acquire)) return;
  MutexLock lock(p.add_mu);  // ReadWeights copies worker 0's under it too
  for (size_t i = 0; i < p.w.size(); ++i) {
    p.w[i] += p.add[i];
    p.add[i] = 0.f;
  }
  p.has_add.store(false, std::memory_order_relaxed);
}

// Worker t publishes the step `net` holds. It waits while its ring is full, applying its peers'
// steps meanwhile (so two full rings cannot wait on each other).
void Replica::Impl::Publish(int t, const model::Network& net) {
  Ring& ring = workers[size_t(t)].own->ring;
  const int64_t h = ring.head.load(std::memory_order_relaxed);
  for (bool waited = false;; waited = true) {
    int64_t slowest = h;
    for (int c = 0; c < options.threads; ++c)
      if (c != t) slowest = std::min(slowest, cursor(c, t).done.load(std::memory_order_acquire));
    if (h - slowest < ring.capacity) {
      if (waited) workers[size_t(t)].own->waits.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    Drain(t, nullptr);
    std::this_thread::yield();
  }
  const int64_t slot = h % ring.capacity;
  float* step = ring.steps.data() + slot * looped_count;
  const float* held = net.pending_steps();  // +lr * gradient
  for (int64_t j = 0; j < looped_count; ++j) step[j] = -held[j];
  for (size_t k = 0; k < dense.size(); ++k) {
    const auto rows = net.pending_rows(dense[k].layer);
    std::memcpy(ring.a[k].data() + slot * ring.rows * rows.in, rows.a,
                size_t(rows.rows * rows.in) * sizeof(float));
    std::memcpy(ring.e[k].data() + slot * ring.rows * rows.units, rows.e,
                size_t(rows.rows * rows.units) * sizeof(float));
    ring.used[size_t(slot)] = rows.rows;
  }
  ring.head.store(h + 1, std::memory_order_release);
}

// Worker t applies to its copy the step `own` holds (if any) and every step its peers have
// published since its last drain, in one pass over each dense layer: their rows are gathered
// and applied by one sgemm (more only when they exceed the gather buffers). Then queued adds.
// Worker 0 also logs the record layers' rows of every step it applies, under its log lock, so a
// step is in the dense log only once it is in copy 0, which is what ReadWeights copies.
void Replica::Impl::Drain(int t, model::Network* own) {
  Private& pv = *workers[size_t(t)].own;
  const bool logs = t == 0 && !options.record_layers.empty();
  std::vector<int64_t>& to = pv.drain_to;
  bool any = own != nullptr;
  for (int p = 0; p < options.threads; ++p) {
    to[size_t(p)] = p == t ? 0 : workers[size_t(p)].own->ring.head.load(std::memory_order_acquire);
    any = any || (p != t && to[size_t(p)] != cursor(t, p).done.load(std::memory_order_relaxed));
  }
  if (any) {
    // Held when this worker logs (the analysis cannot follow a conditional lock: `log` below is
    // only written when `logs`).
    std::unique_lock<Mutex> log_lock;
    if (logs) log_lock = std::unique_lock<Mutex>(*workers[0].log_mu);
    DrainLooped(t, own, pv);
    // Worker 0's log, written only when `logs`, under log_lock: a pointer, as the analysis
    // cannot follow that conditional lock.
    DenseLog* log = logs ? &workers[0].log : nullptr;
    for (size_t k = 0; k < dense.size(); ++k) DrainDense(t, own, pv, k, log);
    for (int p = 0; p < options.threads; ++p)
      if (p != t) cursor(t, p).done.store(to[size_t(p)], std::memory_order_release);
  }
  if (own) own->ClearPending();
  ApplyAdds(pv);
}

void Replica::Impl::DrainLooped(int t, model::Network* own, Private& pv) {
  float* w = pv.w.data();
  // The weight writes only are Hogwild: ReadWeights may be copying worker 0's copy meanwhile.
  if (own) {
    HogwildScope hogwild;
    const float* held = own->pending_steps();
    int64_t j = 0;
    for (const auto& r : looped)
      for (int64_t k = r.offset; k < r.offset + r.count; ++k) w[k] -= held[j++];
  }
  for (int p = 0; p < options.threads; ++p) {
    if (p == t) continue;
    const Ring& ring = workers[size_t(p)].own->ring;
    for (int64_t i = cursor(t, p).done.load(std::memory_order_relaxed); i < pv.drain_to[size_t(p)];
         ++i) {
      const float* step = ring.steps.data() + (i % ring.capacity) * looped_count;
      HogwildScope hogwild;
      for (const auto& r : looped)
        for (int64_t k = r.offset; k < r.offset + r.count; ++k) w[k] += *step++;
    }
  }
}

void Replica::Impl::DrainDense(int t, model::Network* own, Private& pv, size_t k, DenseLog* log) {
  float* w = pv.w.data();
  const auto& d = dense[k];
  const auto& record = options.record_layers;
  const auto rec = std::find(record.begin(), record.end(), d.layer);
  const bool log_layer = log != nullptr && rec != record.end();
  const auto li = size_t(rec - record.begin());  // index into the log's layers
  float* ga = pv.gather_a[k].data();
  float* ge = pv.gather_e[k].data();
  int64_t rows = 0;
  // W (units x in) += E^T (units x rows) x A (rows x in); bias += column sums of E.
  auto flush = [&] {
    if (rows == 0) return;
    HogwildScope hogwild;
    dnnl_sgemm('T', 'N', d.units, d.in, rows, 1.f, ge, d.units, ga, d.in, 1.f, w + d.weights, d.in);
    float* bias = w + d.bias;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t u = 0; u < d.units; ++u) bias[u] += ge[r * d.units + u];
    rows = 0;
  };
  auto append = [&](const float* a, const float* e, int64_t n) {
    if (rows + n > pv.gather_rows) flush();
    std::memcpy(ga + rows * d.in, a, size_t(n * d.in) * sizeof(float));
    std::memcpy(ge + rows * d.units, e, size_t(n * d.units) * sizeof(float));
    rows += n;
    if (log_layer) {
      log->activations[li].insert(log->activations[li].end(), a, a + n * d.in);
      log->errors[li].insert(log->errors[li].end(), e, e + n * d.units);
      if (li == 0) log->images += int(n);
    }
  };
  if (own) {
    const auto held = own->pending_rows(d.layer);
    append(held.a, held.e, held.rows);
  }
  for (int p = 0; p < options.threads; ++p) {
    if (p == t) continue;
    const Ring& ring = workers[size_t(p)].own->ring;
    const int64_t from = cursor(t, p).done.load(std::memory_order_relaxed);
    for (int64_t i = from; i < pv.drain_to[size_t(p)]; ++i) {
      const int64_t slot = i % ring.capacity;
      append(ring.a[k].data() + slot * ring.rows * d.in,
             ring.e[k].data() + slot * ring.rows * d.units, ring.used[size_t(slot)]);
    }
  }
  flush();
}

std::string Replica::placement() const {
  const Impl& m = *impl_;
  std::string s = std::to_string(m.options.threads) + " thread(s)";
  if (!m.topo) return s + ", not bound";
  std::string pus;
  for (const auto& p : m.places) {
    if (!pus.empty()) pus += ',';
    pus += std::to_string(p.core.pu);
  }
  return s + " on " + std::to_string(m.topo->num_numa_nodes()) + " NUMA node(s), " +
         (m.bound == m.options.threads ? "bound to PUs " : "binding failed; planned PUs ") + pus;
}

void Replica::RunWorkers(const std::function<void(int)>& fn) {
  Impl& m = *impl_;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(m.options.threads));
  std::vector<int> bound(static_cast<size_t>(m.options.threads), 0);
  for (int t = 0; t < m.options.threads; ++t)
    threads.emplace_back([&, t] {
      NameThisThread("worker-" + std::to_string(t));
      if (m.topo && size_t(t) < m.places.size())
        bound[size_t(t)] = m.topo->BindThisThread(m.places[size_t(t)]).ok();
      // oneDNN's OpenMP runtime: one thread per worker; the parallelism is ours.
      omp_set_num_threads(1);
      fn(t);
      if (m.exchanging) {  // keep applying peers' steps (they may wait for us) until all are done
        m.finished.fetch_add(1, std::memory_order_acq_rel);
        while (m.finished.load(std::memory_order_acquire) < m.options.threads) {
          m.Drain(t, nullptr);
          std::this_thread::sleep_for(std::chrono::microseconds(50));  // leave the core to others
        }
        m.Drain(t, nullptr);
      }
    });
  for (auto& th : threads) th.join();
  if (m.exchanging) {
    // Every copy now holds every step; copy 0 (with its queued adds) replaces the others, so
    // rounding differences from applying steps in different orders do not accumulate. Every
    // lock is held: an AddToWeights meanwhile reaches every copy or none.
    m.finished.store(0, std::memory_order_relaxed);
    m.MergeCopies();
  }
  m.bound = 0;
  for (int b : bound) m.bound += b;
}

// Logs a Network's held-back rows (they are the updates about to reach the shared weights), then
// applies them.
// Every copy's add_mu is held while `add` is read and cleared: a set of locks as long as the
// workers, which the analysis cannot name.
void Replica::Impl::MergeCopies() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  std::vector<std::unique_lock<Mutex>> locks;
  for (auto& wk : workers) locks.emplace_back(wk.own->add_mu);
  Private& first = *workers[0].own;
  for (size_t t = 0; t < workers.size(); ++t) {
    Private& p = *workers[t].own;
    if (t == 0) {
      for (size_t i = 0; i < p.w.size(); ++i) p.w[i] += p.add[i];
    } else {
      std::memcpy(p.w.data(), first.w.data(), p.w.size() * sizeof(float));
    }
    std::fill(p.add.begin(), p.add.end(), 0.f);
    p.has_add.store(false, std::memory_order_relaxed);
  }
}

void Replica::Impl::ApplyHeld(Worker& wk, model::Network* net) {
  if (net->pending() == 0) return;
  if (!options.record_layers.empty()) {
    MutexLock lock(*wk.log_mu);
    for (size_t k = 0; k < options.record_layers.size(); ++k) {
      const auto p = net->pending_rows(options.record_layers[k]);
      wk.log.activations[k].insert(wk.log.activations[k].end(), p.a, p.a + p.rows * p.in);
      wk.log.errors[k].insert(wk.log.errors[k].end(), p.e, p.e + p.rows * p.units);
    }
    wk.log.images += net->pending() * net->batch();
  }
  net->ApplyPending();
}

double Replica::Train(int t, const uint8_t* pixels, const uint8_t* labels, int count, float lr) {
  Impl& m = *impl_;
  auto& wk = m.workers[size_t(t)];
  const int64_t isz = m.layout.input_size();
  double loss = 0;
  if (m.exchanging) m.Drain(t, nullptr);  // what arrived since this worker's last step
  for (int i = 0; i < count;) {
    model::Network* net = count - i >= wk.net->batch() ? wk.net.get() : wk.net_one.get();
    net->SetInputFromBytes(pixels + i * isz);
    loss += net->Forward(labels + i, nullptr);
    net->Backward(lr);
    if (m.exchanging) {  // private weights: the own step is in; publish it, take the peers'
      m.Publish(t, *net);
      m.Drain(t, net);
    }
    if (m.options.apply_every > 1) {
      if (net->pending() == m.options.apply_every) m.ApplyHeld(wk, net);
    } else if (!m.options.record_layers.empty() && !m.exchanging) {  // private: Drain logs
      MutexLock lock(*wk.log_mu);
      for (size_t k = 0; k < m.options.record_layers.size(); ++k) {
        const auto io = net->dense_io(m.options.record_layers[k]);
        auto& a = wk.log.activations[k];
        auto& e = wk.log.errors[k];
        a.insert(a.end(), io.src, io.src + io.in * net->batch());
        const size_t from = e.size();
        e.resize(from + size_t(io.units * net->batch()));
        for (int64_t j = 0; j < io.units * net->batch(); ++j)
          e[from + size_t(j)] = -lr * io.diff_dst[j];
      }
      wk.log.images += net->batch();
    }
    i += net->batch();
  }
  if (m.options.apply_every > 1) {
    m.ApplyHeld(wk, wk.net.get());
    m.ApplyHeld(wk, wk.net_one.get());
  }
  return loss;
}

void Replica::TakeDenseLog(int t, DenseLog* out) {
  auto& wk = impl_->workers[size_t(t)];
  const size_t layers = impl_->options.record_layers.size();
  out->images = 0;
  out->activations.resize(layers);
  out->errors.resize(layers);
  for (size_t k = 0; k < layers; ++k) {
    out->activations[k].clear();
    out->errors[k].clear();
  }
  MutexLock lock(*wk.log_mu);
  std::swap(wk.log, *out);
}

double Replica::Evaluate(const float* params, const uint8_t* pixels, const uint8_t* labels,
                         int count, int* predicted) {
  Impl& m = *impl_;
  ADAM_CHECK(m.options.evaluate);
  std::memcpy(m.eval_params.data(), params, m.eval_params.size() * sizeof(float));
  const int t = m.options.threads, step = m.options.eval_batch;
  const int64_t isz = m.layout.input_size();
  std::vector<int64_t> correct(static_cast<size_t>(t), 0);
  RunWorkers([&](int ti) {
    auto& wk = m.workers[size_t(ti)];
    std::vector<int> pred(static_cast<size_t>(step));
    for (int start = ti * step; start < count; start += t * step) {
      const int end = std::min(count, start + step);
      for (int i = start; i < end;) {
        model::Network* net = end - i >= wk.eval->batch() ? wk.eval.get() : wk.eval_one.get();
        net->SetInputFromBytes(pixels + i * isz);
        net->Forward(nullptr, pred.data());
        for (int k = 0; k < net->batch(); ++k) {
          correct[size_t(ti)] += pred[size_t(k)] == labels[i + k];
          if (predicted != nullptr) predicted[i + k] = pred[size_t(k)];
        }
        i += net->batch();
      }
    }
  });
  int64_t sum = 0;
  for (auto c : correct) sum += c;
  return count > 0 ? double(sum) / count : 0.0;
}

}  // namespace adam::trainer
