// The gRPC DataService over a DataSource (callback API; handlers only move data between the
// thread-safe DataSource and messages).
#pragma once

#include <prometheus/counter.h>

#include "adam/v1/data.grpc.pb.h"
#include "data_server/data_source.h"

namespace adam::data_server {

struct DataServiceMetrics {
  prometheus::Counter* batches = nullptr;        // adam_data_batches_served_total
  prometheus::Counter* images = nullptr;         // adam_data_images_served_total
  prometheus::Counter* epochs_closed = nullptr;  // adam_data_epochs_closed_total
};

// Moves a batch into its wire form.
void ToProto(BatchView&& b, adam::v1::Batch* out);

class DataService final : public adam::v1::DataService::CallbackService {
 public:
  DataService(DataSource* source, int classes, DataServiceMetrics metrics)
      : source_(source), classes_(classes), m_(metrics) {}

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx,
                                    const adam::v1::GetInfoRequest* req,
                                    adam::v1::DatasetInfo* resp) override;
  grpc::ServerUnaryReactor* GetBatch(grpc::CallbackServerContext* ctx,
                                     const adam::v1::GetBatchRequest* req,
                                     adam::v1::Batch* resp) override;
  grpc::ServerUnaryReactor* FinishEpoch(grpc::CallbackServerContext* ctx,
                                        const adam::v1::FinishEpochRequest* req,
                                        adam::v1::FinishEpochResponse* resp) override;
  grpc::ServerUnaryReactor* GetTestBatch(grpc::CallbackServerContext* ctx,
                                         const adam::v1::GetTestBatchRequest* req,
                                         adam::v1::Batch* resp) override;
  grpc::ServerUnaryReactor* StopJob(grpc::CallbackServerContext* ctx,
                                    const adam::v1::StopJobRequest* req,
                                    adam::v1::StopJobResponse* resp) override;

 private:
  DataSource* source_;
  int classes_;
  DataServiceMetrics m_;
};

}  // namespace adam::data_server
