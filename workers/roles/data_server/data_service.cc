// DataService handlers.
#include "data_server/data_service.h"

namespace adam::data_server {

void ToProto(BatchView&& b, adam::v1::Batch* out) {
  out->set_count(uint32_t(b.count));
  out->set_pixels(std::move(b.pixels));
  out->set_labels(std::move(b.labels));
  out->set_end_of_share(b.end_of_share);
  out->set_epoch_closed(b.epoch_closed);
  out->set_job_stopped(b.job_stopped);
}

grpc::ServerUnaryReactor* DataService::GetInfo(grpc::CallbackServerContext* ctx,
                                               const adam::v1::GetInfoRequest*,
                                               adam::v1::DatasetInfo* resp) {
  const auto& t = source_->test();
  resp->set_train_count(uint32_t(source_->train_count()));
  resp->set_test_count(uint32_t(source_->test_count()));
  resp->set_channels(uint32_t(t.channels));
  resp->set_height(uint32_t(t.height));
  resp->set_width(uint32_t(t.width));
  resp->set_classes(uint32_t(classes_));
  resp->set_trainers(uint32_t(source_->trainers()));
  resp->set_batch_images(uint32_t(source_->options().batch_images));
  resp->set_variants(uint32_t(source_->variants()));
  for (const auto& name : source_->options().class_names) resp->add_class_names(name);
  auto* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerUnaryReactor* DataService::GetBatch(grpc::CallbackServerContext* ctx,
                                                const adam::v1::GetBatchRequest* req,
                                                adam::v1::Batch* resp) {
  auto* r = ctx->DefaultReactor();
  BatchView b;
  Status st = source_->GetBatch(int(req->trainer()), req->epoch(), req->batch_index(), &b);
  if (!st.ok()) {
    r->Finish({grpc::StatusCode::INVALID_ARGUMENT, st.message()});
    return r;
  }
  if (m_.batches && b.count > 0) m_.batches->Increment();
  if (m_.images) m_.images->Increment(b.count);
  ToProto(std::move(b), resp);
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerUnaryReactor* DataService::FinishEpoch(grpc::CallbackServerContext* ctx,
                                                   const adam::v1::FinishEpochRequest* req,
                                                   adam::v1::FinishEpochResponse* resp) {
  auto* r = ctx->DefaultReactor();
  auto res = source_->FinishEpoch(int(req->trainer()), req->epoch());
  if (!res.ok()) {
    r->Finish({grpc::StatusCode::INVALID_ARGUMENT, res.status().message()});
    return r;
  }
  if (m_.epochs_closed && res->closed_now) m_.epochs_closed->Increment();
  resp->set_finished(uint32_t(res->finished));
  resp->set_epoch_closed(res->closed);
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerUnaryReactor* DataService::GetTestBatch(grpc::CallbackServerContext* ctx,
                                                    const adam::v1::GetTestBatchRequest* req,
                                                    adam::v1::Batch* resp) {
  BatchView b;
  source_->GetTestBatch(req->offset(), std::min<uint32_t>(req->max_count(), 1u << 16), &b);
  ToProto(std::move(b), resp);
  auto* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerUnaryReactor* DataService::StopJob(grpc::CallbackServerContext* ctx,
                                               const adam::v1::StopJobRequest*,
                                               adam::v1::StopJobResponse*) {
  source_->Stop();
  auto* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

}  // namespace adam::data_server
