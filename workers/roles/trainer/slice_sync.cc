#include "trainer/slice_sync.h"

#include "update/codec.h"

namespace adam::trainer {

SliceSync::SliceSync(ParamServerClient* ps, std::vector<float> initial,
                     const spec::CommunicationSpec& communication,
                     std::vector<std::pair<int64_t, int64_t>> spans)
    : ps_(ps), communication_(communication), spans_(std::move(spans)), w0_(std::move(initial)) {
  const size_t n = w0_.size();
  snapshot_.resize(n);
  delta_.resize(n);
  pulled_.resize(n);
  if (communication_.filter > 0 || communication_.float16) {
    pending_.assign(n, 0.f);
    sent_.assign(n, 0.f);
  }
}

StatusOr<int64_t> SliceSync::Push(const std::function<Status(float*)>& read,
                                  std::vector<DenseBatch> dense, uint64_t clock) {
  ADAM_RETURN_IF_ERROR(read(snapshot_.data()));  // the training threads keep going meanwhile
  const size_t n = w0_.size();
  for (size_t i = 0; i < n; ++i) delta_[i] = snapshot_[i] - w0_[i];
  PushArgs args;
  args.dense = std::move(dense);
  args.delta = delta_.data();
  args.clock = clock;
  int64_t held = 0;
  if (!pending_.empty()) {
    for (const auto& [begin, end] : spans_) {
      for (int64_t i = begin; i < end; ++i) pending_[size_t(i)] += delta_[size_t(i)];
      held += update::TakeSignificant(pending_.data() + begin, sent_.data() + begin, end - begin,
                                      float(communication_.filter), communication_.float16)
                  .held;
    }
    args.delta = sent_.data();  // zero outside the spans, which the push does not read
  }
  ADAM_RETURN_IF_ERROR(ps_->Push(args));
  return held;
}

Status SliceSync::Pull(const std::function<Status(const float*)>& add, uint64_t clock) {
  ADAM_RETURN_IF_ERROR(ps_->Pull(pulled_.data(), clock));
  const size_t n = w0_.size();
  for (size_t i = 0; i < n; ++i) delta_[i] = pulled_[i] - snapshot_[i];
  ADAM_RETURN_IF_ERROR(add(delta_.data()));
  w0_.swap(pulled_);
  return OkStatus();
}

}  // namespace adam::trainer
