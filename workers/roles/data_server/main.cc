// The data server process.
#include "data_server/main.h"

#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "core/exit_codes.h"
#include "core/periodic.h"
#include "core/signals.h"
#include "core/status.h"
#include "data/augment.h"
#include "data/image_folder.h"
#include "data_server/data_service.h"
#include "metrics/metrics.h"
#include "net/grpc.h"
#include "spec/manifest_watch.h"

namespace adam::data_server {

namespace {

// A data file that is corrupt, truncated or does not fit the model is refused input (exit 2: no
// restart can fix it); one that cannot be opened may yet appear (a volume still mounting): 1.
int RefusedInputExit(const Status& s) {
  return s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kInvalidArgument
             ? kExitInvalid
             : kExitFailed;
}

// spec.dataset.format folder: the training folder, then the test folder or the held-out part.
// The class folders must be the model's classes, and the test folder's the training folder's.
Status LoadFolders(const spec::AdamJob& job, int classes, data::Dataset* train,
                   data::Dataset* test) {
  const auto& d = job.dataset;
  data::FolderOptions fo;
  // With augment.crop the images are fitted larger: the cache crops windows of the input's size.
  const int margin = d.augment.crop;
  fo.channels = job.model.input.channels;
  fo.height = job.model.input.height + 2 * margin;
  fo.width = job.model.input.width + 2 * margin;
  fo.fit = d.fit == "stretch" ? data::Fit::kStretch : data::Fit::kCrop;
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
    ADAM_ASSIGN_OR_RETURN(data::FolderSet set, data::LoadImageFolder(dir, fo));
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
  *test = data::CentreCrop(te.data, margin);
  return OkStatus();
}

// Serves `source` with its metrics until SIGINT/SIGTERM, following the job's trainer count.
int Serve(DataSource* source, int classes, const MainOptions& options) {
  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  auto metrics = metrics::MetricsServer::Start(host, options.metrics_port);
  if (!metrics.ok()) {
    spdlog::error("{}", metrics.status().message());
    return 1;
  }
  auto& reg = **metrics;
  reg.Gauge("adam_data_cache_images", "Augmented training images held in memory")
      .Set(double(source->variants()) * source->train_count());
  DataServiceMetrics dm{
      &reg.Counter("adam_data_batches_served_total", "Training batches served"),
      &reg.Counter("adam_data_images_served_total", "Training images served"),
      &reg.Counter("adam_data_epochs_closed_total", "Epochs closed by the trainer quorum")};
  DataService service(source, classes, dm);
  auto& hits = reg.Counter("adam_data_order_hits_total",
                           "Training batches served from an epoch shuffle that was ready");
  auto& misses = reg.Counter("adam_data_order_misses_total",
                             "Training batches that waited for their epoch's shuffle");
  auto& depth = reg.Gauge("adam_data_prefetch_depth",
                          "Epoch shuffles ready beyond the newest epoch asked for");
  auto& trainers = reg.Gauge("adam_data_trainers", "Trainers the data server shares epochs among");
  trainers.Set(source->trainers());
  uint64_t hits_seen = 0, misses_seen = 0;
  Periodic sampler(std::chrono::milliseconds(1000), [&] {
    const uint64_t h = source->order_hits(), m = source->order_misses();
    hits.Increment(double(h - hits_seen));
    misses.Increment(double(m - misses_seen));
    hits_seen = h;
    misses_seen = m;
    depth.Set(source->prefetched_epochs());
  });
  // Trainers scaled on a cluster: the job's manifest (its ConfigMap) has the new count; epochs
  // not yet started are shared among it.
  const auto follower = spec::FollowTrainerCount(options.job_path, source->trainers(), [&](int m) {
    source->SetTrainers(m);
    trainers.Set(m);
  });
  return net::Serve(*options.transport, options.listen, {&service}, reg.port());
}

}  // namespace

int Main(const spec::AdamJob& job, const MainOptions& options) {
  BlockTerminationSignals();
  const auto t0 = std::chrono::steady_clock::now();
  const int classes = spec::NumClasses(job.model);
  const auto& in = job.model.input;
  StatusOr<data::Dataset> train = data::Dataset{}, test = data::Dataset{};
  if (job.dataset.format == "folder") {
    if (Status st = LoadFolders(job, classes, &*train, &*test); !st.ok()) {
      spdlog::error("data set: {}", st.message());
      return RefusedInputExit(st);
    }
  } else {
    spdlog::info("loading {}", job.dataset.train.images);
    train = data::LoadIdxDataset(job.dataset.train.images, job.dataset.train.labels, classes,
                                 in.channels, in.height, in.width);
    if (!train.ok()) {
      spdlog::error("training set: {}", train.status().message());
      return RefusedInputExit(train.status());
    }
    test = data::LoadIdxDataset(job.dataset.test.images, job.dataset.test.labels, classes,
                                in.channels, in.height, in.width);
    if (!test.ok()) {
      spdlog::error("test set: {}", test.status().message());
      return RefusedInputExit(test.status());
    }
  }
  spdlog::info("loaded {} training and {} test images of {}x{}x{}", train->count, test->count,
               train->channels, train->height, train->width);
  int last_pct = -1;
  auto cache = std::make_unique<data::AugmentedCache>(
      *train, job.dataset.augment, job.training.seed, [&](int64_t done, int64_t total) {
        const int pct = total > 0 ? int(100 * done / total) : 100;
        if (pct / 25 != last_pct / 25) {
          last_pct = pct;
          spdlog::info("augmenting: {}% of {} images", pct, total);
        }
      });
  spdlog::info("augmentation cache: {} variants x {} images ({:.1f} MB) in {:.2f} s",
               cache->variants(), cache->count(),
               double(cache->variants()) * cache->count() * cache->image_bytes() / 1e6,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

  DataSourceOptions so;
  so.trainers = job.roles.trainer.replicas;
  so.quorum = job.training.epoch_quorum;
  so.batch_images = options.batch_images;
  so.seed = job.training.seed;
  DataSource source(std::move(cache), std::move(train->labels), std::move(*test), so);

  return Serve(&source, classes, options);
}

}  // namespace adam::data_server
