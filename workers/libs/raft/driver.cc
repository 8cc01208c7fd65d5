#include "raft/driver.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "adam/v1/controller.grpc.pb.h"
#include "core/mutex.h"
#include "core/thread_name.h"
#include "net/grpc.h"
#include "raft/storage.h"
#include "raft/wire.h"

namespace adam::raft {
namespace {

// One answer handed from the loop to a thread that waits for it on the driver's clock; the first
// Set wins.
template <class T>
class Answer {
 public:
  void Set(T value) {
    MutexLock l(mu_);
    if (!value_) value_.emplace(std::move(value));
    cv_.notify_all();
  }
  // The answer, or nullopt once `clock` reaches `deadline` without one.
  std::optional<T> Wait(Clock* clock, Clock::TimePoint deadline) {
    MutexLock l(mu_);
    if (!clock->AwaitUntil(l, cv_, deadline,
                           [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return value_.has_value(); }))
      return std::nullopt;
    return std::move(*value_);
  }

 private:
  Mutex mu_;
  std::condition_variable cv_;
  std::optional<T> value_ ABSL_GUARDED_BY(mu_);
};

// One peer's outbound queue over one long-lived client stream (gRPC's callback API). The Raft
// loop starts a write itself when none is in flight (no thread hand-off, never blocking); a
// finished write starts the next with whatever queued meanwhile. A broken stream loses its
// in-flight batch (Raft re-sends) and the next message opens a new one.
class PeerSender {
 public:
  PeerSender(const net::Transport& transport, const std::string& address)
      : stub_(v1::RaftTransport::NewStub(net::MakeChannel(transport, address))) {}
  ~PeerSender() {
    Stream* release = nullptr;
    {
      MutexLock l(mu_);
      stopping_ = true;
      if (stream_ != nullptr) {
        stream_->ctx.TryCancel();  // a write in flight fails and releases the stream
        if (!stream_->writing && stream_->held) {
          stream_->held = false;
          release = stream_;
        }
        stream_ = nullptr;
      }
    }
    if (release != nullptr) release->RemoveHold();
    MutexLock l(mu_);
    l.Await(cv_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return streams_ == 0; });
  }
  void Enqueue(const Message& m) {
    Stream* start = nullptr;
    {
      MutexLock l(mu_);
      if (stopping_) return;
      if (queue_.size() >= 4096) queue_.pop_front();  // a peer that is down: Raft re-sends
      queue_.push_back(m);
      if (stream_ == nullptr) {
        stream_ = new Stream(this);
        ++streams_;
        stub_->async()->Stream(&stream_->ctx, &stream_->ack, stream_);
        stream_->AddHold();  // writes start from outside the reactor's callbacks
        stream_->StartCall();
      }
      if (!stream_->writing) start = TakeBatch(stream_);
    }
    if (start != nullptr) start->StartWrite(&start->batch);
  }

 private:
  struct Stream final : public grpc::ClientWriteReactor<v1::RaftBatch> {
    explicit Stream(PeerSender* o) : owner(o) {}
    void OnWriteDone(bool ok) override { owner->WriteDone(this, ok); }
    void OnDone(const grpc::Status&) override { owner->StreamDone(this); }
    PeerSender* owner;
    grpc::ClientContext ctx;
    v1::RaftAck ack;
    v1::RaftBatch batch;
    bool writing = false;
    bool held = true;
  };

  // Moves the queue into `s`'s batch; nullptr when there is nothing to send.
  Stream* TakeBatch(Stream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (queue_.empty()) {
      s->writing = false;
      return nullptr;
    }
    s->batch.Clear();
    for (const Message& m : queue_) MessageToProto(m, s->batch.add_messages());
    queue_.clear();
    s->writing = true;
    return s;
  }

  void WriteDone(Stream* s, bool ok) {
    Stream* next = nullptr;
    bool release = false;
    {
      MutexLock l(mu_);
      if (!ok || stopping_ || stream_ != s) {
        // Broken (or closing): drop this stream; the next message opens a new one.
        s->writing = false;
        if (stream_ == s) stream_ = nullptr;
        release = s->held;
        s->held = false;
      } else {
        next = TakeBatch(s);
      }
    }
    if (next != nullptr) next->StartWrite(&next->batch);
    if (release) s->RemoveHold();
  }

  void StreamDone(Stream* s) {
    MutexLock l(mu_);
    if (stream_ == s) stream_ = nullptr;
    delete s;
    --streams_;
    cv_.notify_all();
  }

  std::unique_ptr<v1::RaftTransport::Stub> stub_;
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<Message> queue_ ABSL_GUARDED_BY(mu_);
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;  // the open stream, if any
  int streams_ ABSL_GUARDED_BY(mu_) = 0;  // streams not yet done (the destructor waits for them)
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

struct Driver::Impl final : public v1::RaftTransport::Service {
  DriverOptions options;
  StateMachine* machine = nullptr;
  std::unique_ptr<Storage> storage;
  std::optional<Node> node;
  std::map<NodeId, std::unique_ptr<PeerSender>> senders;
  std::function<void(Role, uint64_t)> on_role;

  struct Proposal {
    std::string data;
    Clock::TimePoint deadline;
    std::function<void(StatusOr<uint64_t>)> done;  // called once
  };
  struct Read {
    Answer<Status> done;
  };

  mutable Mutex mu;
  std::condition_variable cv;
  std::vector<Message> inbox ABSL_GUARDED_BY(mu);
  std::vector<std::shared_ptr<Proposal>> proposals_in ABSL_GUARDED_BY(mu);
  std::vector<std::shared_ptr<Read>> reads_in ABSL_GUARDED_BY(mu);
  bool running ABSL_GUARDED_BY(mu) = false;
  DriverInfo info ABSL_GUARDED_BY(mu);
  std::thread loop;

  // Loop-thread state.
  std::map<uint64_t, std::pair<uint64_t, std::shared_ptr<Proposal>>> waiting;  // index -> term
  std::map<std::string, std::shared_ptr<Read>> reads;                          // by context
  std::vector<std::pair<uint64_t, std::shared_ptr<Read>>> confirmed;           // read index
  uint64_t read_seq = 0;
  uint64_t applied = 0;
  uint64_t ticks_total = 0;
  Role last_role = Role::kFollower;
  uint64_t last_term = 0;
  uint64_t proposals_total = 0;

  Status Deliver(const v1::RaftBatch& batch) {
    std::vector<Message> ms;
    for (const v1::RaftMessage& p : batch.messages()) {
      StatusOr<Message> m = MessageFromProto(p);
      if (!m.ok()) return m.status();
      ms.push_back(std::move(*m));
    }
    MutexLock l(mu);
    for (Message& m : ms) inbox.push_back(std::move(m));
    cv.notify_all();
    return OkStatus();
  }

  grpc::Status Stream(grpc::ServerContext* ctx, grpc::ServerReader<v1::RaftBatch>* reader,
                      v1::RaftAck*) override {
    v1::RaftBatch batch;
    while (reader->Read(&batch)) {
      if (Status s = Deliver(batch); !s.ok())
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, s.message());
      {
        MutexLock l(mu);
        if (!running) break;
      }
    }
    (void)ctx;
    return grpc::Status::OK;
  }

  void Run() {
    Clock* const clock = options.clock;
    auto next_tick = clock->Now() + options.tick;
    for (;;) {
      std::vector<Message> msgs;
      std::vector<std::shared_ptr<Proposal>> props;
      std::vector<std::shared_ptr<Read>> rds;
      {
        MutexLock l(mu);
        clock->AwaitUntil(l, cv, next_tick, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
          return !running || !inbox.empty() || !proposals_in.empty() || !reads_in.empty();
        });
        if (!running) break;
        msgs.swap(inbox);
        props.swap(proposals_in);
        rds.swap(reads_in);
      }
      for (const Message& m : msgs) node->Step(m);
      for (auto& p : props) StartProposal(p);
      for (auto& r : rds) StartRead(r);
      const auto now = clock->Now();
      if (now >= next_tick) {
        ExpireProposals(now);
        node->Tick();
        ++ticks_total;
        next_tick += options.tick;
        if (next_tick < now) next_tick = now + options.tick;  // fell behind: do not burst
      }
      HandleReady();
    }
    // Stopped: fail whatever still waits.
    for (auto& [i, w] : waiting) w.second->done(UnavailableError("raft driver stopped"));
    waiting.clear();
    for (auto& [c, r] : reads) r->done.Set(UnavailableError("raft driver stopped"));
    reads.clear();
    for (auto& [i, r] : confirmed) r->done.Set(UnavailableError("raft driver stopped"));
    confirmed.clear();
  }

  // A proposal handed to the node: answered now when it cannot be proposed, else kept until its
  // entry commits (a proposal that waited at the same index, replaced, is answered).
  void StartProposal(const std::shared_ptr<Proposal>& p) {
    StatusOr<uint64_t> index = node->Propose(std::move(p->data));
    if (!index.ok()) {
      p->done(index.status());
      return;
    }
    if (auto old = waiting.find(*index); old != waiting.end())
      old->second.second->done(UnavailableError("raft: a new leader replaced the entry; retry"));
    waiting[*index] = {node->term(), p};
    ++proposals_total;
  }

  // A read barrier: its ReadIndex context sent, kept until a quorum confirms it.
  void StartRead(const std::shared_ptr<Read>& r) {
    const std::string ctx = std::to_string(options.id) + "-" + std::to_string(++read_seq);
    Status s = node->ReadIndex(ctx);
    if (!s.ok())
      r->done.Set(s);
    else
      reads[ctx] = r;
  }

  // Proposals past their deadline are answered (they may still commit).
  void ExpireProposals(Clock::TimePoint now) {
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (now < it->second.second->deadline) {
        ++it;
        continue;
      }
      it->second.second->done(DeadlineExceededError("raft: not committed in time"));
      it = waiting.erase(it);
    }
  }

  void HandleReady() {
    for (;;) {
      Ready rd = node->TakeReady();
      if (rd.empty()) break;
      SendAndPersist(rd);
      if (rd.snapshot) Restore(*rd.snapshot);
      Apply(rd);
    }
    CompactIfDue();
    if (node->role() != last_role || node->term() != last_term) RoleChanged();
    MutexLock l(mu);
    info = {node->role(), node->term(),    node->leader(),       node->commit(),
            applied,      proposals_total, storage->log_bytes(), ticks_total};
  }

  // A leader's appends go out before its own fsync (Raft thesis 10.2.1): the leader counts
  // itself towards a commit, but it acknowledges nothing before this Ready's persist returns,
  // because this thread applies entries only after it. Votes and answers wait for the disk.
  void SendAndPersist(const Ready& rd) {
    auto leader_message = [](const Message& m) {
      return m.type == MessageType::kAppend || m.type == MessageType::kHeartbeat ||
             m.type == MessageType::kSnapshot;
    };
    auto send = [&](const Message& m) {
      auto it = senders.find(m.to);
      if (it != senders.end()) it->second->Enqueue(m);
    };
    for (const Message& m : rd.messages)
      if (leader_message(m)) send(m);
    if (Status s = storage->Persist(rd); !s.ok()) {
      // Continuing without durable state could break Raft's promises: stop the member.
      spdlog::critical("raft: cannot persist: {}", s.message());
      std::_Exit(1);
    }
    for (const Message& m : rd.messages)
      if (!leader_message(m)) send(m);
  }

  void Restore(const Snapshot& snapshot) {
    if (Status s = machine->Restore(snapshot); !s.ok()) {
      spdlog::critical("raft: cannot restore the snapshot at {}: {}", snapshot.index, s.message());
      std::_Exit(1);
    }
    applied = snapshot.index;
    // Proposals at or below the snapshot were either committed elsewhere or replaced.
    while (!waiting.empty() && waiting.begin()->first <= applied) {
      waiting.begin()->second.second->done(
          UnavailableError("raft: entry replaced by a snapshot; retry"));
      waiting.erase(waiting.begin());
    }
  }

  // The committed entries into the state machine, answering their proposals; then the reads
  // whose index is applied.
  void Apply(const Ready& rd) {
    for (const Entry& e : rd.committed) {
      if (e.type == EntryType::kNormal) machine->Apply(e);
      applied = e.index;
      auto it = waiting.find(e.index);
      if (it != waiting.end()) {
        if (it->second.first == e.term)
          it->second.second->done(e.index);
        else
          it->second.second->done(UnavailableError("raft: a new leader replaced the entry; retry"));
        waiting.erase(it);
      }
    }
    for (const ReadState& rs : rd.read_states) {
      auto it = reads.find(rs.context);
      if (it == reads.end()) continue;
      confirmed.push_back({rs.index, it->second});
      reads.erase(it);
    }
    for (auto it = confirmed.begin(); it != confirmed.end();) {
      if (it->first <= applied) {
        it->second->done.Set(OkStatus());
        it = confirmed.erase(it);
      } else {
        ++it;
      }
    }
  }

  void CompactIfDue() {
    if (applied < node->snapshot().index + options.snapshot_entries) return;
    if (!node->Compact(applied, machine->TakeSnapshot()).ok()) return;
    if (Status s = storage->SaveSnapshot(node->snapshot()); !s.ok()) {
      spdlog::critical("raft: cannot save a snapshot: {}", s.message());
      std::_Exit(1);
    }
  }

  // A new role or term: a leader that lost leadership fails the reads it was confirming.
  void RoleChanged() {
    if (last_role == Role::kLeader && node->role() != Role::kLeader) {
      const std::string why = "raft: lost leadership; retry at the new leader";
      for (auto& [c, r] : reads) r->done.Set(FailedPreconditionError(why));
      reads.clear();
      for (auto& [i, r] : confirmed) r->done.Set(FailedPreconditionError(why));
      confirmed.clear();
    }
    last_role = node->role();
    last_term = node->term();
    if (on_role) on_role(last_role, last_term);
  }
};

Driver::Driver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Driver::~Driver() { Stop(); }

StatusOr<std::unique_ptr<Driver>> Driver::Open(const DriverOptions& options,
                                               StateMachine* machine) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->machine = machine;
  ADAM_ASSIGN_OR_RETURN(impl->storage, Storage::Open(options.dir, nullptr, options.cluster_id));
  const PersistentState& st = impl->storage->state();
  if (st.snapshot.index > 0) ADAM_RETURN_IF_ERROR(machine->Restore(st.snapshot));
  impl->applied = st.snapshot.index;
  Config c;
  c.id = options.id;
  for (const auto& [id, addr] : options.peers) c.peers.push_back(id);
  c.election_ticks = options.election_ticks;
  c.heartbeat_ticks = options.heartbeat_ticks;
  c.seed = options.seed;
  ADAM_ASSIGN_OR_RETURN(Node n, Node::Make(c, st));
  impl->node.emplace(std::move(n));
  impl->last_term = impl->node->term();
  return std::unique_ptr<Driver>(new Driver(std::move(impl)));
}

grpc::Service* Driver::service() { return impl_.get(); }

void Driver::OnRoleChange(std::function<void(Role, uint64_t)> callback) {
  impl_->on_role = std::move(callback);
}

void Driver::Start() {
  for (const auto& [id, addr] : impl_->options.peers)
    if (id != impl_->options.id)
      impl_->senders[id] = std::make_unique<PeerSender>(*impl_->options.transport, addr);
  {
    MutexLock l(impl_->mu);
    impl_->running = true;
  }
  impl_->loop = NamedThread("raft", [this] {
    impl_->HandleReady();  // re-apply committed entries restored from disk
    impl_->Run();
  });
}

void Driver::Stop() {
  {
    MutexLock l(impl_->mu);
    if (!impl_->running && !impl_->loop.joinable()) return;
    impl_->running = false;
    impl_->cv.notify_all();
  }
  if (impl_->loop.joinable()) impl_->loop.join();
  impl_->senders.clear();
}

void Driver::ProposeAsync(std::string data, std::chrono::milliseconds timeout,
                          std::function<void(StatusOr<uint64_t>)> done) {
  auto p = std::make_shared<Impl::Proposal>();
  p->data = std::move(data);
  p->deadline = impl_->options.clock->Now() + timeout;
  p->done = std::move(done);
  {
    MutexLock l(impl_->mu);
    if (impl_->running) {
      impl_->proposals_in.push_back(p);
      impl_->cv.notify_all();
      return;
    }
  }
  p->done(UnavailableError("raft driver not running"));
}

StatusOr<uint64_t> Driver::Propose(std::string data, std::chrono::milliseconds timeout) {
  Clock* const clock = impl_->options.clock;
  auto result = std::make_shared<Answer<StatusOr<uint64_t>>>();
  // The loop answers at the deadline at the latest; the wait below has a margin for a busy loop.
  const auto until = clock->Now() + timeout + std::chrono::milliseconds(500);
  ProposeAsync(std::move(data), timeout,
               [result](StatusOr<uint64_t> r) { result->Set(std::move(r)); });
  std::optional<StatusOr<uint64_t>> r = result->Wait(clock, until);
  if (!r)
    return DeadlineExceededError("raft: not committed within " + std::to_string(timeout.count()) +
                                 " ms");
  return std::move(*r);
}

Status Driver::ReadBarrier(std::chrono::milliseconds timeout) {
  Clock* const clock = impl_->options.clock;
  const auto until = clock->Now() + timeout;
  auto r = std::make_shared<Impl::Read>();
  {
    MutexLock l(impl_->mu);
    if (!impl_->running) return UnavailableError("raft driver not running");
    impl_->reads_in.push_back(r);
    impl_->cv.notify_all();
  }
  std::optional<Status> s = r->done.Wait(clock, until);
  if (!s)
    return DeadlineExceededError("raft: read not confirmed within " +
                                 std::to_string(timeout.count()) + " ms");
  return *s;
}

DriverInfo Driver::info() const {
  MutexLock l(impl_->mu);
  return impl_->info;
}

}  // namespace adam::raft
