// Partition: stages and slices of a split model; SplitWorker: one worker's forward and backward
// passes over its segments, with the boundaries traded through an Exchange.
#include "model/partition.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

namespace adam::model {

namespace {

bool HasParams(spec::LayerType t) {
  return t == spec::LayerType::kConv || t == spec::LayerType::kDense ||
         t == spec::LayerType::kSoftmax;
}

// The layers of each stage: a new stage starts at every layer with parameters but the first.
std::vector<std::pair<int, int>> StageLayers(const spec::ModelSpec& m) {
  std::vector<std::pair<int, int>> out;
  int first = 0;
  bool seen = false;
  for (int i = 0; i < int(m.layers.size()); ++i) {
    if (!HasParams(m.layers[size_t(i)].type)) continue;
    if (seen) {
      out.push_back({first, i});
      first = i;
    }
    seen = true;
  }
  out.push_back({first, int(m.layers.size())});
  return out;
}

// The stage's cut layer with its outputs reduced to `share`.
spec::LayerSpec CutLayer(spec::LayerSpec l, int share) {
  switch (l.type) {
    case spec::LayerType::kConv:
      l.maps = share;
      break;
    case spec::LayerType::kSoftmax:
      l.type = spec::LayerType::kDense;
      l.activation = spec::Activation::kNone;
      l.classes = 0;
      l.units = share;
      break;
    default:
      l.units = share;
      break;
  }
  return l;
}

}  // namespace

StatusOr<Partition> Partition::Make(const ModelLayout& whole, int workers) {
  if (workers < 1) return InvalidArgumentError("partition: workers must be >= 1");
  Partition p(whole, workers);
  p.per_worker_.resize(size_t(workers));
  const auto& layers = whole.spec().layers;
  for (auto [first, end] : StageLayers(whole.spec())) {
    PartitionStage st;
    st.first_layer = first;
    st.end_layer = end;
    st.in = whole.shapes()[size_t(first)].in;
    st.out = whole.shapes()[size_t(end - 1)].out;
    int cut = first;
    while (!HasParams(layers[size_t(cut)].type)) ++cut;
    st.cut_layer = cut;
    st.softmax = layers[size_t(cut)].type == spec::LayerType::kSoftmax;
    const int outputs = whole.shapes()[size_t(cut)].out.channels;
    if (outputs < workers)
      return InvalidArgumentError("spec.model.layers[" + std::to_string(cut) + "]: its " +
                                  std::to_string(outputs) + " outputs cannot be split across " +
                                  std::to_string(workers) + " model workers");
    for (int k = 0; k <= workers; ++k) st.bounds.push_back(int(int64_t{outputs} * k / workers));
    const LayerParams& wp = whole.params()[size_t(cut)];
    const int64_t per_output = wp.weights.count / outputs;
    for (int k = 0; k < workers; ++k) {
      Worker& w = p.per_worker_[size_t(k)];
      spec::ModelSpec seg{st.in, {}};
      for (int i = first; i < end; ++i)
        seg.layers.push_back(
            i == cut ? CutLayer(layers[size_t(i)], st.bounds[size_t(k) + 1] - st.bounds[size_t(k)])
                     : layers[size_t(i)]);
      ADAM_ASSIGN_OR_RETURN(ModelLayout sl, ModelLayout::Make(seg));
      const LayerParams& sp = sl.params()[size_t(cut - first)];
      const int64_t from = st.bounds[size_t(k)];
      w.offsets.push_back(w.num_params);
      w.ranges.push_back({wp.weights.offset + from * per_output, w.num_params + sp.weights.offset,
                          sp.weights.count});
      w.ranges.push_back({wp.bias.offset + from, w.num_params + sp.bias.offset, sp.bias.count});
      w.num_params += sl.num_params();
      w.segments.push_back(std::move(sl));
    }
    p.stages_.push_back(std::move(st));
  }
  return p;
}

const ModelLayout& Partition::segment(int worker, int stage) const {
  return per_worker_[size_t(worker)].segments[size_t(stage)];
}
int64_t Partition::stage_offset(int worker, int stage) const {
  return per_worker_[size_t(worker)].offsets[size_t(stage)];
}
int64_t Partition::num_params(int worker) const { return per_worker_[size_t(worker)].num_params; }
const std::vector<SliceRange>& Partition::ranges(int worker) const {
  return per_worker_[size_t(worker)].ranges;
}
int64_t Partition::slice_size(int stage, int worker) const {
  const PartitionStage& st = stages_[size_t(stage)];
  return int64_t{st.bounds[size_t(worker) + 1] - st.bounds[size_t(worker)]} * st.out.height *
         st.out.width;
}

void Partition::Extract(int worker, const float* whole, float* own) const {
  for (const auto& r : ranges(worker))
    std::memcpy(own + r.own, whole + r.whole, size_t(r.count) * sizeof(float));
}
void Partition::Insert(int worker, const float* own, float* whole) const {
  for (const auto& r : ranges(worker))
    std::memcpy(whole + r.whole, own + r.own, size_t(r.count) * sizeof(float));
}

void Partition::InitParams(int worker, uint64_t seed, float* own) const {
  // ModelLayout::InitParams draws one 64-bit number per weight, layer by layer.
  std::mt19937_64 rng(seed);
  const auto& r = ranges(worker);
  for (size_t s = 0; s < stages_.size(); ++s) {
    const size_t cut = size_t(stages_[s].cut_layer);
    const LayerParams& wp = whole_.params()[cut];
    const SliceRange& w = r[2 * s];
    const SliceRange& b = r[2 * s + 1];
    const float limit = whole_.InitLimit(cut);
    std::uniform_real_distribution<float> dist(-limit, limit);
    rng.discard(uint64_t(w.whole - wp.weights.offset));
    for (int64_t k = 0; k < w.count; ++k) own[w.own + k] = dist(rng);
    rng.discard(uint64_t(wp.weights.offset + wp.weights.count - w.whole - w.count));
    std::fill(own + b.own, own + b.own + b.count, 0.f);
  }
}

Mailbox::Mailbox(int senders) : queues_(size_t(senders)) {}

void Mailbox::Put(int from, uint32_t tag, std::vector<float> data) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queues_[size_t(from)].push_back({tag, std::move(data)});
  }
  cv_.notify_all();
}

Status Mailbox::Take(int from, uint32_t tag, std::span<float> out,
                     std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto& q = queues_[size_t(from)];
  if (!cv_.wait_for(lock, timeout, [&] { return !q.empty() || !closed_.ok(); }))
    return UnavailableError("model worker " + std::to_string(from) + " sent nothing for " +
                            std::to_string(timeout.count()) + " ms");
  if (q.empty()) return closed_;
  Message m = std::move(q.front());
  q.pop_front();
  // The message's buffer goes back for a later Put, whatever comes of it here.
  struct Recycle {
    std::vector<std::vector<float>>* spare;
    std::vector<float>* data;
    ~Recycle() {
      if (spare->size() < kMaxSpare) spare->push_back(std::move(*data));
    }
  } recycle{&spare_, &m.data};
  if (m.tag != tag)
    return InternalError("model worker " + std::to_string(from) + " is out of step: boundary " +
                         std::to_string(m.tag) + " came where " + std::to_string(tag) + " was due");
  if (m.data.size() != out.size())
    return InternalError("model worker " + std::to_string(from) + " sent " +
                         std::to_string(m.data.size()) + " floats for boundary " +
                         std::to_string(tag) + "; " + std::to_string(out.size()) + " expected");
  std::copy(m.data.begin(), m.data.end(), out.begin());
  return OkStatus();
}

std::vector<float> Mailbox::Spare(size_t n) {
  std::vector<float> v;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!spare_.empty()) {
      v = std::move(spare_.back());
      spare_.pop_back();
    }
  }
  v.resize(n);
  return v;
}

void Mailbox::Close(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.ok()) closed_ = why.ok() ? UnavailableError("model exchange closed") : why;
  }
  cv_.notify_all();
}

Status Exchange::AllToAll(uint32_t tag, const std::vector<std::span<const float>>& sends,
                          const std::vector<std::span<float>>& recvs, int self) {
  const int n = int(sends.size());
  for (int j = 0; j < n; ++j)
    if (j != self) ADAM_RETURN_IF_ERROR(Send(j, tag, sends[size_t(j)]));
  for (int j = 0; j < n; ++j)
    if (j != self) ADAM_RETURN_IF_ERROR(Receive(j, tag, recvs[size_t(j)]));
  return OkStatus();
}

class LocalExchangeGroup::Member : public Exchange {
 public:
  Member(LocalExchangeGroup* group, int self) : group_(group), self_(self) {}
  Status Send(int to, uint32_t tag, std::span<const float> data) override {
    Mailbox& box = *group_->mailboxes_[size_t(to)];
    std::vector<float> v = box.Spare(data.size());
    std::copy(data.begin(), data.end(), v.begin());
    box.Put(self_, tag, std::move(v));
    return OkStatus();
  }
  Status Receive(int from, uint32_t tag, std::span<float> data) override {
    return group_->mailboxes_[size_t(self_)]->Take(from, tag, data, std::chrono::seconds(60));
  }

 private:
  LocalExchangeGroup* group_;
  int self_;
};

LocalExchangeGroup::LocalExchangeGroup(int workers) {
  for (int k = 0; k < workers; ++k) {
    mailboxes_.push_back(std::make_unique<Mailbox>(workers));
    members_.push_back(std::make_unique<Member>(this, k));
  }
}

LocalExchangeGroup::~LocalExchangeGroup() = default;

Exchange* LocalExchangeGroup::exchange(int worker) { return members_[size_t(worker)].get(); }

struct SplitWorker::Impl {
  const Partition* part = nullptr;
  int self = 0;
  int batch = 0;
  int classes = 0;
  float label_smoothing = 0;  // StepRule's
  Exchange* exchange = nullptr;
  std::vector<std::unique_ptr<Network>> segments;  // per stage
  std::vector<std::vector<float>> recv;            // per peer, sized for the largest boundary
  std::vector<std::vector<float>> send;            // per peer, backward only
  std::vector<float> logits, probs;
  std::vector<uint8_t> labels;

  int workers() const { return part->workers(); }
  // Every worker's slice of stage s's output, assembled image by image into `whole`.
  Status Gather(int s, const float* mine, float* whole);
  // `grad` is this worker's gradient with respect to stage s's whole output; each worker's share
  // summed over every worker's lands in `mine`: SendScatter sends the peers their shares and
  // copies this worker's own into `mine`, ReceiveReduce adds the peers' shares of it.
  Status SendScatter(int s, const float* grad, float* mine);
  Status ReceiveReduce(int s, float* mine);
  void Softmax(int* predicted, float* loss);
};

Status SplitWorker::Impl::Gather(int s, const float* mine, float* whole) {
  const PartitionStage& st = part->stages()[size_t(s)];
  const int64_t area = int64_t{st.out.height} * st.out.width;
  const int64_t row = int64_t{st.out.channels} * area;
  const int k = workers();
  std::vector<std::span<const float>> sends(static_cast<size_t>(k));
  std::vector<std::span<float>> recvs(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) {
    sends[size_t(j)] = {mine, size_t(batch * part->slice_size(s, self))};
    recvs[size_t(j)] = {recv[size_t(j)].data(), size_t(batch * part->slice_size(s, j))};
  }
  if (k > 1) ADAM_RETURN_IF_ERROR(exchange->AllToAll(uint32_t(2 * s), sends, recvs, self));
  for (int j = 0; j < k; ++j) {
    const float* from = j == self ? mine : recvs[size_t(j)].data();
    const int64_t n_slice = part->slice_size(s, j);
    const int64_t at = st.bounds[size_t(j)] * area;
    for (int n = 0; n < batch; ++n)
      std::memcpy(whole + n * row + at, from + n * n_slice, size_t(n_slice) * sizeof(float));
  }
  return OkStatus();
}

Status SplitWorker::Impl::SendScatter(int s, const float* grad, float* mine) {
  const PartitionStage& st = part->stages()[size_t(s)];
  const int64_t area = int64_t{st.out.height} * st.out.width;
  const int64_t row = int64_t{st.out.channels} * area;
  const int k = workers();
  for (int j = 0; j < k; ++j) {
    const int64_t n_slice = part->slice_size(s, j);
    const int64_t at = st.bounds[size_t(j)] * area;
    float* to = j == self ? mine : send[size_t(j)].data();
    for (int n = 0; n < batch; ++n)
      std::memcpy(to + n * n_slice, grad + n * row + at, size_t(n_slice) * sizeof(float));
    if (j != self)
      ADAM_RETURN_IF_ERROR(exchange->Send(j, uint32_t(2 * s + 1),
                                          {send[size_t(j)].data(), size_t(batch * n_slice)}));
  }
  return OkStatus();
}

Status SplitWorker::Impl::ReceiveReduce(int s, float* mine) {
  const int64_t own = batch * part->slice_size(s, self);
  for (int j = 0; j < workers(); ++j) {
    if (j == self) continue;
    std::span<float> in(recv[size_t(j)].data(), size_t(own));
    ADAM_RETURN_IF_ERROR(exchange->Receive(j, uint32_t(2 * s + 1), in));
    for (int64_t i = 0; i < own; ++i) mine[i] += in[size_t(i)];
  }
  return OkStatus();
}

void SplitWorker::Impl::Softmax(int* predicted, float* loss) {
  for (int n = 0; n < batch; ++n) {
    const float* z = logits.data() + int64_t{n} * classes;
    float* p = probs.data() + int64_t{n} * classes;
    const float top = *std::max_element(z, z + classes);
    float sum = 0.f;
    for (int c = 0; c < classes; ++c) sum += p[c] = std::exp(z[c] - top);
    for (int c = 0; c < classes; ++c) p[c] /= sum;
    if (predicted) predicted[n] = int(std::max_element(p, p + classes) - p);
    if (loss) *loss += SmoothedCrossEntropy(p, classes, labels[size_t(n)], label_smoothing);
  }
}

SplitWorker::SplitWorker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SplitWorker::~SplitWorker() = default;

StatusOr<std::unique_ptr<SplitWorker>> SplitWorker::Create(const Partition& partition, int worker,
                                                           int batch, float* params, float* grads,
                                                           NetworkMode mode, Exchange* exchange,
                                                           StepRule rule) {
  if (worker < 0 || worker >= partition.workers())
    return InvalidArgumentError("split worker: no worker " + std::to_string(worker));
  if (partition.workers() > 1 && exchange == nullptr)
    return InvalidArgumentError("split worker: several workers need an exchange");
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.part = &partition;
  m.self = worker;
  m.batch = batch;
  m.classes = partition.whole().classes();
  m.exchange = exchange;
  m.label_smoothing = rule.label_smoothing;
  const bool train = mode != NetworkMode::kInference;
  int64_t largest = 0;
  for (int s = 0; s < int(partition.stages().size()); ++s) {
    const int64_t off = partition.stage_offset(worker, s);
    StepRule r = rule;
    if (r.velocity != nullptr) r.velocity += off;
    ADAM_ASSIGN_OR_RETURN(
        auto net, Network::CreateSegment(partition.segment(worker, s), batch, params + off,
                                         grads ? grads + off : nullptr, mode, train && s > 0, r));
    m.segments.push_back(std::move(net));
    for (int j = 0; j < partition.workers(); ++j)
      largest = std::max(largest, partition.slice_size(s, j));
  }
  m.recv.assign(size_t(partition.workers()), std::vector<float>(size_t(largest * batch)));
  if (train) m.send = m.recv;
  m.logits.resize(size_t(batch) * size_t(m.classes));
  m.probs.resize(m.logits.size());
  m.labels.resize(size_t(batch));
  return std::unique_ptr<SplitWorker>(new SplitWorker(std::move(impl)));
}

int SplitWorker::batch() const { return impl_->batch; }
float* SplitWorker::input() { return impl_->segments.front()->input(); }
void SplitWorker::SetInputFromBytes(const uint8_t* pixels) {
  impl_->segments.front()->SetInputFromBytes(pixels);
}
const float* SplitWorker::probabilities() const { return impl_->probs.data(); }

StatusOr<float> SplitWorker::Forward(const uint8_t* labels, int* predicted) {
  Impl& m = *impl_;
  const int last = int(m.segments.size()) - 1;
  for (int s = 0; s <= last; ++s) {
    m.segments[size_t(s)]->Forward(nullptr, nullptr);
    float* next = s == last ? m.logits.data() : m.segments[size_t(s) + 1]->input();
    ADAM_RETURN_IF_ERROR(m.Gather(s, m.segments[size_t(s)]->output(), next));
  }
  float loss = 0.f;
  if (labels) std::copy(labels, labels + m.batch, m.labels.begin());
  m.Softmax(predicted, labels ? &loss : nullptr);
  return loss;
}

Status SplitWorker::Backward(float lr) {
  Impl& m = *impl_;
  const int last = int(m.segments.size()) - 1;
  const auto& bounds = m.part->stages()[size_t(last)].bounds;
  const int lo = bounds[size_t(m.self)], hi = bounds[size_t(m.self) + 1];
  // d(mean cross-entropy)/d(logits) = (softmax - target) / batch, for this worker's classes.
  float* d = m.segments[size_t(last)]->output_gradient();
  const float inv = 1.f / float(m.batch);
  for (int n = 0; n < m.batch; ++n)
    for (int c = lo; c < hi; ++c)
      d[int64_t{n} * (hi - lo) + (c - lo)] =
          (m.probs[size_t(int64_t{n} * m.classes + c)] -
           SmoothedTarget(c, m.labels[size_t(n)], m.classes, m.label_smoothing)) *
          inv;
  // Each stage's input gradient goes to the peers before its weights' half runs, so the
  // reduce-scatter's messages travel while this worker computes its weight gradients and step.
  for (int s = last; s >= 0; --s) {
    Network& seg = *m.segments[size_t(s)];
    if (s == 0) {
      seg.Backward(lr);
      break;
    }
    float* below = m.segments[size_t(s) - 1]->output_gradient();
    seg.BackwardData();
    ADAM_RETURN_IF_ERROR(m.SendScatter(s - 1, seg.input_gradient(), below));
    seg.BackwardWeights(lr);
    ADAM_RETURN_IF_ERROR(m.ReceiveReduce(s - 1, below));
  }
  return OkStatus();
}

}  // namespace adam::model
