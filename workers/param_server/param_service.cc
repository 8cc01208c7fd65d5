// ParameterService handlers: validate the whole request, then apply.
#include "param_server/param_service.h"

#include <algorithm>
#include <cstring>

namespace adam::ps {
namespace {

grpc::Status ToGrpc(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound: return {grpc::StatusCode::NOT_FOUND, s.message()};
    case StatusCode::kInvalidArgument: return {grpc::StatusCode::INVALID_ARGUMENT, s.message()};
    default: return {grpc::StatusCode::INTERNAL, s.message()};
  }
}

}  // namespace

grpc::ServerUnaryReactor* ParamService::Push(grpc::CallbackServerContext* ctx,
                                             const adam::v1::PushRequest* req,
                                             adam::v1::PushResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  // All or nothing: a request with one bad shard applies none.
  for (const auto& d : req->deltas()) {
    if (d.values().size() % sizeof(float) != 0) {
      reactor->Finish({grpc::StatusCode::INVALID_ARGUMENT,
                       "shard " + std::to_string(d.shard()) + ": values has " +
                           std::to_string(d.values().size()) + " bytes, not a multiple of 4"});
      return reactor;
    }
    Status st = store_->CheckDelta(d.shard(), int64_t(d.values().size() / sizeof(float)));
    if (!st.ok()) {
      reactor->Finish(ToGrpc(st));
      return reactor;
    }
  }
  size_t bytes = 0;
  std::vector<float> aligned;
  for (const auto& d : req->deltas()) {
    const int64_t n = int64_t(d.values().size() / sizeof(float));
    // Protobuf strings are not guaranteed float-aligned: copy when they are not.
    const float* delta = reinterpret_cast<const float*>(d.values().data());
    if (reinterpret_cast<uintptr_t>(delta) % alignof(float) != 0) {
      aligned.resize(size_t(n));
      std::memcpy(aligned.data(), d.values().data(), d.values().size());
      delta = aligned.data();
    }
    Status st = store_->Add(d.shard(), delta, n);
    if (!st.ok()) {  // cannot happen after the check above; report rather than crash
      reactor->Finish(ToGrpc(st));
      return reactor;
    }
    bytes += d.values().size();
  }
  if (m_.pushes) m_.pushes->Increment();
  if (m_.push_bytes) m_.push_bytes->Increment(double(bytes));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* ParamService::Pull(grpc::CallbackServerContext* ctx,
                                             const adam::v1::PullRequest* req,
                                             adam::v1::PullResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  std::vector<uint32_t> ids(req->shards().begin(), req->shards().end());
  if (ids.empty()) ids = store_->shard_ids();
  // A repeated id would let one small request demand an unbounded response: refuse it.
  std::vector<uint32_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  if (auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end()) {
    reactor->Finish({grpc::StatusCode::INVALID_ARGUMENT,
                     "shard " + std::to_string(*dup) + " is requested more than once"});
    return reactor;
  }
  size_t bytes = 0;
  for (uint32_t id : ids) {
    const int64_t n = store_->ShardSize(id);
    if (n < 0) {
      reactor->Finish(
          {grpc::StatusCode::NOT_FOUND, "shard " + std::to_string(id) + " is not held here"});
      return reactor;
    }
    auto* out = resp->add_shards();
    out->set_shard(id);
    std::string* values = out->mutable_values();
    values->resize(size_t(n) * sizeof(float));
    auto version = store_->Read(id, reinterpret_cast<float*>(values->data()), n);
    if (!version.ok()) {
      reactor->Finish(ToGrpc(version.status()));
      return reactor;
    }
    out->set_version(*version);
    bytes += values->size();
  }
  if (m_.pull_bytes) m_.pull_bytes->Increment(double(bytes));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace adam::ps
