// split_worker: one model worker of a split replica (model/partition.h), for bench/split.py.
// K such processes train one model split K ways, trading boundaries over gRPC streams
// (trainer/model_exchange.h), on a manifest's model and Fashion-MNIST or on a wide MLP and
// synthetic images; each prints one JSON line of what it did. Peak memory is the process's own
// (getrusage), so the caller can cap it (RLIMIT_DATA) and see what still trains.
#include <omp.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "data/idx.h"
#include "model/partition.h"
#include "net/grpc.h"
#include "spec/adamjob.h"
#include "trainer/model_exchange.h"

namespace adam {
namespace {

struct Args {
  int workers = 1, worker = 0, threads = 1, batch = 1, epochs = 1;
  int mlp_units = 0, mlp_layers = 2, images = 0;
  std::vector<std::string> addresses;
  std::string manifest;
  double lr = 0.01;
};

struct Data {
  data::Dataset train, test;
  int classes = 10;
};

// A learnable synthetic set: the label is the brightest of ten bands of the image.
data::Dataset Synthetic(int count, const spec::Shape& in, uint32_t seed) {
  data::Dataset d;
  d.count = count;
  d.channels = in.channels;
  d.height = in.height;
  d.width = in.width;
  const int64_t n = d.image_bytes();
  d.pixels.resize(size_t(n * count));
  std::mt19937 rng(seed);
  for (int i = 0; i < count; ++i) {
    uint8_t* img = d.pixels.data() + i * n;
    for (int64_t k = 0; k < n; ++k) img[k] = uint8_t(rng() % 128);
    const int label = int(rng() % 10);
    const int64_t band = n / 10;
    for (int64_t k = label * band; k < (label + 1) * band; ++k) img[k] = uint8_t(img[k] + 100);
    d.labels.push_back(uint8_t(label));
  }
  return d;
}

StatusOr<spec::ModelSpec> ModelOf(const Args& a, std::optional<spec::AdamJob>* job) {
  if (!a.manifest.empty()) {
    ADAM_ASSIGN_OR_RETURN(*job, spec::LoadAdamJob(a.manifest));
    return (*job)->model;
  }
  spec::ModelSpec m{{1, 28, 28}, {}};
  for (int l = 0; l < a.mlp_layers; ++l) {
    spec::LayerSpec d;
    d.units = a.mlp_units;
    d.activation = spec::Activation::kRelu;
    m.layers.push_back(d);
  }
  spec::LayerSpec s;
  s.type = spec::LayerType::kSoftmax;
  s.classes = 10;
  s.activation = spec::Activation::kNone;
  m.layers.push_back(s);
  return m;
}

StatusOr<Data> DataOf(const Args& a, const std::optional<spec::AdamJob>& job,
                      const spec::ModelSpec& m) {
  Data d;
  if (!job) {
    d.train = Synthetic(std::max(a.images, 1), m.input, 1);
    d.test = Synthetic(1000, m.input, 2);
    return d;
  }
  d.classes = spec::NumClasses(m);
  const auto& ds = job->dataset;
  ADAM_ASSIGN_OR_RETURN(
      d.train, data::LoadIdxDataset(ds.train.images, ds.train.labels, d.classes, m.input.channels,
                                    m.input.height, m.input.width));
  ADAM_ASSIGN_OR_RETURN(
      d.test, data::LoadIdxDataset(ds.test.images, ds.test.labels, d.classes, m.input.channels,
                                   m.input.height, m.input.width));
  if (a.images > 0) d.train.count = std::min(d.train.count, a.images);
  return d;
}

// The lanes' exchanges: none for one worker, else this worker's server and a GrpcExchange a lane.
struct Wires {
  std::unique_ptr<trainer::ModelExchangeService> service;
  net::Server server;
  std::vector<std::unique_ptr<trainer::GrpcExchange>> lanes;
  model::Exchange* lane(int t) { return lanes.empty() ? nullptr : lanes[size_t(t)].get(); }
};

StatusOr<std::unique_ptr<Wires>> Wire(const Args& a) {
  auto w = std::make_unique<Wires>();
  if (a.workers == 1) return w;
  if (int(a.addresses.size()) != a.workers)
    return InvalidArgumentError("--addresses: one per worker");
  auto transport = net::Transport::Plaintext();
  w->service = std::make_unique<trainer::ModelExchangeService>(a.workers, a.threads);
  ADAM_ASSIGN_OR_RETURN(
      w->server, net::StartServer(*transport, a.addresses[size_t(a.worker)], {w->service.get()}));
  for (int t = 0; t < a.threads; ++t)
    w->lanes.push_back(std::make_unique<trainer::GrpcExchange>(
        transport, a.addresses, a.worker, t, w->service->mailbox(t), std::chrono::seconds(120)));
  return w;
}

struct Progress {
  double loss = 0;
  int64_t images = 0;
};

// Lane t trains on every threads-th batch of each epoch's shuffled order (the same order in
// every worker, so lane t of each meets the same images).
Status TrainLane(const Args& a, const Data& d, model::SplitWorker& w, int t, Progress* out) {
  const int64_t n = d.train.image_bytes();
  std::vector<int> order(size_t(d.train.count));
  std::vector<uint8_t> pixels(size_t(n * a.batch)), labels(size_t(a.batch));
  for (int e = 0; e < a.epochs; ++e) {
    for (int i = 0; i < d.train.count; ++i) order[size_t(i)] = i;
    std::mt19937 rng(uint32_t(e + 1));
    std::shuffle(order.begin(), order.end(), rng);
    out->loss = 0;
    int64_t seen = 0;
    for (int b = t; (b + 1) * a.batch <= d.train.count; b += a.threads) {
      for (int i = 0; i < a.batch; ++i) {
        const int img = order[size_t(b * a.batch + i)];
        std::copy_n(d.train.pixels.data() + img * n, n, pixels.data() + i * n);
        labels[size_t(i)] = d.train.labels[size_t(img)];
      }
      w.SetInputFromBytes(pixels.data());
      ADAM_ASSIGN_OR_RETURN(float loss, w.Forward(labels.data(), nullptr));
      ADAM_RETURN_IF_ERROR(w.Backward(float(a.lr * std::pow(0.85, e))));
      out->loss += loss;
      seen += a.batch;
    }
    out->loss /= double(std::max<int64_t>(seen, 1));
    out->images += seen;
  }
  return OkStatus();
}

StatusOr<double> Evaluate(const model::Partition& part, const Args& a, const Data& d, float* own,
                          model::Exchange* ex) {
  const int batch = 100;
  ADAM_ASSIGN_OR_RETURN(auto w, model::SplitWorker::Create(part, a.worker, batch, own, nullptr,
                                                           model::NetworkMode::kInference, ex));
  const int64_t n = d.test.image_bytes();
  std::vector<int> predicted(batch);
  int64_t right = 0, seen = 0;
  for (int b = 0; (b + 1) * batch <= d.test.count; ++b) {
    w->SetInputFromBytes(d.test.pixels.data() + int64_t{b} * batch * n);
    ADAM_RETURN_IF_ERROR(w->Forward(nullptr, predicted.data()).status());
    for (int i = 0; i < batch; ++i)
      right += predicted[size_t(i)] == d.test.labels[size_t(b * batch + i)];
    seen += batch;
  }
  return double(right) / double(std::max<int64_t>(seen, 1));
}

Status Run(const Args& a) {
  std::optional<spec::AdamJob> job;
  ADAM_ASSIGN_OR_RETURN(spec::ModelSpec m, ModelOf(a, &job));
  ADAM_ASSIGN_OR_RETURN(model::ModelLayout layout, model::ModelLayout::Make(m));
  ADAM_ASSIGN_OR_RETURN(model::Partition part, model::Partition::Make(layout, a.workers));
  ADAM_ASSIGN_OR_RETURN(Data d, DataOf(a, job, m));
  std::vector<float> own(size_t(part.num_params(a.worker)));
  part.InitParams(a.worker, job ? job->training.seed : 1, own.data());
  ADAM_ASSIGN_OR_RETURN(auto wires, Wire(a));
  std::vector<std::unique_ptr<model::SplitWorker>> lanes;
  for (int t = 0; t < a.threads; ++t) {
    ADAM_ASSIGN_OR_RETURN(auto w,
                          model::SplitWorker::Create(part, a.worker, a.batch, own.data(), nullptr,
                                                     model::NetworkMode::kSgd, wires->lane(t)));
    lanes.push_back(std::move(w));
  }
  std::vector<Progress> progress(size_t(a.threads));
  std::vector<Status> status(size_t(a.threads));
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < a.threads; ++t)
    threads.emplace_back([&, t] {
      status[size_t(t)] = TrainLane(a, d, *lanes[size_t(t)], t, &progress[size_t(t)]);
    });
  for (auto& th : threads) th.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& s : status) ADAM_RETURN_IF_ERROR(s);
  ADAM_ASSIGN_OR_RETURN(double accuracy, Evaluate(part, a, d, own.data(), wires->lane(0)));
  int64_t images = 0;
  double loss = 0;
  for (const auto& p : progress) {
    images += p.images;
    loss += p.loss / a.threads;
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  nlohmann::json out = {{"worker", a.worker},
                        {"workers", a.workers},
                        {"threads", a.threads},
                        {"batch", a.batch},
                        {"params", layout.num_params()},
                        {"own_params", part.num_params(a.worker)},
                        {"images", images},
                        {"seconds", seconds},
                        {"images_per_s", images / seconds},
                        {"loss", loss},
                        {"accuracy", accuracy},
                        {"max_rss_mib", ru.ru_maxrss / 1024.0}};
  std::cout << out.dump() << std::endl;
  return OkStatus();
}

}  // namespace
}  // namespace adam

int main(int argc, char** argv) {
  adam::Args a;
  CLI::App app{"one model worker of a split replica (bench/split.py runs K of them)"};
  app.add_option("--workers", a.workers, "model workers K")->check(CLI::Range(1, 64));
  app.add_option("--worker", a.worker, "this worker's number")->check(CLI::NonNegativeNumber);
  app.add_option("--addresses", a.addresses, "every worker's host:port, in order")->delimiter(',');
  app.add_option("--threads", a.threads, "Hogwild lanes")->check(CLI::Range(1, 64));
  app.add_option("--batch", a.batch, "images per step")->check(CLI::Range(1, 4096));
  app.add_option("--epochs", a.epochs, "passes over the training images")
      ->check(CLI::Range(1, 1000));
  app.add_option("--images", a.images, "training images (synthetic count, or a prefix of the set)");
  app.add_option("--manifest", a.manifest, "an AdamJob: its model and IDX data");
  app.add_option("--mlp-units", a.mlp_units, "without --manifest: dense units per layer");
  app.add_option("--mlp-layers", a.mlp_layers, "without --manifest: dense layers");
  app.add_option("--lr", a.lr, "learning rate (x0.85 each epoch)");
  CLI11_PARSE(app, argc, argv);
  if (a.manifest.empty() && a.mlp_units < 1) {
    std::cerr << "split_worker: give --manifest or --mlp-units\n";
    return 2;
  }
  if (a.worker >= a.workers) {
    std::cerr << "split_worker: --worker must be below --workers\n";
    return 2;
  }
  omp_set_num_threads(1);  // each lane runs oneDNN on its own thread, as the trainer does
  const adam::Status s = adam::Run(a);
  if (!s.ok()) {
    std::cerr << "split_worker " << a.worker << ": " << s.ToString() << "\n";
    return 1;
  }
  return 0;
}
