// SplitReplica (the lead's side) and RunModelWorker (every other worker's), and the lane protocol
// between them.
#include "trainer/split_replica.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <thread>

#include "core/mutex.h"
#include "core/thread_name.h"
#include "model/network.h"
#include "model/partition.h"
#include "net/grpc.h"
#include "trainer/model_exchange.h"
#include "trainer/slice_sync.h"

namespace adam::trainer {

namespace {

// Tags above every boundary's (2 x stage + 1 < 1000 for at most 256 layers).
// A training lane: a header {images, learning rate} (images < 0: stop), then the images' pixel
// and label bytes packed into floats.
constexpr uint32_t kTagHeader = 1000;
constexpr uint32_t kTagImages = 1001;
// The control lane: a command {command, clock as two floats' bits}, then (read, add, set) one
// worker's slice, or (push, pull) the worker's reply.
constexpr uint32_t kTagCommand = 2000;
constexpr uint32_t kTagSlice = 2001;
constexpr uint32_t kTagReply = 2002;
enum Command { kStop = 0, kRead = 1, kAdd = 2, kSet = 3, kPush = 4, kPull = 5 };
constexpr size_t kCommandFloats = 3;
// A reply: {status code, text bytes, held (2), pushed bytes (2), pulled bytes (2), text...}.
constexpr size_t kReplyFloats = 64;
constexpr size_t kReplyText = (kReplyFloats - 8) * sizeof(float);
// The most images one lane message may carry (a data server batch is far smaller).
constexpr int kMaxLaneImages = 1 << 16;

std::vector<float> Pack(const uint8_t* a, size_t na, const uint8_t* b, size_t nb) {
  std::vector<float> out((na + nb + sizeof(float) - 1) / sizeof(float));
  auto* bytes = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(bytes, a, na);
  std::memcpy(bytes + na, b, nb);
  return out;
}

Status SendCommand(model::Exchange* ex, int to, int command, uint64_t clock = 0) {
  std::array<float, kCommandFloats> m{float(command)};
  std::memcpy(&m[1], &clock, sizeof clock);
  return ex->Send(to, kTagCommand, m);
}

StatusOr<std::pair<int, uint64_t>> ReceiveCommand(model::Exchange* ex) {
  std::array<float, kCommandFloats> m{};
  ADAM_RETURN_IF_ERROR(ex->Receive(0, kTagCommand, m));
  uint64_t clock = 0;
  std::memcpy(&clock, &m[1], sizeof clock);
  if (!(m[0] >= 0 && m[0] <= 100))  // any command is refused below; this one is no integer
    return InternalError("model worker: the lead sent command " + std::to_string(m[0]));
  return std::pair<int, uint64_t>{int(m[0]), clock};
}

// 64-bit counts travel as two floats' bits (the exchange moves bytes; nothing reads them as
// numbers on the way).
void PutCount(float* at, uint64_t v) { std::memcpy(at, &v, sizeof v); }
uint64_t GetCount(const float* at) {
  uint64_t v = 0;
  std::memcpy(&v, at, sizeof v);
  return v;
}

std::array<float, kReplyFloats> EncodeReply(const Status& st, const SliceCounts& c) {
  std::array<float, kReplyFloats> r{};
  const std::string text = st.message().substr(0, kReplyText);
  r[0] = float(int(st.code()));
  r[1] = float(text.size());
  PutCount(&r[2], uint64_t(c.held));
  PutCount(&r[4], c.pushed_bytes);
  PutCount(&r[6], c.pulled_bytes);
  std::memcpy(&r[8], text.data(), text.size());
  return r;
}

Status DecodeReply(const std::array<float, kReplyFloats>& r, int worker, SliceCounts* c) {
  // Checked as floats first: a float out of an integer's range does not convert.
  if (!(r[1] >= 0 && r[1] <= float(kReplyText)) ||
      !(r[0] >= 0 && r[0] <= float(int(StatusCode::kOutOfRange))))
    return DataLossError("model worker " + std::to_string(worker) + " sent a reply of code " +
                         std::to_string(r[0]) + " with " + std::to_string(r[1]) + " text bytes");
  if (r[0] != 0) {
    const std::string text(reinterpret_cast<const char*>(&r[8]), size_t(r[1]));
    return Status(StatusCode(int(r[0])), "model worker " + std::to_string(worker) + ": " + text);
  }
  c->held += int64_t(GetCount(&r[2]));
  c->pushed_bytes += GetCount(&r[4]);
  c->pulled_bytes += GetCount(&r[6]);
  return OkStatus();
}

// One worker's parts: its slice's weights, its exchange and lanes; the same on every worker.
struct Worker {
  // Ends the streams to its peers and stops serving theirs, waiting at most 2 s for a peer to
  // end its own (one that keeps a stream open is cut, not waited for).
  ~Worker() {
    exchanges.clear();
    if (server.server) server.server->Shutdown(net::DeadlineAfter(std::chrono::seconds(2)));
  }
  const model::ModelLayout* layout = nullptr;
  std::optional<model::Partition> part;
  int self = 0;
  SplitOptions opt;
  std::vector<float> params;  // this worker's slice, written by every lane (Hogwild)
  std::unique_ptr<ModelExchangeService> service;
  net::Server server;
  std::vector<std::unique_ptr<GrpcExchange>> exchanges;  // per lane, then the control lane
  struct Lane {
    std::unique_ptr<model::SplitWorker> batch, one;  // batch B, and 1 for a remainder
  };
  std::vector<Lane> lanes;
  // Its own pushes and pulls of its slice (with options.connect_slice).
  std::unique_ptr<ParamServerClient> ps;
  std::optional<SliceSync> sync;

  int workers() const { return part->workers(); }
  // Connects the slice's client and starts its SliceSync from the slice as it is now.
  Status StartSync();
  // Push: the slice's change at clock 0; pull: the slice once `clock` allows.
  Status PushOwn(SliceCounts* c);
  Status PullOwn(uint64_t clock, SliceCounts* c);
  model::Exchange* control() { return exchanges.back().get(); }
  Status Start(const model::ModelLayout& l, const SplitOptions& o, int worker);
  // Lane t's steps over `count` images, batch by batch and the remainder one at a time.
  StatusOr<double> Train(int t, const uint8_t* pixels, const uint8_t* labels, int count, float lr);
};

Status Worker::Start(const model::ModelLayout& l, const SplitOptions& o, int worker) {
  layout = &l;
  opt = o;
  self = worker;
  const int k = int(o.workers.size());
  ADAM_ASSIGN_OR_RETURN(part, model::Partition::Make(l, k));
  params.assign(size_t(part->num_params(worker)), 0.f);
  service = std::make_unique<ModelExchangeService>(k, o.threads + 1);
  ADAM_ASSIGN_OR_RETURN(server,
                        net::StartServer(*o.transport, o.workers[size_t(worker)], {service.get()}));
  for (int t = 0; t <= o.threads; ++t)
    exchanges.push_back(std::make_unique<GrpcExchange>(o.transport, o.workers, worker, t,
                                                       service->mailbox(t), o.timeout));
  model::StepRule rule{
      .momentum = o.momentum, .weight_decay = o.weight_decay, .label_smoothing = o.label_smoothing};
  for (int t = 0; t < o.threads; ++t) {
    Lane lane;
    ADAM_ASSIGN_OR_RETURN(
        lane.batch,
        model::SplitWorker::Create(*part, worker, o.batch, params.data(), nullptr,
                                   model::NetworkMode::kSgd, exchanges[size_t(t)].get(), rule));
    if (o.batch > 1) {
      ADAM_ASSIGN_OR_RETURN(lane.one, model::SplitWorker::Create(*part, worker, 1, params.data(),
                                                                 nullptr, model::NetworkMode::kSgd,
                                                                 exchanges[size_t(t)].get(), rule));
    }
    lanes.push_back(std::move(lane));
  }
  return OkStatus();
}

Status Worker::StartSync() {
  if (!opt.connect_slice) return OkStatus();
  ADAM_ASSIGN_OR_RETURN(ps, opt.connect_slice(part->ranges(self)));
  const auto n = int64_t(params.size());
  sync.emplace(ps.get(), params, opt.communication,
               std::vector<std::pair<int64_t, int64_t>>{{0, n}});
  return OkStatus();
}

Status Worker::PushOwn(SliceCounts* c) {
  const uint64_t before = ps->pushed_bytes();
  ADAM_ASSIGN_OR_RETURN(const int64_t held, sync->Push(
                                                [this](float* out) {
                                                  // Lanes keep training meanwhile (Hogwild).
                                                  std::memcpy(out, params.data(),
                                                              params.size() * sizeof(float));
                                                  return OkStatus();
                                                },
                                                {}, 0));
  c->held += held;
  c->pushed_bytes += ps->pushed_bytes() - before;
  return OkStatus();
}

Status Worker::PullOwn(uint64_t clock, SliceCounts* c) {
  const uint64_t before = ps->pulled_bytes();
  ADAM_RETURN_IF_ERROR(sync->Pull(
      [this](const float* delta) {
        for (size_t i = 0; i < params.size(); ++i) params[i] += delta[i];
        return OkStatus();
      },
      clock));
  c->pulled_bytes += ps->pulled_bytes() - before;
  return OkStatus();
}

StatusOr<double> Worker::Train(int t, const uint8_t* pixels, const uint8_t* labels, int count,
                               float lr) {
  Lane& lane = lanes[size_t(t)];
  const int64_t isz = layout->input_size();
  double loss = 0;
  for (int i = 0; i < count;) {
    model::SplitWorker* w = count - i >= opt.batch ? lane.batch.get() : lane.one.get();
    w->SetInputFromBytes(pixels + i * isz);
    ADAM_ASSIGN_OR_RETURN(float l, w->Forward(labels + i, nullptr));
    ADAM_RETURN_IF_ERROR(w->Backward(lr));
    loss += l;
    i += w->batch();
  }
  return loss;
}

class SplitReplica final : public ModelReplica, public SliceSyncer {
 public:
  explicit SplitReplica(std::unique_ptr<Worker> w) : w_(std::move(w)) {}
  ~SplitReplica() override;
  int threads() const override { return w_->opt.threads; }
  std::string placement() const override {
    return std::to_string(w_->workers()) + " model workers, " + std::to_string(w_->opt.threads) +
           " lanes each";
  }
  void RunWorkers(const std::function<void(int)>& fn) override {
    std::vector<std::thread> lanes;
    lanes.reserve(size_t(threads()));
    for (int t = 0; t < threads(); ++t)
      lanes.emplace_back([&fn, t] {
        NameThisThread("worker-" + std::to_string(t));
        omp_set_num_threads(1);  // one core a lane, as the whole replica's workers have
        fn(t);
      });
    for (auto& l : lanes) l.join();
  }
  double Train(int t, const uint8_t* pixels, const uint8_t* labels, int count, float lr) override;
  Status status() const override {
    MutexLock lock(mu_);
    return error_;
  }
  Status Read(float* out) override;
  Status Add(const float* delta) override;
  Status Set(const float* whole);
  SliceSyncer* slice_syncer() override { return w_->sync ? this : nullptr; }
  StatusOr<SliceCounts> PushSlices() override;
  StatusOr<SliceCounts> PullSlices(uint64_t clock) override;
  Status StartSync() { return w_->StartSync(); }
  double Evaluate(const float* params, const uint8_t* pixels, const uint8_t* labels, int count,
                  int* predicted) override;

 private:
  // Train's images at most kMaxLaneImages at a time: sent to every worker, trained here.
  double TrainChunk(int t, const uint8_t* pixels, const uint8_t* labels, int count, float lr);
  // `command` (kAdd, kSet) and each worker's slice of `whole` to that worker.
  Status SendSlices(int command, const float* whole);
  // `command` (kPush, kPull) to every worker, the lead's own part meanwhile, then every reply.
  StatusOr<SliceCounts> Round(int command, uint64_t clock);
  void Fail(const Status& s) {
    MutexLock lock(mu_);
    if (error_.ok()) error_ = s;
  }
  std::unique_ptr<Worker> w_;
  mutable Mutex mu_;
  Status error_ ABSL_GUARDED_BY(mu_);
  std::vector<float> slice_;  // the control lane's buffer
};

double SplitReplica::Train(int t, const uint8_t* pixels, const uint8_t* labels, int count,
                           float lr) {
  double loss = 0;
  const int64_t isz = w_->layout->input_size();
  for (int i = 0; i < count; i += kMaxLaneImages)
    loss += TrainChunk(t, pixels + i * isz, labels + i, std::min(kMaxLaneImages, count - i), lr);
  return loss;
}

double SplitReplica::TrainChunk(int t, const uint8_t* pixels, const uint8_t* labels, int count,
                                float lr) {
  if (!status().ok()) return 0;
  const float header[2] = {float(count), lr};
  const std::vector<float> images =
      Pack(pixels, size_t(count * w_->layout->input_size()), labels, size_t(count));
  model::Exchange* ex = w_->exchanges[size_t(t)].get();
  for (int j = 1; j < w_->workers(); ++j) {
    Status s = ex->Send(j, kTagHeader, header);
    if (s.ok()) s = ex->Send(j, kTagImages, images);
    if (!s.ok()) {
      Fail(s);
      return 0;
    }
  }
  auto loss = w_->Train(t, pixels, labels, count, lr);
  if (!loss.ok()) {
    Fail(loss.status());
    return 0;
  }
  return *loss;
}

Status SplitReplica::Read(float* out) {
  w_->part->Insert(0, w_->params.data(), out);
  model::Exchange* ex = w_->control();
  for (int j = 1; j < w_->workers(); ++j) ADAM_RETURN_IF_ERROR(SendCommand(ex, j, kRead));
  for (int j = 1; j < w_->workers(); ++j) {
    slice_.resize(size_t(w_->part->num_params(j)));
    ADAM_RETURN_IF_ERROR(ex->Receive(j, kTagSlice, slice_));
    w_->part->Insert(j, slice_.data(), out);
  }
  return OkStatus();
}

Status SplitReplica::Add(const float* delta) {
  for (const auto& r : w_->part->ranges(0))
    for (int64_t i = 0; i < r.count; ++i) w_->params[size_t(r.own + i)] += delta[r.whole + i];
  return SendSlices(kAdd, delta);
}

Status SplitReplica::Set(const float* whole) {
  w_->part->Extract(0, whole, w_->params.data());
  return SendSlices(kSet, whole);
}

Status SplitReplica::SendSlices(int command, const float* whole) {
  model::Exchange* ex = w_->control();
  for (int j = 1; j < w_->workers(); ++j) {
    slice_.resize(size_t(w_->part->num_params(j)));
    w_->part->Extract(j, whole, slice_.data());
    ADAM_RETURN_IF_ERROR(SendCommand(ex, j, command));
    ADAM_RETURN_IF_ERROR(ex->Send(j, kTagSlice, slice_));
  }
  return OkStatus();
}

StatusOr<SliceCounts> SplitReplica::PushSlices() { return Round(kPush, 0); }

StatusOr<SliceCounts> SplitReplica::PullSlices(uint64_t clock) { return Round(kPull, clock); }

StatusOr<SliceCounts> SplitReplica::Round(int command, uint64_t clock) {
  model::Exchange* ex = w_->control();
  for (int j = 1; j < w_->workers(); ++j) ADAM_RETURN_IF_ERROR(SendCommand(ex, j, command, clock));
  SliceCounts c;
  Status own = command == kPush ? w_->PushOwn(&c) : w_->PullOwn(clock, &c);
  // Every reply is taken, whatever the lead's own part did: the lane stays in step.
  for (int j = 1; j < w_->workers(); ++j) {
    std::array<float, kReplyFloats> reply{};
    ADAM_RETURN_IF_ERROR(ex->Receive(j, kTagReply, reply));
    if (Status st = DecodeReply(reply, j, &c); own.ok()) own = st;
  }
  ADAM_RETURN_IF_ERROR(own);
  return c;
}

double SplitReplica::Evaluate(const float* params, const uint8_t* pixels, const uint8_t* labels,
                              int count, int* predicted) {
  // The whole model, on the lead: the same function of the weights as the split one.
  const int64_t isz = w_->layout->input_size();
  const int batch = std::max(1, std::min(w_->opt.eval_batch, count));
  auto big = model::Network::Create(*w_->layout, batch, const_cast<float*>(params), nullptr,
                                    model::NetworkMode::kInference);
  auto one = model::Network::Create(*w_->layout, 1, const_cast<float*>(params), nullptr,
                                    model::NetworkMode::kInference);
  if (!big.ok() || !one.ok()) {
    spdlog::error("evaluation: {}", (big.ok() ? one.status() : big.status()).message());
    return 0;
  }
  std::vector<int> classes(static_cast<size_t>(batch));
  int64_t right = 0;
  for (int i = 0; i < count;) {
    model::Network* n = count - i >= batch ? big->get() : one->get();
    n->SetInputFromBytes(pixels + i * isz);
    n->Forward(nullptr, classes.data());
    for (int k = 0; k < n->batch(); ++k) {
      right += classes[size_t(k)] == labels[i + k];
      if (predicted != nullptr) predicted[i + k] = classes[size_t(k)];
    }
    i += n->batch();
  }
  return count > 0 ? double(right) / count : 0;
}

SplitReplica::~SplitReplica() {
  // Every worker ends its lanes and its control loop; one already gone is not waited for.
  const float stop_header[2] = {-1.f, 0.f};
  for (int j = 1; j < w_->workers(); ++j) {
    for (int t = 0; t < threads(); ++t)
      (void)w_->exchanges[size_t(t)]->Send(j, kTagHeader, stop_header);
    (void)SendCommand(w_->control(), j, kStop);
  }
  w_->service->Close(UnavailableError("the replica stopped"));
}  // ~Worker ends the streams and the exchange server

// A model worker's lane: the lead's batches until it says stop.
Status FollowLane(Worker& w, int t) {
  model::Exchange* ex = w.exchanges[size_t(t)].get();
  const int64_t isz = w.layout->input_size();
  std::vector<float> packed;
  for (;;) {
    float header[2];
    ADAM_RETURN_IF_ERROR(ex->Receive(0, kTagHeader, header));
    if (header[0] < 0) return OkStatus();
    if (!(header[0] <= float(kMaxLaneImages)) || !std::isfinite(header[1]))
      return InvalidArgumentError("model worker: the lead's batch header says " +
                                  std::to_string(header[0]) + " images at learning rate " +
                                  std::to_string(header[1]) + "; at most " +
                                  std::to_string(kMaxLaneImages) + " images, a finite rate");
    const int count = int(header[0]);
    const size_t n = size_t(count * isz);
    packed.resize((n + size_t(count) + sizeof(float) - 1) / sizeof(float));
    ADAM_RETURN_IF_ERROR(ex->Receive(0, kTagImages, packed));
    const auto* b = reinterpret_cast<const uint8_t*>(packed.data());
    ADAM_RETURN_IF_ERROR(w.Train(t, b, b + n, count, header[1]).status());
    if (w.opt.images) w.opt.images->Increment(count);
  }
}

// A model worker's control lane: reads, changes, pushes, pulls and the stop.
Status FollowControl(Worker& w) {
  model::Exchange* ex = w.control();
  std::vector<float> slice(w.params.size());
  for (;;) {
    ADAM_ASSIGN_OR_RETURN(const auto command, ReceiveCommand(ex));
    const auto [cmd, clock] = command;
    switch (cmd) {
      case kPush:
      case kPull: {
        if (!w.sync)
          return InternalError("model worker: the lead asked a push of a worker without a client");
        SliceCounts c;
        const Status st = cmd == kPush ? w.PushOwn(&c) : w.PullOwn(clock, &c);
        ADAM_RETURN_IF_ERROR(ex->Send(0, kTagReply, EncodeReply(st, c)));
        ADAM_RETURN_IF_ERROR(st);  // the lead has it; this worker ends with it too
        break;
      }
      case kStop:
        return OkStatus();
      case kRead:
        ADAM_RETURN_IF_ERROR(ex->Send(0, kTagSlice, w.params));
        break;
      case kAdd:
        ADAM_RETURN_IF_ERROR(ex->Receive(0, kTagSlice, slice));
        for (size_t i = 0; i < slice.size(); ++i) w.params[i] += slice[i];
        break;
      case kSet:
        ADAM_RETURN_IF_ERROR(ex->Receive(0, kTagSlice, w.params));
        break;
      default:
        return InternalError("model worker: the lead sent command " + std::to_string(cmd));
    }
  }
}

Status CheckWorkers(const SplitOptions& o, int worker) {
  if (o.workers.size() < 2)
    return InvalidArgumentError("a split replica needs at least 2 model workers' addresses");
  if (worker < 0 || worker >= int(o.workers.size()))
    return InvalidArgumentError("model worker " + std::to_string(worker) + ": the replica has " +
                                std::to_string(o.workers.size()) + " workers");
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<ModelReplica>> CreateSplitReplica(const model::ModelLayout& layout,
                                                           const SplitOptions& options,
                                                           const float* initial) {
  ADAM_RETURN_IF_ERROR(CheckWorkers(options, 0));
  auto w = std::make_unique<Worker>();
  ADAM_RETURN_IF_ERROR(w->Start(layout, options, 0));
  auto r = std::make_unique<SplitReplica>(std::move(w));
  ADAM_RETURN_IF_ERROR(r->Set(initial));
  ADAM_RETURN_IF_ERROR(r->StartSync());
  return std::unique_ptr<ModelReplica>(std::move(r));
}

Status RunModelWorker(const model::ModelLayout& layout, const SplitOptions& options, int worker) {
  ADAM_RETURN_IF_ERROR(CheckWorkers(options, worker));
  if (worker == 0) return InvalidArgumentError("model worker 0 is the trainer itself");
  Worker w;
  ADAM_RETURN_IF_ERROR(w.Start(layout, options, worker));
  spdlog::info("model worker {} of {}: {} of {} parameters, waiting for the lead at {}", worker,
               w.workers(), w.params.size(), layout.num_params(), options.workers[0]);
  // The slice first: no lane trains before it has the lead's weights.
  ADAM_ASSIGN_OR_RETURN(const auto first, ReceiveCommand(w.control()));
  if (first.first != kSet)
    return InternalError("model worker: the lead's first command was " +
                         std::to_string(first.first));
  ADAM_RETURN_IF_ERROR(w.control()->Receive(0, kTagSlice, w.params));
  ADAM_RETURN_IF_ERROR(w.StartSync());
  std::vector<Status> lanes(size_t(options.threads));
  std::vector<std::thread> threads;
  threads.reserve(size_t(options.threads));
  for (int t = 0; t < options.threads; ++t)
    threads.emplace_back([&w, &lanes, t] {
      NameThisThread("worker-" + std::to_string(t));
      omp_set_num_threads(1);
      lanes[size_t(t)] = FollowLane(w, t);
      // A lane that failed ends the worker: its control lane stops waiting, and the lead's
      // streams to it are cut when it exits, so the lead fails at once naming it.
      if (!lanes[size_t(t)].ok()) w.service->Close(lanes[size_t(t)]);
    });
  Status control = FollowControl(w);
  if (!control.ok()) w.service->Close(control);  // the lanes would wait for nothing
  for (auto& th : threads) th.join();
  for (const auto& s : lanes) ADAM_RETURN_IF_ERROR(s);
  return control;  // ~Worker shuts the exchange down
}

}  // namespace adam::trainer
