// ParameterService handlers: check the whole request, queue it to the shard workers, answer from
// the worker that applies its last part.
#include "param_server/param_service.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <unordered_map>

#include "core/role_events.h"
#include "net/grpc.h"
#include "update/codec.h"

namespace adam::ps {
namespace {

// Images one dense update may carry: far beyond any pushEvery, small enough to bound a request.
constexpr uint32_t kMaxDenseImages = 1 << 16;

grpc::Status Invalid(const std::string& message) {
  return {grpc::StatusCode::INVALID_ARGUMENT, message};
}

// The floats of a bytes field: in place when aligned, else copied into a pooled buffer.
const float* Floats(const std::string& bytes, BufferPool* pool,
                    std::vector<BufferPool::Buffer>* copies) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(float) == 0)
    return reinterpret_cast<const float*>(bytes.data());
  copies->push_back(pool->Get(bytes.size()));
  std::memcpy(copies->back().data(), bytes.data(), bytes.size());
  return copies->back().as<float>();
}

// One push in flight: its Ops and their payload copies, freed when the last Op is applied.
struct PushCall {
  std::vector<Op> ops;
  std::vector<uint64_t> versions;  // per Op: its shard's version once the Op is in it
  std::vector<BufferPool::Buffer> copies;
  std::unique_ptr<Completion> done;
};

struct PullCall {
  std::vector<Op> ops;
  std::unique_ptr<Completion> done;
};

// Floats of a bytes field sent in `format`: `n` of them (a count the caller checked), decoded
// into a pooled buffer unless they are plain float32 (then as Floats).
StatusOr<const float*> DecodedFloats(const std::string& bytes, update::WireFormat format, size_t n,
                                     BufferPool* pool, std::vector<BufferPool::Buffer>* copies) {
  if (format == update::WireFormat{}) return Floats(bytes, pool, copies);
  copies->push_back(pool->Get(std::max<size_t>(n, 1) * sizeof(float)));
  float* out = copies->back().as<float>();
  ADAM_RETURN_IF_ERROR(update::DecodeFloats(bytes, format, n, out));
  return static_cast<const float*>(out);
}

// A filtered delta's indices: decoded, `n` of them (as many as its values), strictly ascending;
// *end is one past the last.
StatusOr<const uint32_t*> DecodedIndices(const adam::v1::ShardData& d, size_t n, BufferPool* pool,
                                         std::vector<BufferPool::Buffer>* copies, int64_t* end) {
  StatusOr<size_t> count = update::IndexCount(d.indices(), d.zstd(), n);
  if (!count.ok()) return count.status();
  if (*count != n)
    return InvalidArgumentError(std::to_string(*count) + " indices for " + std::to_string(n) +
                                " values");
  copies->push_back(pool->Get(std::max<size_t>(n, 1) * sizeof(uint32_t)));
  uint32_t* idx = copies->back().as<uint32_t>();
  ADAM_RETURN_IF_ERROR(update::DecodeIndices(d.indices(), d.zstd(), n, idx));
  for (size_t i = 1; i < n; ++i)
    if (idx[i] <= idx[i - 1])
      return InvalidArgumentError("indices[" + std::to_string(i) + "] = " + std::to_string(idx[i]) +
                                  " does not follow " + std::to_string(idx[i - 1]) +
                                  " in ascending order");
  *end = n == 0 ? 0 : int64_t(idx[n - 1]) + 1;
  return static_cast<const uint32_t*>(idx);
}

// One delta of a push as an Op, checked against the shards `store` holds.
Status DeltaOp(const adam::v1::ShardData& d, const ParamStore& store, BufferPool* pool,
               PushCall* call) {
  const update::WireFormat format{d.float16(), d.zstd()};
  const int64_t shard_size = store.ShardSize(d.shard());
  if (shard_size < 0) return store.CheckRange(d.shard(), 0, 0);  // names the shard not held
  if (d.offset() > uint64_t(shard_size))
    return InvalidArgumentError("offset " + std::to_string(d.offset()) + " is past the shard's " +
                                std::to_string(shard_size) + " floats");
  StatusOr<size_t> n = update::FloatCount(d.values(), format, size_t(shard_size));
  if (!n.ok()) return n.status();
  Op op;
  op.kind = Op::Kind::kAdd;
  op.shard = d.shard();
  op.offset = int64_t(d.offset());
  op.count = int64_t(*n);
  int64_t end = op.count;
  if (!d.indices().empty()) {
    StatusOr<const uint32_t*> idx = DecodedIndices(d, *n, pool, &call->copies, &end);
    if (!idx.ok()) return idx.status();
    op.indices = *idx;
  }
  ADAM_RETURN_IF_ERROR(store.CheckRange(d.shard(), op.offset, end));
  StatusOr<const float*> values = DecodedFloats(d.values(), format, *n, pool, &call->copies);
  if (!values.ok()) return values.status();
  op.values = *values;
  call->ops.push_back(op);
  return OkStatus();
}

// The Ops of a push's weight deltas, each checked: an error names the delta at fault. `bytes`
// counts their payload as it travelled.
grpc::Status DeltaOps(const adam::v1::PushRequest& req, const ParamStore& store, BufferPool* pool,
                      PushCall* call, size_t* bytes) {
  for (int i = 0; i < req.deltas_size(); ++i) {
    const auto& d = req.deltas(i);
    if (Status st = DeltaOp(d, store, pool, call); !st.ok())
      return {net::ToGrpc(st).error_code(), "deltas[" + std::to_string(i) + "] (shard " +
                                                std::to_string(d.shard()) + "): " + st.message()};
    *bytes += d.values().size() + d.indices().size();
  }
  return grpc::Status::OK;
}

// Checks one dense update (the activations and errors of a layer whose updates travel that way)
// against the plan and this server's rows of the layer; `where` names it in the error.
grpc::Status CheckDense(const adam::v1::DenseUpdate& du, const update::UpdatePlan& plan, int server,
                        const std::string& where, int* index) {
  const int k = du.layer() < 1u << 20 ? plan.DenseIndex(int(du.layer())) : -1;
  if (k < 0)
    return Invalid(where + ": not a layer whose updates travel as activations in this job");
  const auto& layer = plan.dense()[size_t(k)];
  const auto& rows = plan.Rows(server, k);
  if (rows.empty()) return Invalid(where + ": this server holds no part of the layer");
  if (du.images() == 0 || du.images() > kMaxDenseImages) {
    return Invalid(where + ": images must be in 1.." + std::to_string(kMaxDenseImages) + ", got " +
                   std::to_string(du.images()));
  }
  const uint64_t want_a = uint64_t(du.images()) * uint64_t(layer.in);
  const uint64_t want_e = uint64_t(du.images()) * rows.size();
  const update::WireFormat format{du.float16(), du.zstd()};
  StatusOr<size_t> got_a = update::FloatCount(du.activations(), format, want_a);
  if (!got_a.ok()) return Invalid(where + ": activations: " + got_a.status().message());
  StatusOr<size_t> got_e = update::FloatCount(du.errors(), format, want_e);
  if (!got_e.ok()) return Invalid(where + ": errors: " + got_e.status().message());
  if (*got_a != want_a || *got_e != want_e) {
    return Invalid(where + ": activations and errors must be " + std::to_string(want_a) + " and " +
                   std::to_string(want_e) + " floats for " + std::to_string(du.images()) +
                   " images, got " + std::to_string(*got_a) + " and " + std::to_string(*got_e));
  }
  *index = k;
  return grpc::Status::OK;
}

// The Ops of a push's dense updates: one per held shard each layer touches. `bytes` counts their
// activations and errors.
grpc::Status DenseOps(const adam::v1::PushRequest& req, const update::UpdatePlan& plan, int server,
                      const ParamStore& store, BufferPool* pool, PushCall* call, size_t* bytes) {
  for (int i = 0; i < req.dense_size(); ++i) {
    const auto& du = req.dense(i);
    int k = -1;
    const std::string where =
        "dense[" + std::to_string(i) + "] (layer " + std::to_string(du.layer()) + ")";
    if (grpc::Status st = CheckDense(du, plan, server, where, &k); !st.ok()) return st;
    const auto& layer = plan.dense()[size_t(k)];
    const auto& rows = plan.Rows(server, k);
    DenseArgs args;
    args.layer = &layer;
    args.rows = rows.data();
    args.num_rows = int(rows.size());
    args.images = int(du.images());
    const update::WireFormat format{du.float16(), du.zstd()};
    StatusOr<const float*> a = DecodedFloats(
        du.activations(), format, size_t(du.images()) * size_t(layer.in), pool, &call->copies);
    StatusOr<const float*> e =
        DecodedFloats(du.errors(), format, size_t(du.images()) * rows.size(), pool, &call->copies);
    if (!a.ok() || !e.ok())
      return Invalid(where + ": " + (a.ok() ? e.status() : a.status()).message());
    args.a = *a;
    args.e = *e;
    const int64_t w_end = layer.weights + layer.units * layer.in;
    for (uint32_t id : store.shard_ids()) {
      const int64_t lo = store.ShardOffset(id), hi = lo + store.ShardSize(id);
      const bool touches = (std::max(lo, layer.weights) < std::min(hi, w_end)) ||
                           (std::max(lo, layer.bias) < std::min(hi, layer.bias + layer.units));
      if (!touches) continue;
      Op op;
      op.kind = Op::Kind::kDense;
      op.shard = id;
      op.dense = args;
      call->ops.push_back(op);
    }
    *bytes += du.activations().size() + du.errors().size();
  }
  return grpc::Status::OK;
}

// Whether this server may take writes to every shard the Ops touch (routing.h); a shard taking
// its first write since its promotion is reported as an event.
grpc::Status AdmitWrites(Routing& routing, const std::vector<Op>& ops, const Clock& clock) {
  std::vector<uint32_t> shards, promoted;
  for (const Op& op : ops) shards.push_back(op.shard);
  if (std::string why = routing.Admit(shards, &promoted); !why.empty()) {
    return {grpc::StatusCode::FAILED_PRECONDITION, why};
  }
  for (uint32_t shard : promoted) {
    const auto now = clock.WallNow().time_since_epoch();
    events::Emit(events::PromotedFirstUpdate{
        .shard = shard,
        .map_version = routing.version(),
        .unix_ms = int64_t(std::chrono::duration_cast<std::chrono::milliseconds>(now).count())});
  }
  return grpc::Status::OK;
}

// An identified push (a session): its parts on each shard are numbered, so that a re-sent copy is
// dropped. Each Op also learns where to leave its shard's version once it is applied.
void NumberParts(const adam::v1::PushRequest& req, PushCall* call) {
  if (req.session() != 0) {
    std::unordered_map<uint32_t, uint32_t> parts;
    for (Op& op : call->ops) {
      op.trainer = req.trainer_index();
      op.session = req.session();
      op.seq = req.seq();
      op.part = parts[op.shard]++;
    }
  }
  call->versions.resize(call->ops.size());
  for (size_t i = 0; i < call->ops.size(); ++i) call->ops[i].applied_version = &call->versions[i];
}

// Refuses a push from a trainer index this job does not admit.
grpc::Status AdmitTrainer(const ClockGate& gate, uint32_t trainer) {
  if (trainer < uint32_t(ClockGate::kMaxTrainers) && gate.Admits(int(trainer))) return {};
  return Invalid("trainer_index " + std::to_string(trainer) + " is not a trainer of this job (" +
                 std::to_string(gate.trainers()) + " trainers; async jobs admit up to " +
                 std::to_string(ClockGate::kMaxTrainers) + " while trainers are scaled)");
}

// Each shard a push wrote and the newest version it made there: what a quorum must hold.
std::vector<std::pair<uint32_t, uint64_t>> NewestVersions(const PushCall& call) {
  std::map<uint32_t, uint64_t> need;
  for (size_t i = 0; i < call.ops.size(); ++i) {
    uint64_t& v = need[call.ops[i].shard];
    v = std::max(v, call.versions[i]);
  }
  return {need.begin(), need.end()};
}

}  // namespace

grpc::ServerUnaryReactor* ParamService::Push(grpc::CallbackServerContext* ctx,
                                             const adam::v1::PushRequest* req,
                                             adam::v1::PushResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  if (grpc::Status refused = AdmitTrainer(*gate_, req->trainer_index()); !refused.ok()) {
    reactor->Finish(refused);
    return reactor;
  }
  auto call = std::make_unique<PushCall>();
  size_t bytes = 0, dense_bytes = 0;
  // Check everything before queueing anything: a bad part applies nothing (an unaligned payload
  // may already have been copied; the copy goes with the refused call).
  grpc::Status checked = DeltaOps(*req, *store_, pool_, call.get(), &bytes);
  if (checked.ok())
    checked = DenseOps(*req, *plan_, server_, *store_, pool_, call.get(), &dense_bytes);
  if (checked.ok() && routing_ != nullptr)
    checked = AdmitWrites(*routing_, call->ops, *gate_->clock());
  if (!checked.ok()) {
    reactor->Finish(checked);
    return reactor;
  }
  NumberParts(*req, call.get());
  const int trainer = int(req->trainer_index());
  const uint64_t clock = req->clock();
  const bool leave = req->leave();
  PushCall* raw = call.get();
  auto answer = [this, reactor, resp, trainer, clock, leave, bytes,
                 dense_bytes](const grpc::Status& status) {
    if (!status.ok()) {
      reactor->Finish(status);
      return;
    }
    gate_->Advance(trainer, clock, leave);
    store_->RaiseEpochs(uint32_t(clock >> 32));  // applied (and durable): see RaiseEpochs
    resp->set_min_clock(gate_->MinClock());
    if (m_.pushes) m_.pushes->Increment();
    if (m_.push_bytes) m_.push_bytes->Increment(double(bytes));
    if (m_.dense_bytes) m_.dense_bytes->Increment(double(dense_bytes));
    reactor->Finish(grpc::Status::OK);
  };
  auto finish = [this, raw, answer] {
    std::unique_ptr<PushCall> owned(raw);
    if (quorum_ == nullptr || raw->ops.empty()) {
      answer(grpc::Status::OK);
      return;
    }
    // Acknowledged once a quorum of each shard's copies holds it (routing.h).
    quorum_->WhenDurable(NewestVersions(*raw), answer);
  };
  if (call->ops.empty()) {
    (void)call.release();  // owned by `finish` from here
    finish();
    return reactor;
  }
  call->done = std::make_unique<Completion>(int(call->ops.size()), finish);
  for (Op& op : call->ops) op.done = call->done.get();
  (void)call.release();  // owned by its Completion from here
  store_->Submit(raw->ops.data(), raw->ops.size());
  return reactor;
}

namespace {

// Refuses a pull of a shard named twice (one small request would demand an unbounded response),
// of a shard not held here, or, with a controller, of one this server is not the primary of.
grpc::Status CheckPull(const std::vector<uint32_t>& ids,
                       const std::vector<adam::v1::ShardRange>& ranges, const ParamStore& store,
                       Routing* routing) {
  std::vector<uint32_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  if (auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end())
    return Invalid("shard " + std::to_string(*dup) + " is requested more than once");
  std::vector<uint32_t> all = ids;
  for (const auto& r : ranges) all.push_back(r.shard());
  for (uint32_t id : all) {
    if (store.ShardSize(id) < 0)
      return {grpc::StatusCode::NOT_FOUND, "shard " + std::to_string(id) + " is not held here"};
  }
  for (int i = 0; i < int(ranges.size()); ++i) {
    const auto& r = ranges[size_t(i)];
    const auto size = uint64_t(store.ShardSize(r.shard()));
    if (r.count() == 0 || r.offset() > size || r.count() > size - r.offset())
      return Invalid("ranges[" + std::to_string(i) + "]: floats [" + std::to_string(r.offset()) +
                     ", +" + std::to_string(r.count()) + ") are not a nonempty part of shard " +
                     std::to_string(r.shard()) + " (" + std::to_string(size) + " floats)");
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  if (routing != nullptr)
    if (std::string why = routing->Admit(all, nullptr); !why.empty())
      return {grpc::StatusCode::FAILED_PRECONDITION, why};
  return grpc::Status::OK;
}

// When a pull held back by the consistency model gives up: a tenth of the caller's time left (at
// most a second) before its deadline, kept for the answer to travel; never without a deadline.
Clock::TimePoint PullExpiry(const grpc::CallbackServerContext& ctx, Clock::TimePoint asked) {
  const auto left = net::TimeLeft(ctx);
  if (left >= std::chrono::hours(24 * 365)) return Clock::TimePoint::max();
  const auto keep = std::min<Clock::Duration>(std::chrono::seconds(1), left / 10);
  return asked + (left - keep);
}

}  // namespace

grpc::ServerUnaryReactor* ParamService::Pull(grpc::CallbackServerContext* ctx,
                                             const adam::v1::PullRequest* req,
                                             adam::v1::PullResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  std::vector<uint32_t> ids(req->shards().begin(), req->shards().end());
  std::vector<adam::v1::ShardRange> ranges(req->ranges().begin(), req->ranges().end());
  if (ids.empty() && ranges.empty()) ids = store_->shard_ids();
  if (grpc::Status st = CheckPull(ids, ranges, *store_, routing_); !st.ok()) {
    reactor->Finish(st);
    return reactor;
  }
  Clock* const clock = gate_->clock();
  const auto asked = clock->Now();
  // A pull held back until just before its caller's deadline is answered with the trainers it
  // waited for: a trainer that died is named, not a bare deadline.
  const uint64_t at = req->clock();
  auto on_expired = [reactor, asked, at, clock](const std::string& waiting) {
    const double waited = clock->SecondsSince(asked);
    reactor->Finish(
        {grpc::StatusCode::DEADLINE_EXCEEDED, "pull at " + ClockText(at) + " held back " +
                                                  std::to_string(std::lround(waited)) +
                                                  " s by the job's consistency model, "
                                                  "waiting for " +
                                                  waiting + ": has that trainer stopped?"});
  };
  const update::WireFormat format{req->float16(), req->zstd()};
  gate_->WhenAllowed(
      at,
      [this, ids, ranges = std::move(ranges), format, reactor, resp, asked, clock](bool allowed) {
        if (!allowed) {
          reactor->Finish({grpc::StatusCode::UNAVAILABLE, "parameter server is shutting down"});
          return;
        }
        if (m_.pull_wait) m_.pull_wait->Observe(clock->SecondsSince(asked));
        Read(ids, ranges, format, reactor, resp);
      },
      PullExpiry(*ctx, asked), on_expired);
  return reactor;
}

namespace {

// Every shard of `resp` (plain floats) re-written in `format`; the bytes it then holds.
size_t Reencode(update::WireFormat format, adam::v1::PullResponse* resp) {
  size_t bytes = 0;
  std::string encoded;
  for (int i = 0; i < resp->shards_size(); ++i) {
    auto* sd = resp->mutable_shards(i);
    update::EncodeFloats(reinterpret_cast<const float*>(sd->values().data()),
                         sd->values().size() / sizeof(float), format, &encoded);
    sd->mutable_values()->swap(encoded);
    sd->set_float16(format.float16);
    sd->set_zstd(format.zstd);
    bytes += sd->values().size();
  }
  return bytes;
}

}  // namespace

void ParamService::Read(const std::vector<uint32_t>& ids,
                        const std::vector<adam::v1::ShardRange>& ranges, update::WireFormat format,
                        grpc::ServerUnaryReactor* reactor, adam::v1::PullResponse* resp) {
  auto call = std::make_unique<PullCall>();
  size_t bytes = 0;
  auto read = [&](uint32_t id, int64_t offset, int64_t n) {
    auto* out = resp->add_shards();
    out->set_shard(id);
    if (offset > 0) out->set_offset(uint64_t(offset));
    std::string* values = out->mutable_values();
    values->resize(size_t(n) * sizeof(float));
    bytes += values->size();
    Op op;
    op.kind = Op::Kind::kRead;
    op.shard = id;
    op.offset = offset;
    op.count = n;
    call->ops.push_back(op);
  };
  for (uint32_t id : ids) read(id, 0, store_->ShardSize(id));
  for (const auto& r : ranges) read(r.shard(), int64_t(r.offset()), int64_t(r.count()));
  // Output pointers once every string has its final address.
  for (int i = 0; i < resp->shards_size(); ++i) {
    auto* out = resp->mutable_shards(i);
    Op& op = call->ops[size_t(i)];
    op.out = reinterpret_cast<float*>(out->mutable_values()->data());
    op.version = nullptr;
  }
  PullCall* raw = call.get();
  // Versions land in a side array: the response's fields are set on the finishing thread.
  auto versions = std::make_shared<std::vector<uint64_t>>(raw->ops.size());
  for (size_t i = 0; i < raw->ops.size(); ++i) raw->ops[i].version = &(*versions)[i];
  auto finish = [this, raw, reactor, resp, versions, bytes, format]() mutable {
    std::unique_ptr<PullCall> owned(raw);
    for (int i = 0; i < resp->shards_size(); ++i)
      resp->mutable_shards(i)->set_version((*versions)[size_t(i)]);
    // Re-written in the format asked for, on the thread that applied the last read.
    if (format != update::WireFormat{}) bytes = Reencode(format, resp);
    resp->set_min_clock(gate_->MinClock());
    resp->set_epochs(store_->epochs());
    if (m_.pull_bytes) m_.pull_bytes->Increment(double(bytes));
    reactor->Finish(grpc::Status::OK);
  };
  if (raw->ops.empty()) {
    (void)call.release();  // owned by `finish` from here
    finish();
    return;
  }
  raw->done = std::make_unique<Completion>(int(raw->ops.size()), finish);
  for (Op& op : raw->ops) op.done = raw->done.get();
  (void)call.release();  // owned by its Completion from here
  store_->Submit(raw->ops.data(), raw->ops.size());
}

grpc::ServerUnaryReactor* ParamService::ReadCopy(grpc::CallbackServerContext* ctx,
                                                 const adam::v1::ReadCopyRequest* req,
                                                 adam::v1::ReadCopyResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  const int64_t n = store_->ShardSize(req->shard());
  if (n < 0) {
    reactor->Finish({grpc::StatusCode::NOT_FOUND,
                     "shard " + std::to_string(req->shard()) + " is not held here"});
    return reactor;
  }
  if (req->offset() > uint64_t(n) || req->count() > uint64_t(n) - req->offset()) {
    reactor->Finish(Invalid("shard " + std::to_string(req->shard()) + ": floats [" +
                            std::to_string(req->offset()) + ", +" + std::to_string(req->count()) +
                            ") are outside the shard's " + std::to_string(n)));
    return reactor;
  }
  std::vector<float> values(static_cast<size_t>(n));
  StatusOr<ShardMeta> meta = store_->ReadState(req->shard(), values.data(), n);
  if (!meta.ok()) {
    reactor->Finish(net::ToGrpc(meta.status()));
    return reactor;
  }
  resp->set_values(reinterpret_cast<const char*>(values.data() + req->offset()),
                   size_t(req->count()) * sizeof(float));
  resp->set_version(meta->version);
  resp->set_term(meta->term);
  resp->set_primary(routing_ == nullptr || routing_->IsPrimary(req->shard()));
  resp->set_map_version(routing_ != nullptr ? routing_->version() : 0);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace adam::ps
