// The primary/copy protocol's decisions (param_server/replication.h) on a fake clock, without
// gRPC: the failover simulation runs the same functions under faults.
#include "param_server/replication.h"

#include <gtest/gtest.h>

#include "core/clock.h"
#include "shard/shard_map.h"
#include "testing/shard_maps.h"

namespace adam::ps {
namespace {

using namespace std::chrono_literals;

// The maps below are of a job of four servers.
constexpr uint32_t kServers = 4;

// A primary of shard 0 (copies 1 and 2 in sync, 3 being filled) with a live lease.
struct Primary {
  FakeClock clock;
  Routing routing{0, 300ms, &clock};
  Primary() {
    routing.Update(testing::ShardMapOf(5, {{0, 1, 2}}, {{3}}, kServers));
    routing.CaughtUp(0, 5);
    routing.RenewLease(clock.Now());
  }
  std::map<uint32_t, Routing::Target> Targets() const {
    std::map<uint32_t, Routing::Target> out;
    for (auto& t : routing.Targets()) out[t.shard] = t;
    return out;
  }
};

// A server's store holding shard 0 (16 floats, all zero) and nothing else.
struct OneShard {
  shard::ShardMap map = *shard::ShardMap::Make(16, 64, 1, 7);
  std::vector<float> zeros = std::vector<float>(16, 0.f);
  ParamStore store{map, 0, zeros.data()};
};

TEST(Replication, InSyncCopiesAreDueWhenBehindAndCopiesBeingFilledEveryRound) {
  Primary p;
  const Routing::Target t = p.Targets().at(0);
  SentVersions sent;
  EXPECT_EQ(DueCopies(t, 7, sent), (std::vector<std::string>{"repl-1", "repl-2", "repl-3"}));
  RecordForward(&sent, 0, "repl-1", 7, true);
  RecordForward(&sent, 0, "repl-3", 7, true);
  // repl-1 holds 7; repl-3 is still being filled: sent again until the map has it in sync.
  EXPECT_EQ(DueCopies(t, 7, sent), (std::vector<std::string>{"repl-2", "repl-3"}));
  RecordForward(&sent, 0, "repl-1", 5, true);  // a late answer to an older forward
  EXPECT_EQ(sent.at({0, "repl-1"}), 7u);
  RecordForward(&sent, 0, "repl-1", 8, false);  // refused: its state is unknown
  EXPECT_EQ(sent.count({0, "repl-1"}), 0u);
}

// A copy whose process restarted (a new incarnation in the map) holds nothing of what was sent
// to its predecessor: it is sent its shard again, and holds no push until then.
TEST(Replication, ARestartedCopyIsSentItsShardAgain) {
  Primary p;
  v1::ShardMap m = testing::ShardMapOf(6, {{0, 1, 2}}, {{3}}, kServers);
  for (auto& sv : *m.mutable_servers()) sv.set_incarnation(1);
  ASSERT_TRUE(p.routing.Update(m));
  EXPECT_TRUE(p.routing.TakeRestarted().empty());  // incarnations seen for the first time
  SentVersions sent;
  RecordForward(&sent, 0, "repl-1", 7, true);
  RecordForward(&sent, 0, "repl-2", 7, true);
  const Routing::Target t = p.Targets().at(0);
  EXPECT_EQ(DueCopies(t, 7, sent), (std::vector<std::string>{"repl-3"}));
  m.set_version(7);
  m.mutable_servers(2)->set_incarnation(2);  // ps-2 restarted
  ASSERT_TRUE(p.routing.Update(m));
  ForgetCopies(&sent, p.routing.TakeRestarted());
  EXPECT_EQ(DueCopies(t, 7, sent), (std::vector<std::string>{"repl-2", "repl-3"}));
  EXPECT_EQ(sent.count({0, "repl-1"}), 1u);
  EXPECT_TRUE(p.routing.TakeRestarted().empty());  // said once
}

TEST(Replication, APushIsDurableOnceAQuorumOfInSyncCopiesHoldsItAndRefusedOnceTheLeaseEnds) {
  Primary p;
  SentVersions sent;
  std::string why;
  const std::vector<std::pair<uint32_t, uint64_t>> need = {{0, 7}};
  EXPECT_EQ(CheckDurable(p.routing, p.Targets(), sent, need, &why), Durability::kWaiting);
  RecordForward(&sent, 0, "repl-3", 7, true);  // a copy being filled does not count
  EXPECT_EQ(CheckDurable(p.routing, p.Targets(), sent, need, &why), Durability::kWaiting);
  RecordForward(&sent, 0, "repl-2", 6, true);  // an older version does not count
  EXPECT_EQ(CheckDurable(p.routing, p.Targets(), sent, need, &why), Durability::kWaiting);
  RecordForward(&sent, 0, "repl-2", 7, true);  // one of the two others: a quorum of three
  EXPECT_EQ(CheckDurable(p.routing, p.Targets(), sent, need, &why), Durability::kDurable);
  p.clock.Advance(300ms + 1ns);  // the lease ran out: not acknowledged, whatever the copies hold
  EXPECT_EQ(CheckDurable(p.routing, p.Targets(), sent, need, &why), Durability::kRefused);
  EXPECT_NE(why.find("has not heard from the controller"), std::string::npos) << why;
}

TEST(Replication, ACopyTakesANewerStateRefusesAnOlderTermAndThePrimaryRefusesForwards) {
  FakeClock clock;
  OneShard held;
  ParamStore& store = held.store;
  Routing copy(1, 300ms, &clock);
  copy.Update(testing::ShardMapOf(5, {{0, 1, 2}}, {}, kServers));
  std::vector<float> values(16, 2.f);
  ShardMeta meta;
  meta.version = 4;
  meta.term = 5;
  ASSERT_TRUE(AcceptForward(1, &store, &copy, 0, values.data(), 16, meta, 3, 0).ok());
  EXPECT_EQ(store.Version(0), 4u);
  EXPECT_EQ(store.epochs(), 3u);
  EXPECT_TRUE(copy.Received(0));
  meta.term = 4;  // a deposed primary's
  meta.version = 9;
  const Status stale = AcceptForward(1, &store, &copy, 0, values.data(), 16, meta, 3, 2);
  EXPECT_EQ(stale.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.message().find("ps-2 was deposed"), std::string::npos) << stale.message();
  EXPECT_EQ(store.Version(0), 4u);
  EXPECT_EQ(AcceptForward(1, &store, &copy, 0, values.data(), 15, meta, 3, 0).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(AcceptForward(1, &store, &copy, 3, values.data(), 16, meta, 3, 0).code(),
            StatusCode::kNotFound);
  copy.Update(testing::ShardMapOf(6, {{1, 0, 2}}, {}, kServers));  // now its primary
  EXPECT_EQ(AcceptForward(1, &store, &copy, 0, values.data(), 16, meta, 3, 0).code(),
            StatusCode::kFailedPrecondition);
}

TEST(Replication, APromotedPrimaryStartsFromTheFreshestCopyAndThenServes) {
  FakeClock clock;
  OneShard held;
  ParamStore& store = held.store;
  Routing r(0, 300ms, &clock);
  r.Update(testing::ShardMapOf(8, {{0, 1, 2}}, {}, kServers));
  r.RenewLease(clock.Now());
  const std::vector<Routing::CatchUp> c = r.CatchUps();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].term, 8u);
  EXPECT_EQ(c[0].from, (std::vector<std::string>{"repl-1", "repl-2"}));
  EXPECT_NE(r.Refusal(0), "");
  CopyState older{std::vector<float>(16, 1.f), {}, 2};
  older.meta.version = 10;
  older.meta.term = 3;
  CopyState fresher{std::vector<float>(16, 5.f), {}, 4};
  fresher.meta.version = 2;
  fresher.meta.term = 6;  // a later term wins over a higher version
  auto taken = FinishCatchUp(&store, &r, c[0], {older, fresher});
  ASSERT_TRUE(taken.ok()) << taken.status().message();
  EXPECT_TRUE(*taken);
  std::vector<float> out(16);
  ASSERT_TRUE(store.Read(0, out.data(), 16).ok());
  EXPECT_EQ(out[0], 5.f);
  EXPECT_EQ(store.Term(0), 8u);  // raised to the promotion's
  EXPECT_EQ(store.epochs(), 4u);
  EXPECT_EQ(r.Refusal(0), "");
  // A copy that sent the wrong size: not caught up.
  Routing r2(0, 300ms, &clock);
  r2.Update(testing::ShardMapOf(9, {{0, 1}}, {}, kServers));
  CopyState bad{std::vector<float>(15, 1.f), {}, 0};
  EXPECT_FALSE(FinishCatchUp(&store, &r2, r2.CatchUps()[0], {bad}).ok());
  EXPECT_EQ(r2.CatchUps().size(), 1u);
}

}  // namespace
}  // namespace adam::ps
