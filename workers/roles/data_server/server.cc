#include "data_server/server.h"

#include <spdlog/spdlog.h>

namespace adam::data_server {

DataServer::DataServer(std::unique_ptr<DataSource> source, int classes,
                       spec::DataServerOptions options, RoleProcess process)
    : source_(std::move(source)),
      classes_(classes),
      options_(std::move(options)),
      process_(std::move(process)) {}

Status DataServer::Start() {
  const std::string host = options_.listen.substr(0, options_.listen.rfind(':'));
  ADAM_ASSIGN_OR_RETURN(metrics_,
                        metrics::MetricsServer::Start(host, options_.common.metrics_port));
  auto& reg = *metrics_;
  reg.Gauge("adam_data_cache_images", "Augmented training images held in memory")
      .Set(double(source_->variants()) * source_->train_count());
  DataServiceMetrics dm{
      &reg.Counter("adam_data_batches_served_total", "Training batches served"),
      &reg.Counter("adam_data_images_served_total", "Training images served"),
      &reg.Counter("adam_data_epochs_closed_total", "Epochs closed by the trainer quorum")};
  service_ = std::make_unique<DataService>(source_.get(), classes_, dm);
  hits_ = &reg.Counter("adam_data_order_hits_total",
                       "Training batches served from an epoch shuffle that was ready");
  misses_ = &reg.Counter("adam_data_order_misses_total",
                         "Training batches that waited for their epoch's shuffle");
  depth_ = &reg.Gauge("adam_data_prefetch_depth",
                      "Epoch shuffles ready beyond the newest epoch asked for");
  trainers_ = &reg.Gauge("adam_data_trainers", "Trainers the data server shares epochs among");
  trainers_->Set(source_->trainers());
  sampler_.emplace(std::chrono::milliseconds(1000), [this] { Sample(); });
  // Trainers scaled on a cluster: the job's manifest (its ConfigMap) has the new count; epochs
  // not yet started are shared among it.
  follower_ = spec::FollowTrainerCount(options_.common.job, source_->trainers(), [this](int m) {
    source_->SetTrainers(m);
    trainers_->Set(m);
  });
  ADAM_ASSIGN_OR_RETURN(
      listeners_, net::Listeners::Start(*process_.transport, options_.listen, {service_.get()}));
  return OkStatus();
}

void DataServer::Sample() {
  const uint64_t h = source_->order_hits(), m = source_->order_misses();
  hits_->Increment(double(h - hits_seen_));
  misses_->Increment(double(m - misses_seen_));
  hits_seen_ = h;
  misses_seen_ = m;
  depth_->Set(source_->prefetched_epochs());
}

void DataServer::Stop() {
  if (listeners_) listeners_->Shutdown();
  follower_.reset();
  if (sampler_) sampler_->Stop();
}

events::Ready DataServer::ReadyEvent() const {
  return listeners_->ReadyEvent(metrics_ ? metrics_->port() : 0);
}

}  // namespace adam::data_server
