// Checkpoint files: write (temp, fsync, rename), parse with checks, restore with fallback.
#include "param_server/checkpoint.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/role_events.h"
#include "core/thread_name.h"
#include "update/codec.h"

namespace adam::ps {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'A', 'D', 'A', 'M', 'C', 'K', 'P', '1'};
constexpr char kEndMagic[8] = {'A', 'D', 'A', 'M', 'E', 'N', 'D', '1'};
// Format 2 adds the epochs finished after the parameter count; format 1 files (no epochs) are
// still read, as 0 epochs.
constexpr uint32_t kFormat = 2;

// Appends little-endian integers and tracks the CRC of everything written.
class Writer {
 public:
  explicit Writer(int fd) : fd_(fd) {}
  Status Put(const void* p, size_t n) {
    crc_ = crc32_z(crc_, static_cast<const Bytef*>(p), n);
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd_, c, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return InternalError(std::string("write: ") + std::strerror(errno));
      }
      c += w;
      n -= size_t(w);
      bytes_ += uint64_t(w);
    }
    return OkStatus();
  }
  template <typename T>
  Status Int(T v) {
    return Put(&v, sizeof v);
  }  // the build targets little-endian machines
  uint32_t crc() const { return uint32_t(crc_); }
  uint64_t bytes() const { return bytes_; }

 private:
  int fd_;
  uLong crc_ = crc32_z(0, nullptr, 0);
  uint64_t bytes_ = 0;
};

// One shard's values, byte planes shuffled (update::Shuffle) and zstd-compressed, as its size then
// its bytes.
Status WriteCompressed(Writer& w, const float* values, int64_t n, BufferPool* pool, int level) {
  const size_t raw = size_t(n) * sizeof(float);
  BufferPool::Buffer planes = pool->Get(raw);
  BufferPool::Buffer packed = pool->Get(ZSTD_compressBound(raw));
  update::Shuffle(values, size_t(n), 4, planes.as<uint8_t>());
  const size_t csize = ZSTD_compress(packed.data(), packed.capacity(), planes.data(), raw, level);
  if (ZSTD_isError(csize)) return InternalError(std::string("zstd: ") + ZSTD_getErrorName(csize));
  ADAM_RETURN_IF_ERROR(w.Int(uint64_t(csize)));
  return w.Put(packed.data(), csize);
}

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  template <typename T>
  Status Int(T* v, const char* what) {
    if (b_.size() - pos_ < sizeof(T))
      return DataLossError("truncated at byte " + std::to_string(pos_) + " reading " + what);
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }
  size_t pos() const { return pos_; }
  size_t left() const { return b_.size() - pos_; }
  const char* here() const { return b_.data() + pos_; }
  void Skip(size_t n) { pos_ += n; }

 private:
  std::string_view b_;
  size_t pos_ = 0;
};

Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return InternalError("open " + dir + ": " + std::strerror(errno));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return InternalError("fsync " + dir + ": " + std::strerror(errno));
  return OkStatus();
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open " + path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s;
}

}  // namespace

std::string CheckpointFileName(uint64_t generation) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "ckpt-%016llx.adam", static_cast<unsigned long long>(generation));
  return buf;
}

uint64_t CheckpointGeneration(const std::string& name) {
  if (name.size() != 5 + 16 + 5 || name.rfind("ckpt-", 0) != 0 || name.substr(21) != ".adam")
    return 0;
  uint64_t g = 0;
  for (char c : name.substr(5, 16)) {
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return 0;
    g = g << 4 | uint64_t(v);
  }
  return g;
}

namespace {

// An entry's values, written in this file: the compressed size, then a zstd frame of
// e->count shuffled floats.
Status ReadValues(Reader& r, CheckpointEntry* e) {
  uint64_t csize = 0;
  ADAM_RETURN_IF_ERROR(r.Int(&csize, "compressed size"));
  if (csize > r.left())
    return DataLossError("byte " + std::to_string(r.pos() - 8) + ": shard " +
                         std::to_string(e->shard) + " claims " + std::to_string(csize) +
                         " compressed bytes, " + std::to_string(r.left()) + " remain");
  const unsigned long long content = ZSTD_getFrameContentSize(r.here(), size_t(csize));
  if (content != uint64_t(e->count) * 4)
    return DataLossError("byte " + std::to_string(r.pos()) + ": shard " + std::to_string(e->shard) +
                         ": compressed frame does not hold " + std::to_string(e->count) +
                         " floats");
  std::vector<uint8_t> planes(size_t(e->count) * 4);
  const size_t got = ZSTD_decompress(planes.data(), planes.size(), r.here(), size_t(csize));
  if (ZSTD_isError(got) || got != planes.size())
    return DataLossError("byte " + std::to_string(r.pos()) + ": shard " + std::to_string(e->shard) +
                         ": " + (ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short frame"));
  e->values.resize(size_t(e->count));
  update::Unshuffle(planes.data(), size_t(e->count), 4, e->values.data());
  r.Skip(size_t(csize));
  return OkStatus();
}

}  // namespace

StatusOr<CheckpointFile> ParseCheckpoint(std::string_view bytes, int64_t max_floats) {
  constexpr size_t kTrailer = 4 + sizeof kEndMagic;
  if (bytes.size() < sizeof kMagic + kTrailer ||
      std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return DataLossError("byte 0: not an Adam checkpoint (bad magic or too short)");
  if (std::memcmp(bytes.data() + bytes.size() - sizeof kEndMagic, kEndMagic, sizeof kEndMagic) != 0)
    return DataLossError("byte " + std::to_string(bytes.size() - sizeof kEndMagic) +
                         ": end marker missing (truncated file)");
  const size_t body = bytes.size() - kTrailer;
  uint32_t want_crc = 0;
  std::memcpy(&want_crc, bytes.data() + body, 4);
  const uint32_t crc = uint32_t(crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data()), body));
  if (crc != want_crc)
    return DataLossError("byte " + std::to_string(body) + ": checksum mismatch (file has " +
                         std::to_string(want_crc) + ", contents give " + std::to_string(crc) + ")");
  Reader r(bytes.substr(0, body));
  r.Skip(sizeof kMagic);
  CheckpointFile f;
  uint32_t format = 0, entries = 0;
  uint64_t num_params = 0;
  ADAM_RETURN_IF_ERROR(r.Int(&format, "format"));
  if (format != 1 && format != kFormat)
    return DataLossError("byte 8: format " + std::to_string(format) + ", this build reads 1 to " +
                         std::to_string(kFormat));
  ADAM_RETURN_IF_ERROR(r.Int(&f.server, "server"));
  ADAM_RETURN_IF_ERROR(r.Int(&f.generation, "generation"));
  ADAM_RETURN_IF_ERROR(r.Int(&num_params, "parameters"));
  if (format >= 2) ADAM_RETURN_IF_ERROR(r.Int(&f.epochs, "epochs"));
  const size_t entries_at = r.pos();
  ADAM_RETURN_IF_ERROR(r.Int(&entries, "entry count"));
  if (num_params > uint64_t(INT64_MAX)) return DataLossError("byte 24: parameter count too large");
  f.num_params = int64_t(num_params);
  if (entries > r.left() / 28)
    return DataLossError("byte " + std::to_string(entries_at) + ": " + std::to_string(entries) +
                         " entries cannot fit");
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t at = r.pos();
    CheckpointEntry e;
    uint64_t count = 0;
    ADAM_RETURN_IF_ERROR(r.Int(&e.shard, "shard id"));
    ADAM_RETURN_IF_ERROR(r.Int(&count, "float count"));
    ADAM_RETURN_IF_ERROR(r.Int(&e.version, "version"));
    ADAM_RETURN_IF_ERROR(r.Int(&e.source, "source generation"));
    if (count > uint64_t(max_floats))
      return DataLossError("byte " + std::to_string(at + 4) + ": shard " + std::to_string(e.shard) +
                           " claims " + std::to_string(count) + " floats, more than " +
                           std::to_string(max_floats));
    e.count = int64_t(count);
    if (e.source > f.generation)
      return DataLossError("byte " + std::to_string(at + 20) + ": shard " +
                           std::to_string(e.shard) + " refers to generation " +
                           std::to_string(e.source) + ", newer than the file");
    if (e.source == f.generation) ADAM_RETURN_IF_ERROR(ReadValues(r, &e));
    f.entries.push_back(std::move(e));
  }
  if (r.left() != 0)
    return DataLossError("byte " + std::to_string(r.pos()) + ": " + std::to_string(r.left()) +
                         " unexpected bytes after the last entry");
  return f;
}

namespace {

// The checkpoint files of one directory, each read and checked against this server's options at
// most once.
class CheckpointFiles {
 public:
  explicit CheckpointFiles(const CheckpointOptions& opt) : opt_(opt) {}

  const StatusOr<CheckpointFile>& Get(uint64_t g) {
    auto it = parsed_.find(g);
    if (it != parsed_.end()) return it->second;
    return parsed_.emplace(g, Load(g)).first->second;
  }

 private:
  StatusOr<CheckpointFile> Load(uint64_t g) const {
    ADAM_ASSIGN_OR_RETURN(std::string bytes, ReadFile(opt_.dir + "/" + CheckpointFileName(g)));
    ADAM_ASSIGN_OR_RETURN(CheckpointFile cf, ParseCheckpoint(bytes, opt_.num_params));
    if (cf.generation != g)
      return DataLossError("holds generation " + std::to_string(cf.generation));
    if (cf.server != opt_.server)
      return DataLossError("belongs to parameter server " + std::to_string(cf.server));
    if (cf.num_params != opt_.num_params)
      return DataLossError("is for a model of " + std::to_string(cf.num_params) +
                           " parameters, not " + std::to_string(opt_.num_params));
    return cf;
  }

  const CheckpointOptions& opt_;
  std::map<uint64_t, StatusOr<CheckpointFile>> parsed_;
};

// Every shard of checkpoint `g` (file `f`) into `r`, those left unchanged since an older
// generation from that generation's file. Empty when complete, else why `g` cannot be used.
std::string Assemble(uint64_t g, const CheckpointFile& f, const std::map<uint32_t, int64_t>& shards,
                     CheckpointFiles& files, Restored* r) {
  for (const auto& e : f.entries) {
    auto want = shards.find(e.shard);
    if (want == shards.end() || want->second != e.count)
      return "shard " + std::to_string(e.shard) + " does not match this server's shard map";
    Restored::Shard s;
    s.version = e.version;
    s.source = e.source;
    if (e.source == g) {
      s.values = e.values;
    } else {
      const auto& src = files.Get(e.source);
      if (!src.ok()) {
        return "shard " + std::to_string(e.shard) + " is in " + CheckpointFileName(e.source) +
               ", which " + "is unusable: " + src.status().message();
      }
      auto it = std::find_if(
          src->entries.begin(), src->entries.end(),
          [&](const CheckpointEntry& x) { return x.shard == e.shard && x.source == e.source; });
      if (it == src->entries.end() || it->count != e.count)
        return "shard " + std::to_string(e.shard) + " is missing from " +
               CheckpointFileName(e.source);
      s.values = it->values;
    }
    r->shards.emplace(e.shard, std::move(s));
  }
  if (r->shards.size() != shards.size())
    return "holds " + std::to_string(r->shards.size()) + " shards, this server has " +
           std::to_string(shards.size());
  return "";
}

}  // namespace

StatusOr<Restored> RestoreCheckpoint(const CheckpointOptions& opt,
                                     const std::map<uint32_t, int64_t>& shards) {
  Restored out;
  std::error_code ec;
  fs::create_directories(opt.dir, ec);
  if (ec) return InternalError("cannot create " + opt.dir + ": " + ec.message());
  std::vector<uint64_t> gens;
  for (const auto& de : fs::directory_iterator(opt.dir, ec)) {
    const std::string name = de.path().filename().string();
    if (name.size() > 4 && name.substr(name.size() - 4) == ".tmp") {
      spdlog::info("removing {} (an interrupted flush)", name);
      fs::remove(de.path(), ec);
      continue;
    }
    if (uint64_t g = CheckpointGeneration(name); g > 0) gens.push_back(g);
  }
  if (gens.empty()) return out;
  std::sort(gens.rbegin(), gens.rend());
  CheckpointFiles files(opt);
  std::vector<std::string> problems;
  for (uint64_t g : gens) {
    const std::string name = CheckpointFileName(g);
    const auto& f = files.Get(g);
    Restored r;
    r.generation = g;
    r.file = name;
    const std::string why = f.ok() ? Assemble(g, *f, shards, files, &r) : f.status().message();
    if (why.empty()) {
      r.epochs = f->epochs;
      return r;
    }
    const std::string msg = "checkpoint " + name + ": " + why;
    spdlog::warn("{}; trying the previous checkpoint", msg);
    events::Emit(events::CheckpointRejected{.file = name, .reason = why});
    problems.push_back(msg);
  }
  std::string all;
  for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p;
  return DataLossError("no usable checkpoint in " + opt.dir + ": " + all +
                       " (move the directory away to start from the initial weights)");
}

Checkpointer::Checkpointer(ParamStore* store, BufferPool* pool, CheckpointOptions options,
                           const Restored& restored, CheckpointMetrics metrics)
    : store_(store), pool_(pool), opt_(std::move(options)), m_(metrics) {
  std::error_code ec;
  fs::create_directories(opt_.dir, ec);  // a failure shows at the first flush, naming the file
  uint64_t newest = restored.generation;
  for (const auto& de : fs::directory_iterator(opt_.dir, ec))
    newest = std::max(newest, CheckpointGeneration(de.path().filename().string()));
  next_generation_ = newest + 1;  // never reuse a name, even a rejected file's
  last_generation_ = restored.generation;
  flushed_epochs_ = restored.epochs;
  for (const auto& [id, s] : restored.shards) {
    flushed_version_[id] = s.version;
    source_[id] = s.source;
  }
  if (restored.generation > 0) {
    std::set<uint64_t> r;
    for (const auto& [id, s] : restored.shards) r.insert(s.source);
    refs_[restored.generation] = {r.begin(), r.end()};
  }
}

Checkpointer::~Checkpointer() { Stop(); }

void Checkpointer::Stop() {
  {
    MutexLock lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Checkpointer::Start() {
  thread_ = NamedThread("checkpoint", [this] { Loop(); });
}

void Checkpointer::Loop() {
  MutexLock lock(stop_mu_);
  while (!opt_.clock->AwaitFor(lock, stop_cv_, opt_.interval,
                               [this]()
                                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(stop_mu_) { return stop_; })) {
    lock.Unlock();
    auto g = Flush();
    if (!g.ok()) spdlog::error("checkpoint failed: {}", g.status().message());
    if (g.ok() && *g > 0 && opt_.after_flush) opt_.after_flush();
    lock.Lock();
  }
}

uint64_t Checkpointer::generation() const {
  MutexLock lock(mu_);
  return last_generation_;
}

std::vector<Checkpointer::OpenFile> Checkpointer::OpenNewest() const {
  MutexLock lock(mu_);  // no flush or prune meanwhile
  std::vector<OpenFile> files;
  auto it = refs_.find(last_generation_);
  if (last_generation_ == 0 || it == refs_.end()) return files;
  std::set<uint64_t> gens(it->second.begin(), it->second.end());
  gens.insert(last_generation_);
  for (uint64_t g : gens) {
    OpenFile f;
    f.name = CheckpointFileName(g);
    f.fd = ::open((opt_.dir + "/" + f.name).c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) {
      for (auto& o : files) ::close(o.fd);
      return {};
    }
    files.push_back(f);
  }
  return files;
}

StatusOr<uint64_t> Checkpointer::Flush() {
  MutexLock lock(mu_);
  return FlushLocked();
}

StatusOr<uint64_t> Checkpointer::FlushLocked() {
  const auto start = opt_.clock->Now();
  const std::vector<uint32_t> ids = store_->shard_ids();
  // Read before the shards (ParamStore::RaiseEpochs): every copy below holds what it says.
  const uint32_t epochs = store_->epochs();
  const std::vector<uint32_t> dirty = Dirty(ids);
  if (dirty.empty() && epochs == flushed_epochs_) return uint64_t{0};
  const uint64_t gen = next_generation_++;
  // Consistent copies of the dirty shards, through the shard workers.
  std::map<uint32_t, ShardCopy> copies;
  for (uint32_t id : dirty) {
    ShardCopy c;
    const int64_t n = store_->ShardSize(id);
    c.values = pool_->Get(size_t(n) * sizeof(float));
    ADAM_ASSIGN_OR_RETURN(c.version, store_->Read(id, c.values.as<float>(), n));
    copies.emplace(id, std::move(c));
  }
  uint64_t bytes = 0;
  ADAM_RETURN_IF_ERROR(WriteGeneration(gen, epochs, ids, copies, &bytes));
  std::map<uint32_t, uint64_t> written;
  for (const auto& [id, c] : copies) written[id] = c.version;
  Commit(gen, epochs, ids, written);
  Record(gen, dirty.size(), epochs, bytes, opt_.clock->SecondsSince(start));
  return gen;
}

Status Checkpointer::WriteGeneration(uint64_t gen, uint32_t epochs,
                                     const std::vector<uint32_t>& ids,
                                     const std::map<uint32_t, ShardCopy>& copies, uint64_t* bytes) {
  const std::string path = opt_.dir + "/" + CheckpointFileName(gen), tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return InternalError("cannot create " + tmp + ": " + std::strerror(errno));
  Writer w(fd);
  auto write_all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
    ADAM_RETURN_IF_ERROR(w.Put(kMagic, sizeof kMagic));
    ADAM_RETURN_IF_ERROR(w.Int(kFormat));
    ADAM_RETURN_IF_ERROR(w.Int(opt_.server));
    ADAM_RETURN_IF_ERROR(w.Int(gen));
    ADAM_RETURN_IF_ERROR(w.Int(uint64_t(opt_.num_params)));
    ADAM_RETURN_IF_ERROR(w.Int(epochs));
    ADAM_RETURN_IF_ERROR(w.Int(uint32_t(ids.size())));
    size_t written = 0;
    for (uint32_t id : ids) {
      const int64_t n = store_->ShardSize(id);
      auto c = copies.find(id);
      const bool fresh = c != copies.end();
      ADAM_RETURN_IF_ERROR(w.Int(id));
      ADAM_RETURN_IF_ERROR(w.Int(uint64_t(n)));
      ADAM_RETURN_IF_ERROR(w.Int(fresh ? c->second.version : flushed_version_.at(id)));
      ADAM_RETURN_IF_ERROR(w.Int(fresh ? gen : source_.at(id)));
      if (fresh) {
        ADAM_RETURN_IF_ERROR(
            WriteCompressed(w, c->second.values.as<float>(), n, pool_, opt_.zstd_level));
      }
      if (++written == ids.size() / 2 && opt_.debug_pause_mid_flush.count() > 0) {
        events::Emit(events::CheckpointWriting{.generation = gen});
        opt_.clock->SleepFor(opt_.debug_pause_mid_flush);
      }
    }
    const uint32_t crc = w.crc();
    ADAM_RETURN_IF_ERROR(w.Int(crc));
    ADAM_RETURN_IF_ERROR(w.Put(kEndMagic, sizeof kEndMagic));
    if (::fsync(fd) != 0) return InternalError("fsync " + tmp + ": " + std::strerror(errno));
    return OkStatus();
  };
  Status st = write_all();
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = InternalError("rename " + tmp + ": " + std::strerror(errno));
  if (st.ok()) st = FsyncDir(opt_.dir);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  *bytes = w.bytes();
  return OkStatus();
}

std::vector<uint32_t> Checkpointer::Dirty(const std::vector<uint32_t>& ids) {
  std::vector<uint32_t> dirty;
  for (uint32_t id : ids) {
    auto it = flushed_version_.find(id);
    if (it == flushed_version_.end() || it->second != store_->Version(id)) dirty.push_back(id);
  }
  return dirty;
}

void Checkpointer::Commit(uint64_t generation, uint32_t epochs, const std::vector<uint32_t>& ids,
                          const std::map<uint32_t, uint64_t>& written) {
  std::set<uint64_t> refs;
  for (uint32_t id : ids) {
    if (auto v = written.find(id); v != written.end()) {
      flushed_version_[id] = v->second;
      source_[id] = generation;
    }
    refs.insert(source_.at(id));
  }
  refs_[generation] = {refs.begin(), refs.end()};
  flushed_epochs_ = epochs;
  const uint64_t previous = last_generation_;
  last_generation_ = generation;
  Prune(previous);
}

void Checkpointer::Record(uint64_t generation, size_t shards, uint32_t epochs, uint64_t bytes,
                          double seconds) {
  if (m_.flushes) m_.flushes->Increment();
  if (m_.bytes) m_.bytes->Increment(double(bytes));
  if (m_.duration) m_.duration->Observe(seconds);
  if (m_.last_success)
    m_.last_success->Set(double(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    opt_.clock->WallNow().time_since_epoch())
                                    .count()) /
                         1000.0);
  if (m_.generation) m_.generation->Set(double(generation));
  events::Emit(events::Checkpoint{.generation = generation,
                                  .shards = int64_t(shards),
                                  .epochs = int(epochs),
                                  .bytes = bytes,
                                  .seconds = seconds});
}

void Checkpointer::Prune(uint64_t previous) {
  // Keep every file the newest checkpoint or its predecessor (the fallback) refers to.
  std::set<uint64_t> keep;
  for (uint64_t g : {last_generation_, previous}) {
    auto it = refs_.find(g);
    if (it == refs_.end()) continue;
    keep.insert(g);
    keep.insert(it->second.begin(), it->second.end());
  }
  for (auto it = refs_.begin(); it != refs_.end();)
    it = keep.count(it->first) ? std::next(it) : refs_.erase(it);
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(opt_.dir, ec)) {
    const uint64_t g = CheckpointGeneration(de.path().filename().string());
    if (g > 0 && g < last_generation_ && !keep.count(g)) fs::remove(de.path(), ec);
  }
}

}  // namespace adam::ps
