// ReplicaService and its clients: checkpoint files in 1 MiB chunks over the replication address.
#include "param_server/replica_service.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include "net/grpc.h"
#include "param_server/replication.h"

namespace adam::ps {
namespace {

namespace fs = std::filesystem;
constexpr size_t kChunk = 1 << 20;

// The names checkpoint traffic may carry (no paths).
bool IsCheckpointName(const std::string& name) { return CheckpointGeneration(name) > 0; }

// Streams `files` (closing them) through `write`; `last_extra` decorates the final chunk.
Status SendFiles(std::vector<Checkpointer::OpenFile> files, uint32_t server,
                 const std::function<bool(const adam::v1::CheckpointChunk&)>& write,
                 const std::vector<std::string>& keep = {}) {
  Status st;
  std::string buf(kChunk, '\0');
  for (size_t i = 0; i < files.size() && st.ok(); ++i) {
    const auto& f = files[i];
    uint64_t offset = 0;
    for (bool last = false; !last;) {
      const ssize_t n = ::pread(f.fd, buf.data(), buf.size(), off_t(offset));
      if (n < 0) {
        st = InternalError(f.name + ": " + std::strerror(errno));
        break;
      }
      last = size_t(n) < buf.size();
      adam::v1::CheckpointChunk c;
      c.set_file(f.name);
      c.set_offset(offset);
      c.set_data(buf.data(), size_t(n));
      c.set_last(last);
      c.set_server(server);
      if (last && i + 1 == files.size())
        for (const auto& k : keep) c.add_keep(k);
      offset += uint64_t(n);
      if (!write(c)) {
        st = UnavailableError("the receiver went away");
        break;
      }
    }
  }
  for (const auto& f : files) ::close(f.fd);
  return st;
}

// Writes received chunks into a directory: <file>.tmp, then fsync and rename on its last chunk.
class ChunkSink {
 public:
  explicit ChunkSink(std::string dir) : dir_(std::move(dir)) {}
  ~ChunkSink() { Abort(); }

  Status Add(const adam::v1::CheckpointChunk& c) {
    if (c.file() != current_) {
      if (fd_ >= 0) return DataLossError(current_ + " ended without its last chunk");
      if (!IsCheckpointName(c.file()))
        return DataLossError("a file named '" + c.file() + "' is not a checkpoint");
      current_ = c.file();
      fd_ = ::open(Tmp().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd_ < 0) return InternalError("cannot create " + Tmp() + ": " + std::strerror(errno));
      expect_ = 0;
    }
    if (c.offset() != expect_)
      return DataLossError(current_ + ": chunk at byte " + std::to_string(c.offset()) +
                           ", expected " + std::to_string(expect_));
    if (::write(fd_, c.data().data(), c.data().size()) != ssize_t(c.data().size()))
      return InternalError(current_ + ": write: " + std::strerror(errno));
    expect_ += c.data().size();
    if (c.last()) {
      const bool ok = ::fsync(fd_) == 0;
      ::close(fd_);
      fd_ = -1;
      if (!ok || ::rename(Tmp().c_str(), (dir_ + "/" + current_).c_str()) != 0)
        return InternalError(current_ + ": " + std::strerror(errno));
      ++files_;
      current_.clear();
    }
    return OkStatus();
  }
  Status Finish() {
    if (fd_ >= 0) {
      const std::string name = current_;
      Abort();
      return DataLossError(name + " ended without its last chunk");
    }
    return OkStatus();
  }
  int files() const { return files_; }

 private:
  std::string Tmp() const { return dir_ + "/" + current_ + ".tmp"; }
  void Abort() {
    if (fd_ < 0) return;
    ::close(fd_);
    ::unlink(Tmp().c_str());
    fd_ = -1;
  }
  std::string dir_, current_;
  int fd_ = -1;
  uint64_t expect_ = 0;
  int files_ = 0;
};

std::string PeerDir(const std::string& root, uint32_t server) {
  return root + "/ps-" + std::to_string(server);
}

}  // namespace

grpc::Status ReplicaService::GetCheckpoint(grpc::ServerContext* ctx,
                                           const adam::v1::GetCheckpointRequest* req,
                                           grpc::ServerWriter<adam::v1::CheckpointChunk>* writer) {
  std::vector<Checkpointer::OpenFile> files;
  if (req->server() == server_) {
    if (checkpointer_ == nullptr)
      return {grpc::StatusCode::FAILED_PRECONDITION, "this parameter server keeps no checkpoints"};
    files = checkpointer_->OpenNewest();
  } else {
    // A peer's copy: every checkpoint file kept for it (its last push pruned the rest).
    MutexLock lock(put_mu_);
    std::error_code ec;
    std::vector<std::string> names;
    if (!peer_dir_.empty())
      for (const auto& de : fs::directory_iterator(PeerDir(peer_dir_, req->server()), ec))
        if (IsCheckpointName(de.path().filename().string()))
          names.push_back(de.path().filename().string());
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      const int fd =
          ::open((PeerDir(peer_dir_, req->server()) + "/" + n).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) files.push_back({n, fd});
    }
  }
  Status st = SendFiles(std::move(files), req->server(), [&](const adam::v1::CheckpointChunk& c) {
    return !ctx->IsCancelled() && writer->Write(c);
  });
  return st.ok() ? grpc::Status::OK : grpc::Status(grpc::StatusCode::CANCELLED, st.message());
}

grpc::Status ReplicaService::PutCheckpoint(grpc::ServerContext* ctx,
                                           grpc::ServerReader<adam::v1::CheckpointChunk>* reader,
                                           adam::v1::PutCheckpointResponse* resp) {
  if (peer_dir_.empty())
    return {grpc::StatusCode::FAILED_PRECONDITION, "this parameter server keeps no peer copies"};
  MutexLock lock(put_mu_);
  adam::v1::CheckpointChunk c;
  std::optional<ChunkSink> sink;
  std::optional<uint32_t> server;
  std::vector<std::string> keep;
  while (reader->Read(&c)) {
    if (!server) {
      if (c.server() == server_)
        return {grpc::StatusCode::INVALID_ARGUMENT, "a server cannot be its own checkpoint peer"};
      server = c.server();
      std::error_code ec;
      fs::create_directories(PeerDir(peer_dir_, *server), ec);
      if (ec)
        return {grpc::StatusCode::INTERNAL, "cannot create a peer directory: " + ec.message()};
      sink.emplace(PeerDir(peer_dir_, *server));
    } else if (c.server() != *server) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "one PutCheckpoint carries one server's files"};
    }
    if (Status st = sink->Add(c); !st.ok()) return net::ToGrpc(st);
    if (c.keep_size() > 0) keep.assign(c.keep().begin(), c.keep().end());
  }
  if (!sink) return grpc::Status::OK;  // nothing sent
  if (Status st = sink->Finish(); !st.ok()) return net::ToGrpc(st);
  if (!keep.empty()) {
    std::error_code ec;
    for (const auto& de : fs::directory_iterator(PeerDir(peer_dir_, *server), ec)) {
      const std::string n = de.path().filename().string();
      if (IsCheckpointName(n) && std::find(keep.begin(), keep.end(), n) == keep.end())
        fs::remove(de.path(), ec);
    }
  }
  resp->set_files(uint32_t(sink->files()));
  return grpc::Status::OK;
}

grpc::Status ReplicaService::Forward(grpc::ServerContext*, const adam::v1::ForwardRequest* req,
                                     adam::v1::ForwardResponse*) {
  if (store_ == nullptr || routing_ == nullptr)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "ps-" + std::to_string(server_) + " takes no forwards (no controller)");
  StatusOr<ShardMeta> meta = MetaFromProto(*req);
  if (!meta.ok())
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        "forward: shard " + std::to_string(req->shard()) + ": " + meta.status().message());
  if (req->values().size() % 4 != 0)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "forward: shard " + std::to_string(req->shard()) + " values: " +
                            std::to_string(req->values().size()) + " bytes, not a multiple of 4");
  // values() is not necessarily 4-byte aligned: copy into floats.
  std::vector<float> values(req->values().size() / 4);
  std::memcpy(values.data(), req->values().data(), req->values().size());
  return net::ToGrpc(AcceptForward(server_, store_, routing_, req->shard(), values.data(),
                                   int64_t(values.size()), *meta, req->epochs(),
                                   req->from_server()));
}

grpc::Status ReplicaService::ReadShard(grpc::ServerContext*, const adam::v1::ReadShardRequest* req,
                                       adam::v1::ForwardRequest* resp) {
  if (store_ == nullptr)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "ps-" + std::to_string(server_) + " keeps no copies (no controller)");
  const int64_t n = store_->ShardSize(req->shard());
  if (n < 0)
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "read: shard " + std::to_string(req->shard()) + " is not held here");
  resp->set_epochs(store_->epochs());  // before the state: see ParamStore::RaiseEpochs
  std::string* bytes = resp->mutable_values();
  bytes->resize(size_t(n) * 4);
  StatusOr<ShardMeta> meta =
      store_->ReadState(req->shard(), reinterpret_cast<float*>(bytes->data()), n);
  if (!meta.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, meta.status().message());
  resp->set_shard(req->shard());
  MetaToProto(*meta, resp);
  resp->set_from_server(server_);
  if (routing_ != nullptr) resp->set_map_version(routing_->version());
  return grpc::Status::OK;
}

void MetaToProto(const ShardMeta& meta, adam::v1::ForwardRequest* out) {
  out->set_version(meta.version);
  out->set_term(meta.term);
  for (size_t i = 0; i < meta.marks.size(); ++i) {
    const PushMark& m = meta.marks[i];
    if (m.session == 0) continue;
    auto* pm = out->add_marks();
    pm->set_trainer(uint32_t(i));
    pm->set_session(m.session);
    pm->set_seq(m.seq);
    pm->set_parts(m.parts);
  }
}

StatusOr<ShardMeta> MetaFromProto(const adam::v1::ForwardRequest& in) {
  ShardMeta meta;
  meta.version = in.version();
  meta.term = in.term();
  for (const auto& m : in.marks()) {
    if (m.trainer() >= kMaxTrainers)
      return InvalidArgumentError("marks trainer " + std::to_string(m.trainer()) + ", not below " +
                                  std::to_string(kMaxTrainers));
    if (meta.marks.size() <= m.trainer()) meta.marks.resize(size_t(m.trainer()) + 1);
    meta.marks[m.trainer()] = PushMark{m.session(), m.seq(), m.parts()};
  }
  return meta;
}

StatusOr<int> FetchCheckpoint(const net::Transport& transport, const std::string& address,
                              uint32_t server, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InternalError("cannot create " + dir + ": " + ec.message());
  auto stub = adam::v1::ReplicaService::NewStub(net::MakeChannel(transport, address));
  grpc::ClientContext ctx;
  net::SetDeadline(&ctx, std::chrono::minutes(10));
  adam::v1::GetCheckpointRequest req;
  req.set_server(server);
  auto reader = stub->GetCheckpoint(&ctx, req);
  ChunkSink sink(dir);
  adam::v1::CheckpointChunk c;
  Status st;
  while (st.ok() && reader->Read(&c)) st = sink.Add(c);
  if (st.ok()) st = sink.Finish();
  if (!st.ok()) {
    ctx.TryCancel();
    reader->Finish();
    return st;
  }
  ADAM_RETURN_IF_ERROR(net::FromGrpc(reader->Finish(), "checkpoint from " + address));
  return sink.files();
}

PeerSender::PeerSender(const net::Transport& transport, std::string address, uint32_t server)
    : address_(std::move(address)),
      server_(server),
      stub_(adam::v1::ReplicaService::NewStub(net::MakeChannel(transport, address_))) {}

StatusOr<int> PeerSender::Send(const Checkpointer& checkpointer) {
  auto files = checkpointer.OpenNewest();
  std::vector<std::string> keep;
  keep.reserve(files.size());
  for (const auto& f : files) keep.push_back(f.name);
  std::vector<Checkpointer::OpenFile> todo;
  for (auto& f : files) {
    if (sent_.count(f.name)) {
      ::close(f.fd);
    } else {
      todo.push_back(f);
    }
  }
  if (todo.empty()) return 0;
  grpc::ClientContext ctx;
  net::SetDeadline(&ctx, std::chrono::minutes(1));
  adam::v1::PutCheckpointResponse resp;
  auto writer = stub_->PutCheckpoint(&ctx, &resp);
  const int n = int(todo.size());
  std::vector<std::string> names;
  names.reserve(todo.size());
  for (const auto& f : todo) names.push_back(f.name);
  Status st = SendFiles(
      std::move(todo), server_,
      [&](const adam::v1::CheckpointChunk& c) { return writer->Write(c); }, keep);
  writer->WritesDone();
  Status done = net::FromGrpc(writer->Finish(), "checkpoint to peer " + address_);
  if (!done.ok()) {
    sent_.clear();  // resend everything next time
    return done;
  }
  ADAM_RETURN_IF_ERROR(st);
  std::set<std::string> now(keep.begin(), keep.end());
  for (const auto& n2 : names) now.insert(n2);
  sent_ = std::move(now);
  return n;
}

}  // namespace adam::ps
