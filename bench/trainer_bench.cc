// Trainer throughput and time-to-accuracy on Project Adam's MNIST model (examples/
// fashion-mnist.yaml), in process: a Replica's Hogwild workers with no network, the compute
// core of `adam trainer`. Prints a table and one JSON object (last line) for bench/trainer.py.
//
//   trainer_bench --threads 1,2 --batches 1,32 --seconds 3 [--tta 0.91]
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <thread>

#include "data/augment.h"
#include "data/idx.h"
#include "model/layout.h"
#include "model/pool.h"
#include "spec/adamjob.h"
#include "trainer/replica.h"

using Clock = std::chrono::steady_clock;
using adam::trainer::Replica;

namespace {

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) v.push_back(std::stoi(x));
  return v;
}

struct Data {
  adam::data::Dataset train, test;
};

// Fashion-MNIST when the manifest's files exist, else random images (throughput only).
Data LoadData(const adam::spec::AdamJob& job, bool* real) {
  Data d;
  auto tr = adam::data::LoadIdxDataset(job.dataset.train.images, job.dataset.train.labels, 10);
  auto te = adam::data::LoadIdxDataset(job.dataset.test.images, job.dataset.test.labels, 10);
  *real = tr.ok() && te.ok();
  if (*real) {
    d.train = std::move(*tr);
    d.test = std::move(*te);
    return d;
  }
  std::mt19937 rng(1);
  for (auto* ds : {&d.train, &d.test}) {
    ds->count = ds == &d.train ? 60000 : 10000;
    ds->height = ds->width = 28;
    ds->pixels.resize(size_t(ds->count) * 784);
    for (auto& p : ds->pixels) p = uint8_t(rng());
    ds->labels.resize(size_t(ds->count));
    for (auto& l : ds->labels) l = uint8_t(rng() % 10);
  }
  return d;
}

// Images/s of `threads` Hogwild workers at `batch`, measured over `seconds` after a warm-up.
double Throughput(const adam::model::ModelLayout& layout, const std::vector<float>& init,
                  const Data& data, int threads, int batch, int apply_every, bool private_weights,
                  double seconds, std::string* where, double* waits_per_step) {
  adam::trainer::ReplicaOptions o;
  o.threads = threads;
  o.batch = batch;
  o.apply_every = apply_every;
  o.private_weights = private_weights;
  o.evaluate = false;
  auto r = Replica::Create(layout, o, init.data());
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
    std::exit(1);
  }
  *where = (*r)->placement();
  std::atomic<int64_t> images{0}, steps{0};
  std::atomic<int> phase{0};  // 0 warm-up, 1 measuring, 2 stop
  const int chunk = std::max(batch, 64);
  auto start = Clock::now();
  std::thread timer([&] {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(1.0, seconds / 3)));
    start = Clock::now();
    phase = 1;
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    phase = 2;
  });
  (*r)->RunWorkers([&](int t) {
    int pos = (data.train.count / threads) * t;
    while (phase.load(std::memory_order_relaxed) < 2) {
      if (pos + chunk > data.train.count) pos = 0;
      (*r)->Train(t, data.train.pixels.data() + int64_t{pos} * 784, data.train.labels.data() + pos,
                  chunk, 0.001f);
      if (phase.load(std::memory_order_relaxed) == 1)
        images.fetch_add(chunk, std::memory_order_relaxed);
      steps.fetch_add((chunk + batch - 1) / batch, std::memory_order_relaxed);
      pos += chunk;
    }
  });
  timer.join();
  // Private weights: how often a worker had to wait for a peer a whole ring behind.
  *waits_per_step = double((*r)->ring_waits()) / double(std::max<int64_t>(1, steps.load()));
  return double(images.load()) / std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Adam trainer benchmark"};
  std::string job_path = "examples/fashion-mnist.yaml", threads_s, batches_s = "1,32";
  double seconds = 3, tta = 0, tta_lr = 0.005, tta_decay = 0.85;
  int tta_threads = 0, tta_batch = 1, tta_epochs = 30, apply_every = 1;
  int tta_apply_every = 8;
  bool tta_augment = true, private_weights = false, tta_private = false;
  app.add_option("--job", job_path, "manifest whose model and data files to use");
  app.add_option("--threads", threads_s, "comma-separated thread counts (default 1,2,4,.. all)");
  app.add_option("--batches", batches_s, "comma-separated batch sizes");
  app.add_option("--seconds", seconds, "measuring time per configuration");
  app.add_option("--apply-every", apply_every,
                 "steps a worker holds its updates before writing the shared weights (1 = Adam)");
  app.add_option("--private-weights", private_weights,
                 "each worker thread trains its own weight copy and applies its peers' steps "
                 "from a ring (threadWeights: private; needs --apply-every 1)");
  app.add_option("--tta", tta, "also time training to this test accuracy (0 = skip)");
  app.add_option("--tta-threads", tta_threads, "threads for time-to-accuracy (default all)");
  app.add_option("--tta-batch", tta_batch, "batch for time-to-accuracy");
  app.add_option("--tta-lr", tta_lr, "learning rate for time-to-accuracy");
  app.add_option("--tta-decay", tta_decay, "per-epoch learning-rate decay");
  app.add_option("--tta-epochs", tta_epochs, "give up after this many epochs");
  app.add_option("--tta-apply-every", tta_apply_every,
                 "time-to-accuracy workers write the shared weights every N steps (applyEvery)");
  app.add_option("--tta-private", tta_private,
                 "time-to-accuracy workers keep private weight copies (threadWeights: private)");
  app.add_option("--tta-augment", tta_augment,
                 "train on the manifest's augmented variants (as the data server serves them)");
  CLI11_PARSE(app, argc, argv);

  auto job = adam::spec::LoadAdamJob(job_path);
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", job.status().ToString().c_str());
    return 2;
  }
  auto layout = adam::model::ModelLayout::Make(job->model);
  std::vector<float> init(size_t(layout->num_params()));
  layout->InitParams(1, init.data());
  bool real = false;
  Data data = LoadData(*job, &real);
  const int cores = int(std::thread::hardware_concurrency());
  std::vector<int> threads = threads_s.empty() ? std::vector<int>{} : ParseList(threads_s);
  if (threads.empty()) {
    for (int t = 1; t < cores; t *= 2) threads.push_back(t);
    threads.push_back(cores);
  }
  const double flops = layout->TrainFlops();
  // Time to accuracy trains on the manifest's augmentation (the data server's) unless told not to.
  adam::spec::AugmentSpec aug = job->dataset.augment;
  if (!tta_augment) aug = adam::spec::AugmentSpec{0, false, 1};
  nlohmann::json out = {{"model_params", layout->num_params()},
                        {"train_flops_per_image", flops},
                        {"cores", cores},
                        {"real_data", real},
                        {"kernel_isa", adam::model::PoolKernelIsa()},
                        {"runs", nlohmann::json::array()},
                        {"augment", {aug.shift, int(aug.hflip), aug.variants}}};
  // Human-readable lines go to stderr; stdout carries only the final JSON.
  std::fprintf(stderr, "kernels: %s (oneDNN's instruction set, which ONEDNN_MAX_CPU_ISA caps)\n",
               adam::model::PoolKernelIsa());
  std::fprintf(stderr, "%-8s %-6s %12s %10s  %s\n", "threads", "batch", "images/s", "GFLOP/s",
               "placement");
  for (int b : ParseList(batches_s))
    for (int t : threads) {
      std::string where;
      double waits = 0;
      const double ips = Throughput(*layout, init, data, t, b, apply_every, private_weights,
                                    seconds, &where, &waits);
      if (private_weights) where += "; ring waits per step " + std::to_string(waits);
      std::fprintf(stderr, "%-8d %-6d %12.0f %10.2f  %s\n", t, b, ips, ips * flops / 1e9,
                   where.c_str());
      out["runs"].push_back({{"threads", t},
                             {"batch", b},
                             {"apply_every", apply_every},
                             {"private_weights", private_weights},
                             {"images_per_second", ips},
                             {"ring_waits_per_step", waits}});
    }

  if (tta > 0 && real) {
    const int t = tta_threads > 0 ? tta_threads : cores;
    adam::trainer::ReplicaOptions o;
    o.threads = t;
    o.batch = tta_batch;
    o.apply_every = tta_private ? 1 : tta_apply_every;
    o.private_weights = tta_private;
    auto r = Replica::Create(*layout, o, init.data());
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      return 1;
    }
    std::vector<float> weights(size_t(layout->num_params()));
    std::vector<int> order(size_t(data.train.count));
    std::iota(order.begin(), order.end(), 0);
    std::vector<uint8_t> px(data.train.pixels.size()), lb(data.train.labels.size());
    std::mt19937 rng(7);
    const auto t0 = Clock::now();
    // The variants are computed once (inside the timed span) and every epoch draws one of them
    // for each image, as the data server serves them.
    const adam::data::AugmentedCache cache(data.train, aug, 1);
    double acc = 0;
    int epoch = 0;
    for (; epoch < tta_epochs && acc < tta; ++epoch) {
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t i = 0; i < order.size(); ++i) {
        const int variant = int(rng() % uint32_t(cache.variants()));
        std::memcpy(px.data() + i * 784, cache.Image(variant, order[i]), 784);
        lb[i] = data.train.labels[size_t(order[i])];
      }
      const float lr = float(tta_lr * std::pow(tta_decay, epoch));
      const int per = data.train.count / t;
      (*r)->RunWorkers([&](int w) {
        (*r)->Train(w, px.data() + int64_t{w} * per * 784, lb.data() + w * per, per, lr);
      });
      (*r)->ReadWeights(weights.data());
      acc = (*r)->Evaluate(weights.data(), data.test.pixels.data(), data.test.labels.data(),
                           data.test.count, nullptr);
      std::fprintf(stderr, "tta: epoch %d  test accuracy %.4f  %.1f s\n", epoch + 1, acc,
                   std::chrono::duration<double>(Clock::now() - t0).count());
    }
    out["tta"] = {{"target", tta},
                  {"reached", acc >= tta},
                  {"accuracy", acc},
                  {"epochs", epoch},
                  {"seconds", std::chrono::duration<double>(Clock::now() - t0).count()},
                  {"threads", t},
                  {"batch", tta_batch},
                  {"apply_every", o.apply_every},
                  {"private_weights", tta_private},
                  {"lr", tta_lr},
                  {"decay", tta_decay},
                  {"augment_variants", cache.variants()}};
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
