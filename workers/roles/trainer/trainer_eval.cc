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

Status Trainer::Impl::FetchTestSet() { return test.Fetch(*data, layout->input_size()); }

double Trainer::Impl::Evaluate() {
  std::vector<float> global;
  if (replica->slice_syncer()) {
    // The slices are the workers': the global model, whole, from the servers.
    global.resize(size_t(layout->num_params()));
    if (Status st = ps->Pull(global.data(), 0); !st.ok()) {
      Fail(st);
      return 0;
    }
  } else {
    global = sync->Weights();
  }
  std::vector<int> predicted(size_t(test.count()), -1);
  const double acc = replica->Evaluate(global.data(), test.pixels(), test.labels(), test.count(),
                                       predicted.data());
  // The weights are kept only for the model file.
  test.Record(predicted, layout->classes(), acc,
              opt.model_out.empty() ? std::vector<float>{} : std::move(global));
  return acc;
}

void Trainer::Impl::EmitDone(const TrainerResult& result, Clock::TimePoint start,
                             bool evaluates) const {
  events::Emit(
      events::Done{.trainer = opt.index,
                   .epochs = result.epochs,
                   .images_total = result.images,
                   .seconds = result.seconds,
                   .total_seconds = opt.clock->SecondsSince(start),
                   .test_accuracy = result.test_accuracy,
                   .push_bytes = result.push_bytes,
                   .pull_bytes = result.pull_bytes,
                   .classes = evaluates ? test.PerClass() : std::vector<events::ClassCount>{}});
}

Status Trainer::Impl::WriteModel(int epochs) {
  if (opt.model_out.empty() || test.weights().empty()) return OkStatus();
  const double evaluated_accuracy = test.weights_accuracy();
  char doc[160];
  if (epochs >= 0)
    std::snprintf(doc, sizeof doc, "trained by Adam: %d epochs, test accuracy %.4f", epochs,
                  evaluated_accuracy);
  else
    std::snprintf(doc, sizeof doc, "trained by Adam: the final model, test accuracy %.4f",
                  evaluated_accuracy);
  model::OnnxInfo info{job.name, kAdamVersion, doc, test.class_names(), {}};
  if (job.dataset.format == "folder") info.fit = {job.dataset.fit, job.dataset.augment.crop};
  ADAM_RETURN_IF_ERROR(model::WriteOnnxFile(opt.model_out, *layout, test.weights().data(), info));
  spdlog::info("the model (test accuracy {:.2f}%) is in {}", 100 * evaluated_accuracy,
               opt.model_out);
  events::Emit(events::ModelWritten{
      .trainer = opt.index, .path = opt.model_out, .test_accuracy = evaluated_accuracy});
  return OkStatus();
}

}  // namespace adam::trainer
