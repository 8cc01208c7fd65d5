// ReplicaService: stream checkpoint files; FetchCheckpoint: receive them.
#include "param_server/replica_service.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "net/grpc.h"

namespace adam::ps {
namespace {

constexpr size_t kChunk = 1 << 20;

// The checkpoint names this service sends: "ckpt-" 16 hex ".adam", nothing else (no paths).
bool IsCheckpointName(const std::string& name) {
  if (name.size() != 26 || name.rfind("ckpt-", 0) != 0 || name.substr(21) != ".adam") return false;
  for (char c : name.substr(5, 16))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

grpc::Status ReplicaService::GetCheckpoint(grpc::ServerContext* ctx,
                                           const adam::v1::GetCheckpointRequest*,
                                           grpc::ServerWriter<adam::v1::CheckpointChunk>* writer) {
  if (checkpointer_ == nullptr)
    return {grpc::StatusCode::FAILED_PRECONDITION, "this parameter server keeps no checkpoints"};
  auto files = checkpointer_->OpenNewest();
  grpc::Status result = grpc::Status::OK;
  std::string buf(kChunk, '\0');
  for (const auto& f : files) {
    uint64_t offset = 0;
    for (bool last = false; !last && result.ok();) {
      const ssize_t n = ::pread(f.fd, buf.data(), buf.size(), off_t(offset));
      if (n < 0) {
        result = {grpc::StatusCode::INTERNAL, f.name + ": " + std::strerror(errno)};
        break;
      }
      last = size_t(n) < buf.size();
      adam::v1::CheckpointChunk c;
      c.set_file(f.name);
      c.set_offset(offset);
      c.set_data(buf.data(), size_t(n));
      c.set_last(last);
      offset += uint64_t(n);
      if (ctx->IsCancelled() || !writer->Write(c)) result = {grpc::StatusCode::CANCELLED, "reader went away"};
    }
  }
  for (const auto& f : files) ::close(f.fd);
  return result;
}

StatusOr<int> FetchCheckpoint(const std::string& address, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InternalError("cannot create " + dir + ": " + ec.message());
  auto stub = adam::v1::ReplicaService::NewStub(net::MakeChannel(address));
  grpc::ClientContext ctx;
  net::SetDeadline(&ctx, std::chrono::minutes(10));
  auto reader = stub->GetCheckpoint(&ctx, {});
  adam::v1::CheckpointChunk c;
  std::string current;
  int fd = -1, files = 0;
  uint64_t expect = 0;
  Status st;
  auto fail = [&](Status s) {
    if (st.ok()) st = std::move(s);
  };
  while (st.ok() && reader->Read(&c)) {
    if (c.file() != current) {
      if (fd >= 0) fail(DataLossError(current + " ended without its last chunk"));
      if (!IsCheckpointName(c.file())) {
        fail(DataLossError("peer sent a file named '" + c.file() + "', not a checkpoint"));
        break;
      }
      current = c.file();
      fd = ::open((dir + "/" + current + ".tmp").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) {
        fail(InternalError("cannot create " + dir + "/" + current + ".tmp: " + std::strerror(errno)));
        break;
      }
      expect = 0;
    }
    if (c.offset() != expect) {
      fail(DataLossError(current + ": chunk at byte " + std::to_string(c.offset()) + ", expected " +
                         std::to_string(expect)));
      break;
    }
    if (::write(fd, c.data().data(), c.data().size()) != ssize_t(c.data().size())) {
      fail(InternalError(current + ": write: " + std::strerror(errno)));
      break;
    }
    expect += c.data().size();
    if (c.last()) {
      const bool ok = ::fsync(fd) == 0;
      ::close(fd);
      fd = -1;
      if (!ok || ::rename((dir + "/" + current + ".tmp").c_str(), (dir + "/" + current).c_str()) != 0) {
        fail(InternalError(current + ": " + std::strerror(errno)));
        break;
      }
      ++files;
    }
  }
  if (fd >= 0) {
    ::close(fd);
    ::unlink((dir + "/" + current + ".tmp").c_str());
    fail(DataLossError(current + " ended without its last chunk"));
  }
  if (!st.ok()) {
    ctx.TryCancel();
    reader->Finish();
    return st;
  }
  ADAM_RETURN_IF_ERROR(net::FromGrpc(reader->Finish(), "checkpoint from " + address));
  return files;
}

}  // namespace adam::ps
