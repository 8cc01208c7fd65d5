// Trainer: the test set fetched, the global model evaluated (overall and per class), the done
// event and the model written as ONNX.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <vector>

#include "core/role_events.h"
#include "core/version.h"
#include "model/onnx.h"
#include "trainer/trainer_impl.h"

namespace adam::trainer {

Status Trainer::Impl::FetchTestSet() {
  for (uint32_t offset = 0;;) {
    adam::v1::GetTestBatchRequest req;
    req.set_offset(offset);
    req.set_max_count(4096);
    adam::v1::Batch b;
    ADAM_RETURN_IF_ERROR(data->GetTestBatch(req, &b));
    if (b.pixels().size() != size_t(b.count()) * size_t(layout->input_size()) ||
        b.labels().size() != b.count())
      return DataLossError("data server sent a test batch whose sizes do not match its count");
    test_pixels += b.pixels();
    test_labels += b.labels();
    offset += b.count();
    if (b.end_of_share() || b.count() == 0) break;
  }
  test_count = int(test_labels.size());
  return OkStatus();
}

double Trainer::Impl::Evaluate() {
  std::vector<float> global;
  if (replica->SyncsSlices()) {
    // The slices are the workers': the global model, whole, from the servers.
    global.resize(size_t(layout->num_params()));
    if (Status st = ps->Pull(global.data(), 0); !st.ok()) {
      Fail(st);
      return 0;
    }
  } else {
    MutexLock lock(sync_mu);
    global = slices->w0();
  }
  const auto* labels = reinterpret_cast<const uint8_t*>(test_labels.data());
  std::vector<int> predicted(size_t(test_count), -1);
  const double acc =
      replica->Evaluate(global.data(), reinterpret_cast<const uint8_t*>(test_pixels.data()), labels,
                        test_count, predicted.data());
  const size_t classes = size_t(layout->classes());
  class_images.assign(classes, 0);
  class_correct.assign(classes, 0);
  for (int i = 0; i < test_count; ++i)
    if (labels[i] < classes) {
      ++class_images[labels[i]];
      class_correct[labels[i]] += predicted[size_t(i)] == labels[i];
    }
  if (!opt.model_out.empty()) {
    evaluated = std::move(global);
    evaluated_accuracy = acc;
  }
  return acc;
}

void Trainer::Impl::EmitDone(const TrainerResult& result, Clock::TimePoint start,
                             bool evaluates) const {
  events::Emit(events::Done{.trainer = opt.index,
                            .epochs = result.epochs,
                            .images_total = result.images,
                            .seconds = result.seconds,
                            .total_seconds = opt.clock->SecondsSince(start),
                            .test_accuracy = result.test_accuracy,
                            .push_bytes = result.push_bytes,
                            .pull_bytes = result.pull_bytes,
                            .classes = evaluates ? PerClass() : std::vector<events::ClassCount>{}});
}

std::vector<events::ClassCount> Trainer::Impl::PerClass() const {
  std::vector<events::ClassCount> out;
  for (size_t c = 0; c < class_images.size(); ++c)
    out.push_back({.name = c < class_names.size() ? class_names[c] : std::to_string(c),
                   .images = class_images[c],
                   .correct = class_correct[c]});
  return out;
}

Status Trainer::Impl::WriteModel(int epochs) {
  if (opt.model_out.empty() || evaluated.empty()) return OkStatus();
  char doc[160];
  if (epochs >= 0)
    std::snprintf(doc, sizeof doc, "trained by Adam: %d epochs, test accuracy %.4f", epochs,
                  evaluated_accuracy);
  else
    std::snprintf(doc, sizeof doc, "trained by Adam: the final model, test accuracy %.4f",
                  evaluated_accuracy);
  model::OnnxInfo info{job.name, kAdamVersion, doc, class_names, {}};
  if (job.dataset.format == "folder") info.fit = {job.dataset.fit, job.dataset.augment.crop};
  ADAM_RETURN_IF_ERROR(model::WriteOnnxFile(opt.model_out, *layout, evaluated.data(), info));
  spdlog::info("the model (test accuracy {:.2f}%) is in {}", 100 * evaluated_accuracy,
               opt.model_out);
  events::Emit(events::ModelWritten{
      .trainer = opt.index, .path = opt.model_out, .test_accuracy = evaluated_accuracy});
  return OkStatus();
}

}  // namespace adam::trainer
