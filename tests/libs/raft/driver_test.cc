// The Raft driver (raft/driver.h) over gRPC with its ticks and deadlines on a fake clock: no
// member campaigns before an election timeout of the clock has passed, a proposal commits
// without the clock moving, and one that cannot commit fails exactly at its deadline. No test
// here sleeps.
#include "raft/driver.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/mutex.h"
#include "core/ports.h"
#include "net/grpc.h"
#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam::raft {
namespace {

using std::chrono::milliseconds;

// Remembers the entries applied, in order.
class Log final : public StateMachine {
 public:
  void Apply(const Entry& e) override {
    MutexLock l(mu_);
    applied_.push_back(e.data);
  }
  std::string TakeSnapshot() override { return ""; }
  Status Restore(const Snapshot&) override { return OkStatus(); }
  std::vector<std::string> applied() const {
    MutexLock l(mu_);
    return applied_;
  }

 private:
  mutable Mutex mu_;
  std::vector<std::string> applied_ ABSL_GUARDED_BY(mu_);
};

class DriverOnFakeTime : public ::testing::Test {
 protected:
  static constexpr int kTickMs = 10;
  static constexpr int kElectionTicks = 20;

  void SetUp() override {
    for (NodeId id = 1; id <= 3; ++id) peers_[id] = "127.0.0.1:" + std::to_string(FreePort());
    for (NodeId id = 1; id <= 3; ++id) {
      DriverOptions o;
      o.id = id;
      o.peers = peers_;
      o.dir = dir_.File("member-" + std::to_string(id));
      o.tick = milliseconds(kTickMs);
      o.election_ticks = kElectionTicks;
      o.seed = 7 + id;
      o.clock = &clock_;
      auto d = Driver::Open(o, &logs_[id]);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      auto server = net::StartServer(*net::Transport::Plaintext(), peers_[id], {(*d)->service()});
      ASSERT_TRUE(server.ok()) << server.status().ToString();
      drivers_[id] = std::move(*d);
      servers_[id] = std::move(server->server);
    }
    for (auto& [id, d] : drivers_) d->Start();
    ASSERT_TRUE(clock_.AwaitWaiters(3));
  }
  void TearDown() override {
    for (NodeId id = 1; id <= 3; ++id) Stop(id);
  }
  void Stop(NodeId id) {
    if (servers_[id]) servers_[id]->Shutdown(std::chrono::system_clock::now() + milliseconds(100));
    if (drivers_[id]) drivers_[id]->Stop();
    servers_[id].reset();
  }

  // One tick of the clock, then until every running member has taken it (and what it led to:
  // DriverInfo::ticks is updated with the role the tick left).
  void Tick() {
    std::map<NodeId, uint64_t> before;
    for (const auto& [id, d] : drivers_)
      if (servers_[id]) before[id] = d->info().ticks;
    clock_.Advance(milliseconds(kTickMs));
    for (const auto& [id, ticks] : before) {
      Driver& d = *drivers_[id];
      const uint64_t want = ticks + 1;
      ASSERT_TRUE(adam::testing::Eventually([&] { return d.info().ticks == want; }))
          << "member " << id << " did not take its tick";
    }
  }
  std::optional<NodeId> Leader() const {
    for (const auto& [id, d] : drivers_)
      if (d->info().role == Role::kLeader) return id;
    return std::nullopt;
  }

  FakeClock clock_;
  adam::testing::TmpDir dir_;
  std::map<NodeId, std::string> peers_;
  std::map<NodeId, Log> logs_;
  std::map<NodeId, std::unique_ptr<Driver>> drivers_;
  std::map<NodeId, std::unique_ptr<grpc::Server>> servers_;
};

// Campaigns start at a randomised 20..39 ticks of silence: until 19 ticks have passed (each
// taken by every member before the next) every member is a follower at term 0, however long the
// test takes in real time; once the clock moves on, a leader is elected.
TEST_F(DriverOnFakeTime, NoMemberCampaignsBeforeAnElectionTimeoutOfTheClock) {
  for (int t = 1; t < kElectionTicks; ++t) {
    Tick();
    for (const auto& [id, d] : drivers_) {
      const DriverInfo info = d->info();
      ASSERT_EQ(info.role, Role::kFollower) << "member " << id << " after " << t << " ticks";
      ASSERT_EQ(info.term, 0u) << "member " << id;
    }
  }
  int ticks = kElectionTicks - 1;
  while (!Leader() && ticks < 10 * kElectionTicks) {
    Tick();
    ++ticks;
    // The votes travel over gRPC: give them a moment of real time before the next tick.
    (void)adam::testing::Eventually([&] { return Leader().has_value(); }, milliseconds(20));
  }
  ASSERT_TRUE(Leader().has_value()) << "no leader after " << ticks << " ticks";
}

// A committed proposal needs a quorum's answers, not ticks; one that cannot reach a quorum is
// answered DeadlineExceeded when the clock reaches its deadline, not before, and a blocking
// Propose returns that answer.
TEST_F(DriverOnFakeTime, AProposalCommitsWithoutTicksAndOneWithoutAQuorumFailsAtItsDeadline) {
  for (int t = 0; t < 10 * kElectionTicks && !Leader(); ++t) {
    Tick();
    (void)adam::testing::Eventually([&] { return Leader().has_value(); }, milliseconds(20));
  }
  const std::optional<NodeId> leader = Leader();
  ASSERT_TRUE(leader.has_value());
  Driver& d = *drivers_[*leader];

  Mutex mu;
  std::optional<StatusOr<uint64_t>> first;
  d.ProposeAsync("a", milliseconds(1000), [&](StatusOr<uint64_t> r) {
    MutexLock l(mu);
    first.emplace(std::move(r));
  });
  ASSERT_TRUE(adam::testing::Eventually([&] {
    MutexLock l(mu);
    return first.has_value();
  }));
  {
    MutexLock l(mu);
    ASSERT_TRUE(first->ok()) << first->status().ToString();
  }
  EXPECT_EQ(logs_[*leader].applied().back(), "a");

  // Both followers gone: the next proposal cannot commit.
  for (NodeId id = 1; id <= 3; ++id)
    if (id != *leader) Stop(id);
  std::optional<StatusOr<uint64_t>> second;
  std::thread proposer([&] {
    StatusOr<uint64_t> r = d.Propose("b", milliseconds(100));
    MutexLock l(mu);
    second.emplace(std::move(r));
  });
  ASSERT_TRUE(clock_.AwaitWaiters(2));  // the loop and the proposer
  for (int t = 0; t < 9; ++t) Tick();   // 90 ms: still waiting
  {
    MutexLock l(mu);
    EXPECT_FALSE(second.has_value());
  }
  clock_.Advance(milliseconds(kTickMs));  // 100 ms: the deadline
  proposer.join();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->status().code(), StatusCode::kDeadlineExceeded) << second->status().ToString();
  EXPECT_EQ(logs_[*leader].applied().back(), "a");
}

}  // namespace
}  // namespace adam::raft
