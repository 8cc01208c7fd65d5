// The data server process.
#include "data_server/main.h"

#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "core/clock.h"
#include "core/exit_codes.h"
#include "core/periodic.h"
#include "core/role.h"
#include "core/signals.h"
#include "core/status.h"
#include "data/augment.h"
#include "data/image_folder.h"
#include "data_server/data_service.h"
#include "data_server/server.h"
#include "metrics/metrics.h"
#include "net/grpc.h"
#include "spec/manifest_watch.h"

namespace adam::data_server {

namespace {

// Images per batch a trainer asks for.
constexpr int kBatchImages = 256;

// A data file that is corrupt, truncated or does not fit the model is refused input (exit 2: no
// restart can fix it); one that cannot be opened may yet appear (a volume still mounting): 1.
int RefusedInputExit(const Status& s) {
  return s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kInvalidArgument
             ? kExitInvalid
             : kExitFailed;
}

// spec.dataset.format folder: the training folder, then the test folder or the held-out part.
// The class folders must be the model's classes, and the test folder's the training folder's.
Status LoadFolders(const spec::AdamJob& job, int classes, data::Dataset* train, data::Dataset* test,
                   std::vector<std::string>* class_names) {
  const auto& d = job.dataset;
  // With augment.crop the images are fitted larger: the cache crops windows of the input's size,
  // the test set is the centre windows (data::LoadTestFolder, as `adam predict` fits images).
  const int margin = d.augment.crop;
  const auto& in = job.model.input;
  const data::InputFit fit{in.channels, in.height, in.width, data::FitNamed(d.fit), margin};
  data::FolderOptions fo = fit.Enlarged();
  fo.max_corrupt = d.max_corrupt;
  auto load = [&](const std::string& dir, const char* what) -> StatusOr<data::FolderSet> {
    spdlog::info("decoding the {} folder {}", what, dir);
    int last_pct = -1;
    fo.progress = [&](int64_t done, int64_t total) {
      const int pct = total > 0 ? int(100 * done / total) : 100;
      if (pct / 10 != last_pct / 10) {
        last_pct = pct;
        spdlog::info("decoding: {}% of {} images", pct, total);
      }
    };
    ADAM_ASSIGN_OR_RETURN(data::FolderSet set, std::string_view(what) == "test"
                                                   ? data::LoadTestFolder(dir, fit, fo)
                                                   : data::LoadImageFolder(dir, fo));
    for (const auto& s : set.skipped) spdlog::warn("skipped {}", s);
    if (!set.skipped.empty())
      spdlog::warn("{}: skipped {} files that could not be decoded (spec.dataset.maxCorrupt {})",
                   dir, set.skipped.size(), d.max_corrupt);
    if (set.other_files > 0)
      spdlog::info("{}: ignored {} files that are not .png, .jpg or .jpeg", dir, set.other_files);
    return set;
  };
  ADAM_ASSIGN_OR_RETURN(data::FolderSet tr, load(d.train.folder, "training"));
  if (int(tr.classes.size()) != classes) {
    std::string names;
    for (const auto& c : tr.classes) names += (names.empty() ? "" : ", ") + c;
    return InvalidArgumentError(d.train.folder + " has " + std::to_string(tr.classes.size()) +
                                " class folders (" + names + ") but the model's softmax has " +
                                std::to_string(classes) + " classes");
  }
  spdlog::info("classes: {}", fmt::join(tr.classes, ", "));
  *class_names = tr.classes;
  *train = std::move(tr.data);
  if (d.held_out > 0) {
    *test = data::CentreCrop(data::SplitHeldOut(train, d.held_out, job.training.seed), margin);
    spdlog::info("held out {} of {} images as the test set (spec.dataset.heldOut {})", test->count,
                 test->count + train->count, d.held_out);
    return OkStatus();
  }
  ADAM_ASSIGN_OR_RETURN(data::FolderSet te, load(d.test.folder, "test"));
  if (te.classes != tr.classes)
    return InvalidArgumentError(
        d.test.folder + "'s class folders (" + fmt::format("{}", fmt::join(te.classes, ", ")) +
        ") are not the training folder's (" + fmt::format("{}", fmt::join(tr.classes, ", ")) + ")");
  *test = std::move(te.data);
  return OkStatus();
}

// The job's data set (IDX files or image folders), augmented into its cache: what the data
// server serves. A refused input is kDataLoss or kInvalidArgument (RefusedInputExit).
StatusOr<std::unique_ptr<DataSource>> LoadDataSource(const spec::AdamJob& job, int batch_images,
                                                     const Clock& clock) {
  const auto t0 = clock.Now();
  const int classes = spec::NumClasses(job.model);
  const auto& in = job.model.input;
  data::Dataset train, test;
  std::vector<std::string> class_names;
  if (job.dataset.format == "folder") {
    ADAM_RETURN_IF_ERROR(
        LoadFolders(job, classes, &train, &test, &class_names).Annotate("data set"));
  } else {
    class_names = job.dataset.class_names;
    spdlog::info("loading {}", job.dataset.train.images);
    auto tr = data::LoadIdxDataset(job.dataset.train.images, job.dataset.train.labels, classes,
                                   in.channels, in.height, in.width);
    if (!tr.ok()) return tr.status().Annotate("training set");
    auto te = data::LoadIdxDataset(job.dataset.test.images, job.dataset.test.labels, classes,
                                   in.channels, in.height, in.width);
    if (!te.ok()) return te.status().Annotate("test set");
    train = std::move(*tr);
    test = std::move(*te);
  }
  spdlog::info("loaded {} training and {} test images of {}x{}x{}", train.count, test.count,
               train.channels, train.height, train.width);
  int last_pct = -1;
  auto cache = std::make_unique<data::AugmentedCache>(
      train, job.dataset.augment, job.training.seed, [&](int64_t done, int64_t total) {
        const int pct = total > 0 ? int(100 * done / total) : 100;
        if (pct / 25 != last_pct / 25) {
          last_pct = pct;
          spdlog::info("augmenting: {}% of {} images", pct, total);
        }
      });
  spdlog::info("augmentation cache: {} variants x {} images ({:.1f} MB) in {:.2f} s",
               cache->variants(), cache->count(),
               double(cache->variants()) * cache->count() * cache->image_bytes() / 1e6,
               clock.SecondsSince(t0));
  DataSourceOptions so;
  so.trainers = job.roles.trainer.replicas;
  so.quorum = job.training.epoch_quorum;
  so.batch_images = batch_images;
  so.seed = job.training.seed;
  so.class_names = std::move(class_names);
  return std::make_unique<DataSource>(std::move(cache), std::move(train.labels), std::move(test),
                                      so);
}

}  // namespace

int Main(const spec::AdamJob& job, const spec::DataServerOptions& options,
         const RoleProcess& process) {
  BlockTerminationSignals();
  auto source = LoadDataSource(job, kBatchImages, *process.clock);
  if (!source.ok()) {
    spdlog::error("{}", source.status().message());
    return RefusedInputExit(source.status());
  }
  DataServer server(std::move(*source), spec::NumClasses(job.model), options, process);
  return ServeUntilSignalled(server);
}

}  // namespace adam::data_server
