#include "raft/storage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace adam::raft {
namespace {

constexpr uint8_t kHardStateRecord = 1;
constexpr uint8_t kEntryRecord = 2;
constexpr char kSnapshotMagic[8] = {'A', 'D', 'A', 'M', 'S', 'N', 'P', '1'};
constexpr size_t kMaxRecord = 64u << 20;

void PutU32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetU(std::string_view b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<uint8_t>(b[at + i])) << (8 * i);
  return v;
}
uint32_t Crc(std::string_view b) {
  return static_cast<uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(b.data()), b.size()));
}

std::string Record(uint8_t kind, const std::string& payload) {
  std::string body;
  body.push_back(static_cast<char>(kind));
  body += payload;
  std::string r;
  PutU32(&r, static_cast<uint32_t>(body.size()));
  PutU32(&r, Crc(body));
  return r + body;
}

Status Errno(const std::string& what) { return InternalError(what + ": " + std::strerror(errno)); }

Status WriteAll(int fd, std::string_view b, const std::string& name) {
  while (!b.empty()) {
    const ssize_t n = ::write(fd, b.data(), b.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("write " + name);
    }
    b.remove_prefix(static_cast<size_t>(n));
  }
  return OkStatus();
}

Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open " + dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? OkStatus() : Errno("fsync " + dir);
}

StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? NotFoundError(path) : Errno("open " + path);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return Errno("read " + path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// Writes `bytes` to dir/name durably: temp file, fsync, rename, directory fsync.
Status WriteDurably(const std::string& dir, const std::string& name, std::string_view bytes) {
  const std::string tmp = dir + "/" + name + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open " + tmp);
  Status s = WriteAll(fd, bytes, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Errno("fsync " + tmp);
  ::close(fd);
  if (!s.ok()) return s;
  if (::rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0) return Errno("rename " + tmp);
  return FsyncDir(dir);
}

}  // namespace

std::string EncodeHardState(const HardState& hs) {
  std::string p;
  PutU64(&p, hs.term);
  PutU64(&p, hs.vote);
  PutU64(&p, hs.commit);
  return Record(kHardStateRecord, p);
}

std::string EncodeEntry(const Entry& e) {
  std::string p;
  PutU64(&p, e.term);
  PutU64(&p, e.index);
  p.push_back(static_cast<char>(e.type));
  p += e.data;
  return Record(kEntryRecord, p);
}

std::string EncodeSnapshot(const Snapshot& s) {
  std::string b(kSnapshotMagic, sizeof kSnapshotMagic);
  PutU64(&b, s.index);
  PutU64(&b, s.term);
  PutU64(&b, s.data.size());
  b += s.data;
  PutU32(&b, Crc(b));
  return b;
}

StatusOr<Snapshot> ParseSnapshot(std::string_view b, const std::string& name) {
  constexpr size_t kHeader = sizeof kSnapshotMagic + 24;
  if (b.size() < kHeader + 4)
    return DataLossError(name + ": " + std::to_string(b.size()) + " bytes, shorter than a header");
  if (std::memcmp(b.data(), kSnapshotMagic, sizeof kSnapshotMagic) != 0)
    return DataLossError(name + ": byte 0: not a raft snapshot (bad magic)");
  Snapshot s;
  s.index = GetU(b, 8, 8);
  s.term = GetU(b, 16, 8);
  const uint64_t len = GetU(b, 24, 8);
  if (len != b.size() - kHeader - 4)
    return DataLossError(name + ": byte 24: data length " + std::to_string(len) + " but " +
                         std::to_string(b.size() - kHeader - 4) + " bytes follow");
  if (static_cast<uint32_t>(GetU(b, b.size() - 4, 4)) != Crc(b.substr(0, b.size() - 4)))
    return DataLossError(name + ": byte " + std::to_string(b.size() - 4) + ": crc mismatch");
  if ((s.index == 0) != (s.term == 0))
    return DataLossError(name + ": byte 8: index " + std::to_string(s.index) + " with term " +
                         std::to_string(s.term));
  s.data.assign(b.substr(kHeader, len));
  return s;
}

namespace {

// An entry record's `body` appended to `log` (entries up to `snapshot_index` are in the snapshot
// and skipped; a later record for an index replaces that entry and those after it). Returns why
// the record is refused, or "".
std::string AddEntry(std::string_view body, uint64_t snapshot_index, std::vector<Entry>* log) {
  if (body.size() < 18) return "entry of " + std::to_string(body.size()) + " bytes, expected >= 18";
  Entry e;
  e.term = GetU(body, 1, 8);
  e.index = GetU(body, 9, 8);
  const uint8_t type = static_cast<uint8_t>(body[17]);
  if (type > static_cast<uint8_t>(EntryType::kNoop)) return "entry type " + std::to_string(type);
  e.type = static_cast<EntryType>(type);
  e.data.assign(body.substr(18));
  if (e.index <= snapshot_index) return "";
  const uint64_t last = log->empty() ? snapshot_index : log->back().index;
  if (e.index > last + 1)
    return "entry " + std::to_string(e.index) + " after " + std::to_string(last) + " leaves a gap";
  while (!log->empty() && log->back().index >= e.index) log->pop_back();
  if (!log->empty() && log->back().term > e.term)
    return "entry " + std::to_string(e.index) + " of term " + std::to_string(e.term) +
           " follows term " + std::to_string(log->back().term);
  log->push_back(std::move(e));
  return "";
}

}  // namespace

StatusOr<ParsedLog> ParseLog(std::string_view b, uint64_t snapshot_index, const std::string& name) {
  ParsedLog out;
  size_t at = 0;
  while (at < b.size()) {
    const auto bad = [&](const std::string& why) -> Status {
      return DataLossError(name + ": record at byte " + std::to_string(at) + ": " + why);
    };
    // A crash during an append leaves a partial record or zeros at the end: a torn tail, which
    // was never synced and so never acknowledged.
    const bool zeros_follow = b.find_first_not_of('\0', at) == std::string_view::npos;
    if (b.size() - at < 9 || zeros_follow) {
      out.torn_tail = true;
      break;
    }
    const uint64_t len = GetU(b, at, 4);
    const uint32_t crc = static_cast<uint32_t>(GetU(b, at + 4, 4));
    if (len == 0 || len > kMaxRecord) return bad("length " + std::to_string(len) + " out of range");
    if (at + 8 + len > b.size()) {
      out.torn_tail = true;
      break;
    }
    const std::string_view body = b.substr(at + 8, len);
    if (Crc(body) != crc) {
      if (at + 8 + len == b.size()) {  // the last record: a torn write that was never synced
        out.torn_tail = true;
        break;
      }
      return bad("crc mismatch");
    }
    const uint8_t kind = static_cast<uint8_t>(body[0]);
    if (kind == kHardStateRecord) {
      if (len != 25) return bad("hard state of " + std::to_string(len) + " bytes, expected 25");
      out.state.hard_state = {GetU(body, 1, 8), GetU(body, 9, 8), GetU(body, 17, 8)};
    } else if (kind == kEntryRecord) {
      if (std::string why = AddEntry(body, snapshot_index, &out.state.entries); !why.empty())
        return bad(why);
    } else {
      return bad("unknown record kind " + std::to_string(kind));
    }
    at += 8 + len;
    out.valid_bytes = at;
  }
  return out;
}

namespace {

// The folder belongs to the group `cluster_id`: a folder that holds another's is refused, so a
// member never joins one group with the votes and entries of another (a job re-created under
// the same name on a volume its predecessor left). A folder without the file is claimed.
Status ClaimForCluster(const std::string& dir, const std::string& cluster_id) {
  const std::string path = dir + "/cluster-id";
  StatusOr<std::string> held = ReadFile(path);
  if (held.ok()) {
    std::string id = *held;
    while (!id.empty() && (id.back() == '\n' || id.back() == '\r')) id.pop_back();
    if (id == cluster_id) return OkStatus();
    return FailedPreconditionError(path + ": this Raft state was written for group '" + id +
                                   "', not '" + cluster_id +
                                   "' (another job's volume?); refusing to start with its votes "
                                   "and entries: delete the folder (or the volume) to start empty");
  }
  if (held.status().code() != StatusCode::kNotFound) return held.status();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << cluster_id << "\n";
    if (!f.flush()) return InternalError("write " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("rename " + tmp);
  return FsyncDir(dir);
}

}  // namespace

StatusOr<std::unique_ptr<Storage>> Storage::Open(const std::string& dir, size_t* torn,
                                                 const std::string& cluster_id) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InternalError("create " + dir + ": " + ec.message());
  if (!cluster_id.empty()) ADAM_RETURN_IF_ERROR(ClaimForCluster(dir, cluster_id));
  std::unique_ptr<Storage> s(new Storage());
  s->dir_ = dir;
  Snapshot snap;
  StatusOr<std::string> sb = ReadFile(dir + "/snapshot");
  if (sb.ok()) {
    StatusOr<Snapshot> parsed = ParseSnapshot(*sb, dir + "/snapshot");
    if (!parsed.ok()) return parsed.status();
    snap = std::move(*parsed);
  } else if (sb.status().code() != StatusCode::kNotFound) {
    return sb.status();
  }
  const std::string log_path = dir + "/raft.log";
  StatusOr<std::string> lb = ReadFile(log_path);
  std::string bytes;
  if (lb.ok())
    bytes = std::move(*lb);
  else if (lb.status().code() != StatusCode::kNotFound)
    return lb.status();
  StatusOr<ParsedLog> parsed = ParseLog(bytes, snap.index, log_path);
  if (!parsed.ok()) return parsed.status();
  if (torn) *torn = bytes.size() - parsed->valid_bytes;
  s->state_ = std::move(parsed->state);
  s->state_.snapshot = std::move(snap);
  if (!s->state_.entries.empty() && s->state_.entries.front().index != s->state_.snapshot.index + 1)
    return DataLossError(
        log_path + ": first entry " + std::to_string(s->state_.entries.front().index) +
        " does not follow the snapshot at " + std::to_string(s->state_.snapshot.index));
  s->fd_ = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (s->fd_ < 0) return Errno("open " + log_path);
  if (parsed->torn_tail && ::ftruncate(s->fd_, static_cast<off_t>(parsed->valid_bytes)) != 0)
    return Errno("truncate " + log_path);
  if (::lseek(s->fd_, static_cast<off_t>(parsed->valid_bytes), SEEK_SET) < 0)
    return Errno("seek " + log_path);
  s->log_bytes_ = parsed->valid_bytes;
  if (!lb.ok()) {
    Status d = FsyncDir(dir);
    if (!d.ok()) return d;
  }
  return s;
}

Storage::~Storage() {
  if (fd_ >= 0) ::close(fd_);
}

Status Storage::Persist(const Ready& ready) {
  if (ready.snapshot) {
    Status st = SaveSnapshot(*ready.snapshot);
    if (!st.ok()) return st;
  }
  if (ready.entries.empty() && !ready.hard_state) return OkStatus();
  std::string batch;
  for (const Entry& e : ready.entries) batch += EncodeEntry(e);
  // The hard state goes after the entries: a torn batch never leaves a commit index that points
  // past the entries on disk.
  if (ready.hard_state) batch += EncodeHardState(*ready.hard_state);
  const std::string name = dir_ + "/raft.log";
  Status st = WriteAll(fd_, batch, name);
  if (!st.ok()) return st;
  // Entries, term and vote must be durable before anything depends on them; a commit index alone
  // can be relearned from the leader, so it rides along with the next sync.
  const bool must_sync = !ready.entries.empty() ||
                         (ready.hard_state && (ready.hard_state->term != state_.hard_state.term ||
                                               ready.hard_state->vote != state_.hard_state.vote));
  if (must_sync && ::fdatasync(fd_) != 0) return Errno("fdatasync " + name);
  log_bytes_ += batch.size();
  Ready only_log;
  only_log.hard_state = ready.hard_state;
  only_log.entries = ready.entries;
  state_.Persist(only_log);
  return OkStatus();
}

Status Storage::SaveSnapshot(const Snapshot& snapshot) {
  if (snapshot.index <= state_.snapshot.index) return OkStatus();
  Status st = WriteSnapshotFile(snapshot);
  if (!st.ok()) return st;
  state_.InstallSnapshot(snapshot);
  return RewriteLog();
}

Status Storage::WriteSnapshotFile(const Snapshot& snapshot) {
  return WriteDurably(dir_, "snapshot", EncodeSnapshot(snapshot));
}

Status Storage::RewriteLog() {
  std::string bytes;
  for (const Entry& e : state_.entries) bytes += EncodeEntry(e);
  bytes += EncodeHardState(state_.hard_state);
  Status st = WriteDurably(dir_, "raft.log", bytes);
  if (!st.ok()) return st;
  const std::string name = dir_ + "/raft.log";
  if (fd_ >= 0) ::close(fd_);
  fd_ = ::open(name.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) return Errno("open " + name);
  log_bytes_ = bytes.size();
  return OkStatus();
}

}  // namespace adam::raft
