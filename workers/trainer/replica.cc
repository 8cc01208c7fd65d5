// Replica: bound worker threads, per-thread oneDNN contexts, Hogwild training, evaluation.
#include "trainer/replica.h"

#include <omp.h>

#include <cstring>
#include <mutex>
#include <thread>

#include "model/network.h"
#include "topology/topology.h"

namespace adam::trainer {

struct Replica::Impl {
  struct Worker {
    std::unique_ptr<model::Network> net;       // `batch` images
    std::unique_ptr<model::Network> net_one;   // remainders
    std::unique_ptr<model::Network> eval;      // `eval_batch` images, reads eval_params
    std::unique_ptr<model::Network> eval_one;
    std::unique_ptr<std::mutex> log_mu = std::make_unique<std::mutex>();  // guards log
    DenseLog log;
  };
  model::ModelLayout layout;
  ReplicaOptions options;
  std::optional<topology::Topology> topo;
  std::vector<topology::Placement> places;
  int bound = 0;
  std::vector<float> w;            // the Hogwild weights
  std::vector<float> eval_params;  // what Evaluate measures
  std::vector<Worker> workers;

  explicit Impl(model::ModelLayout l) : layout(std::move(l)) {}
  void ApplyHeld(Worker& wk, model::Network* net);
};

Replica::Replica(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Replica::~Replica() = default;

StatusOr<std::unique_ptr<Replica>> Replica::Create(const model::ModelLayout& layout,
                                                   const ReplicaOptions& options,
                                                   const float* initial) {
  if (options.threads < 1) return InvalidArgumentError("replica: threads must be >= 1");
  auto impl = std::make_unique<Impl>(layout);
  Impl& m = *impl;
  m.options = options;
  m.w.assign(initial, initial + layout.num_params());
  m.eval_params = m.w;
  m.workers.resize(size_t(options.threads));
  for (auto& wk : m.workers) {
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
    auto make = [&](std::unique_ptr<model::Network>* out, int batch, float* params,
                    model::NetworkMode mode, int apply_every = 1) {
      if (!errors[size_t(t)].ok()) return;
      auto net = model::Network::Create(s.layout, batch, params, nullptr, mode, apply_every);
      if (net.ok()) *out = std::move(*net);
      else errors[size_t(t)] = net.status();
    };
    make(&wk.net, s.options.batch, s.w.data(), model::NetworkMode::kSgd, s.options.apply_every);
    make(&wk.net_one, 1, s.w.data(), model::NetworkMode::kSgd, s.options.apply_every);
    if (s.options.evaluate) {
      make(&wk.eval, s.options.eval_batch, s.eval_params.data(), model::NetworkMode::kInference);
      make(&wk.eval_one, 1, s.eval_params.data(), model::NetworkMode::kInference);
    }
  });
  for (const auto& e : errors) ADAM_RETURN_IF_ERROR(e);
  for (int l : options.record_layers)
    if (r->impl_->workers[0].net->dense_io(l).src == nullptr)
      return InvalidArgumentError("layer " + std::to_string(l) + " is not a dense layer to record");
  return r;
}

int Replica::threads() const { return impl_->options.threads; }
int64_t Replica::num_params() const { return impl_->layout.num_params(); }
float* Replica::weights() { return impl_->w.data(); }

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
  std::vector<int> bound(static_cast<size_t>(m.options.threads), 0);
  for (int t = 0; t < m.options.threads; ++t)
    threads.emplace_back([&, t] {
      if (m.topo && size_t(t) < m.places.size())
        bound[size_t(t)] = m.topo->BindThisThread(m.places[size_t(t)]).ok();
      // oneDNN's OpenMP runtime: one thread per worker; the parallelism is ours.
      omp_set_num_threads(1);
      fn(t);
    });
  for (auto& th : threads) th.join();
  m.bound = 0;
  for (int b : bound) m.bound += b;
}

// Logs a Network's held-back rows (they are the updates about to reach the shared weights), then
// applies them.
void Replica::Impl::ApplyHeld(Worker& wk, model::Network* net) {
  if (net->pending() == 0) return;
  if (!options.record_layers.empty()) {
    std::lock_guard<std::mutex> lock(*wk.log_mu);
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
  for (int i = 0; i < count;) {
    model::Network* net = count - i >= wk.net->batch() ? wk.net.get() : wk.net_one.get();
    net->SetInputFromBytes(pixels + i * isz);
    loss += net->Forward(labels + i, nullptr);
    net->Backward(lr);
    if (m.options.apply_every > 1) {
      if (net->pending() == m.options.apply_every) m.ApplyHeld(wk, net);
    } else if (!m.options.record_layers.empty()) {
      std::lock_guard<std::mutex> lock(*wk.log_mu);
      for (size_t k = 0; k < m.options.record_layers.size(); ++k) {
        const auto io = net->dense_io(m.options.record_layers[k]);
        auto& a = wk.log.activations[k];
        auto& e = wk.log.errors[k];
        a.insert(a.end(), io.src, io.src + io.in * net->batch());
        const size_t from = e.size();
        e.resize(from + size_t(io.units * net->batch()));
        for (int64_t j = 0; j < io.units * net->batch(); ++j) e[from + size_t(j)] = -lr * io.diff_dst[j];
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
  std::lock_guard<std::mutex> lock(*wk.log_mu);
  std::swap(wk.log, *out);
}

double Replica::Evaluate(const float* params, const uint8_t* pixels, const uint8_t* labels,
                         int count) {
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
        for (int k = 0; k < net->batch(); ++k) correct[size_t(ti)] += pred[size_t(k)] == labels[i + k];
        i += net->batch();
      }
    }
  });
  int64_t sum = 0;
  for (auto c : correct) sum += c;
  return count > 0 ? double(sum) / count : 0.0;
}

}  // namespace adam::trainer
