#include "param_server/routing.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "core/clock.h"
#include "net/grpc.h"
#include "param_server/forwarder.h"
#include "param_server/param_store.h"
#include "param_server/replica_service.h"
#include "shard/shard_map.h"
#include "testing/shard_maps.h"
#include "testing/wait.h"

namespace adam::ps {
namespace {

using testing::Eventually;

v1::ShardMap Map(uint64_t version, std::vector<std::vector<uint32_t>> replicas,
                 std::vector<std::vector<uint32_t>> copying = {}) {
  return testing::ShardMapOf(version, replicas, copying);
}

TEST(Routing, ServesOnlyItsPrimaryShardsWhileItsLeaseLasts) {
  FakeClock clock;
  Routing r(1, std::chrono::milliseconds(50), &clock);
  EXPECT_NE(r.Refusal(0).find("no shard map yet"), std::string::npos);
  ASSERT_TRUE(r.Update(Map(3, {{1, 0, 2}, {0, 1, 2}})));
  EXPECT_FALSE(r.Update(Map(2, {{0, 1, 2}, {0, 1, 2}})));  // older: ignored
  EXPECT_NE(r.Refusal(0).find("has not heard from the controller"), std::string::npos);
  const Clock::TimePoint sent = clock.Now();
  clock.Advance(std::chrono::milliseconds(10));  // the heartbeat's round trip
  r.RenewLease(sent);
  // A shard it becomes the primary of is served once read from its other copies.
  EXPECT_NE(r.Refusal(0).find("from its other copies"), std::string::npos);
  r.CaughtUp(0, 2);  // another promotion's: changes nothing
  EXPECT_NE(r.Refusal(0).find("from its other copies"), std::string::npos);
  r.CaughtUp(0, 3);
  EXPECT_EQ(r.Refusal(0), "");
  EXPECT_EQ(r.Refusal(1),
            "ps-1 is not the primary of shard 1 at shard map version 3; the primary is ps-0");
  EXPECT_EQ(r.primaries(), 1);
  // The lease counts from when the heartbeat was sent, not when its answer came.
  clock.Advance(std::chrono::milliseconds(40));
  EXPECT_EQ(r.Refusal(0), "");
  clock.Advance(std::chrono::milliseconds(1));
  EXPECT_NE(r.Refusal(0).find("has not heard"), std::string::npos);  // lease ran out
  // A renewal older than the lease in hand does not shorten it; a newer one extends it.
  r.RenewLease(sent + std::chrono::milliseconds(45));
  EXPECT_EQ(r.Refusal(0), "");
  r.RenewLease(sent);
  EXPECT_EQ(r.Refusal(0), "");
  clock.Advance(std::chrono::milliseconds(45));
  EXPECT_NE(r.Refusal(0).find("has not heard"), std::string::npos);
}

TEST(Routing, ForwardsToTheOtherCopiesAndReportsPromotionsOnce) {
  Routing r(0);
  ASSERT_TRUE(r.Update(Map(5, {{0, 1, 2}, {1, 0}}, {{}, {2}})));
  EXPECT_TRUE(r.ForwardTargets().empty());  // nothing forwarded before it caught up
  r.CaughtUp(0, 5);
  auto targets = r.ForwardTargets();
  ASSERT_EQ(targets.size(), 1u);
  EXPECT_EQ(targets[0].first, 0u);
  EXPECT_EQ(targets[0].second, (std::vector<std::string>{"repl-1", "repl-2"}));
  EXPECT_FALSE(r.TakePromotion(0));  // primary from the first map: not a promotion
  ASSERT_TRUE(r.Update(Map(6, {{0, 1, 2}, {0, 2}})));  // ps-1 died: shard 1 moves here
  EXPECT_TRUE(r.TakePromotion(1));
  EXPECT_FALSE(r.TakePromotion(1));
  r.CaughtUp(1, 6);
  auto t = r.ForwardTargets();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].second, (std::vector<std::string>{"repl-2"}));
}

// Elastic servers hand primaries over while the old primary runs (the map's handoff_from): it may
// acknowledge pushes until its lease runs out, so its successor reads the copies only after the
// lease and its margin. A failover (no handoff_from) reads them at once.
TEST(Routing, AShardHandedOverByALivePrimaryIsReadOnlyOnceItsLeaseRanOut) {
  using std::chrono::milliseconds;
  FakeClock clock;
  Routing r(1, milliseconds(300), &clock);
  ASSERT_TRUE(r.Update(Map(3, {{0, 1, 2}, {0, 1, 2}})));
  r.RenewLease(clock.Now());
  v1::ShardMap handed = Map(4, {{1, 0, 2}, {0, 1, 2}});  // shard 0: ps-0 -> ps-1, ps-0 running
  handed.mutable_shards(0)->set_handoff_from(0);
  ASSERT_TRUE(r.Update(handed));
  EXPECT_TRUE(r.CatchUps().empty());
  EXPECT_NE(r.Refusal(0).find("from its other copies"), std::string::npos);
  clock.Advance(milliseconds(300) + kLeaseMargin - milliseconds(1));
  EXPECT_TRUE(r.CatchUps().empty());
  clock.Advance(milliseconds(1));
  auto c = r.CatchUps();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].shard, 0u);
  EXPECT_EQ(c[0].from, (std::vector<std::string>{"repl-0", "repl-2"}));
  r.CaughtUp(0, 4);
  r.RenewLease(clock.Now());
  EXPECT_EQ(r.Refusal(0), "");

  Routing failover(2, milliseconds(300), &clock);
  ASSERT_TRUE(failover.Update(Map(3, {{0, 1, 2}})));
  v1::ShardMap m = Map(4, {{2, 1}});
  m.mutable_servers(0)->set_alive(false);
  ASSERT_TRUE(failover.Update(m));
  ASSERT_EQ(failover.CatchUps().size(), 1u);
  EXPECT_EQ(failover.CatchUps()[0].from, std::vector<std::string>{"repl-1"});
}

TEST(Routing, RetiresOnlyOnceTheMapWantsItNoMoreAndHoldsNothingOfIt) {
  Routing r(3);
  auto map = [](uint64_t v, std::vector<std::vector<uint32_t>> replicas,
                std::vector<std::vector<uint32_t>> copying, uint32_t wanted) {
    v1::ShardMap m = testing::ShardMapOf(v, replicas, copying, 4);
    m.set_servers_wanted(wanted);
    return m;
  };
  EXPECT_FALSE(r.Retired());  // no map yet
  ASSERT_TRUE(r.Update(map(1, {{0, 3}, {1, 2}}, {}, 4)));
  EXPECT_FALSE(r.Retired());
  ASSERT_TRUE(r.Update(map(2, {{0, 3}, {1, 2}}, {}, 3)));
  EXPECT_FALSE(r.Retired());  // leaving, still holds shard 0
  ASSERT_TRUE(r.Update(map(3, {{0, 1}, {1, 2}}, {{}, {3}}, 3)));
  EXPECT_FALSE(r.Retired());  // being filled with shard 1
  ASSERT_TRUE(r.Update(map(4, {{0, 1}, {1, 2}}, {}, 3)));
  EXPECT_TRUE(r.Retired());
  ASSERT_TRUE(r.Update(map(5, {{0, 1}, {1, 2}}, {}, 0)));
  EXPECT_FALSE(r.Retired());  // a map without a count (an older controller) sends nobody away
  Routing wanted(2);
  ASSERT_TRUE(wanted.Update(map(1, {{0, 1}, {1, 0}}, {}, 3)));
  EXPECT_FALSE(wanted.Retired());  // wanted, though it holds nothing yet
}

TEST(Routing, ACopyIsInSyncOnlyAfterAForwardWhileAssigned) {
  Routing r(2);
  ASSERT_TRUE(r.Update(Map(1, {{0, 1}}, {{2}})));
  EXPECT_EQ(r.Copying(), std::vector<uint32_t>{0});
  EXPECT_FALSE(r.Received(0));
  r.MarkReceived(0);
  EXPECT_TRUE(r.Received(0));
  ASSERT_TRUE(r.Update(Map(2, {{0, 1}})));  // unassigned: a later assignment starts afresh
  EXPECT_FALSE(r.Received(0));
}

// Replication lag, on the routing's fake clock: 0 while rounds leave every copy current; from
// the first round that cannot reach a copy, the time since the forwarder last had every copy
// current, to the millisecond; 0 again after the next round once no copy is behind.
TEST(Forwarder, ReportsLagWhileACopyIsUnreachable) {
  auto map = shard::ShardMap::Make(2000, 4000, 1, 1);  // shards 0 and 1 of 1000 floats
  ASSERT_TRUE(map.ok());
  std::vector<float> init(2000, 1.f);
  ParamStore store(*map, 0, init.data());
  FakeClock clock;
  Routing r(0, std::chrono::milliseconds(300), &clock);
  v1::ShardMap m = Map(1, {{0, 1}, {0, 1}});
  m.mutable_servers(1)->set_replication_address("127.0.0.1:1");  // nothing listens there
  ASSERT_TRUE(r.Update(m));
  Forwarder f(net::Transport::Plaintext(), 0, &r, &store, std::chrono::milliseconds(20));
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(f.lag_seconds(), 0);
  clock.Advance(std::chrono::milliseconds(20));  // the first round: the copy is not there
  ASSERT_TRUE(Eventually([&] { return f.lag_seconds() > 0; }));
  EXPECT_NEAR(f.lag_seconds(), 0.020, 1e-9);
  clock.Advance(std::chrono::seconds(1));
  EXPECT_NEAR(f.lag_seconds(), 1.020, 1e-9);
  // No copies to keep current: in sync from the next round.
  ASSERT_TRUE(r.Update(Map(2, {{0}, {0}})));
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(std::chrono::milliseconds(20));
  EXPECT_TRUE(Eventually([&] { return f.lag_seconds() == 0; }));
  f.Stop();
}

// A copy that takes connections but never answers (its packets dropped, its process frozen):
// the lag shows it within a forward's deadline, and the copy is skipped for the round's other
// shards instead of holding the round up once per shard. Before, the lag read 0 for the whole
// 2 s round (two shards, 1 s each).
TEST(Forwarder, ACopyThatNeverAnswersShowsAsLagWithinAForwardsDeadline) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 16), 0);  // the kernel completes connections; nobody reads them
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto map = shard::ShardMap::Make(2000, 4000, 1, 1);
  ASSERT_TRUE(map.ok());
  std::vector<float> init(2000, 1.f);
  ParamStore store(*map, 0, init.data());
  Routing r(0);
  v1::ShardMap m = Map(1, {{0, 1}, {0, 1}});
  m.mutable_servers(1)->set_replication_address("127.0.0.1:" +
                                                std::to_string(ntohs(addr.sin_port)));
  ASSERT_TRUE(r.Update(m));
  Forwarder f(net::Transport::Plaintext(), 0, &r, &store, std::chrono::milliseconds(20));
  // A lag is shown at the latest once the first forward's deadline passed (its round is stuck).
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return f.lag_seconds() > 0; }));
  EXPECT_LT(std::chrono::steady_clock::now() - t0,
            Forwarder::kForwardDeadline + std::chrono::milliseconds(500));
  EXPECT_TRUE(Eventually([&] { return f.lag_seconds() > 1.0; }));
  f.Stop();
  close(fd);
}

// A push re-sent after its answer was lost (same session, seq and part) is applied once; another
// process's push (a new session) is applied whatever its seq.
TEST(ParamStoreMarks, AResentPushIsAppliedOnce) {
  auto map = shard::ShardMap::Make(8, 16, 1, 1);  // two shards of 4 floats
  ASSERT_TRUE(map.ok());
  std::vector<float> init(8, 0.f);
  ParamStore store(*map, 0, init.data());
  const float one[4] = {1, 1, 1, 1};
  auto push = [&](uint64_t session, uint64_t seq, int parts) {
    std::vector<Op> ops(static_cast<size_t>(parts));
    std::vector<uint64_t> versions(ops.size());
    std::mutex mu;
    std::condition_variable cv;
    int left = parts;
    Completion done(parts, [&] {
      std::lock_guard<std::mutex> l(mu);
      left = 0;
      cv.notify_all();
    });
    for (int i = 0; i < parts; ++i) {
      Op& op = ops[size_t(i)];
      op.kind = Op::Kind::kAdd;
      op.shard = 0;
      op.offset = i;
      op.count = 1;
      op.values = one;
      op.trainer = 1;
      op.session = session;
      op.seq = seq;
      op.part = uint32_t(i);
      op.applied_version = &versions[size_t(i)];
      op.done = &done;
    }
    store.Submit(ops.data(), ops.size());
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return left == 0; });
    return versions;
  };
  EXPECT_EQ(push(7, 1, 2), (std::vector<uint64_t>{2, 2}));  // both parts, in one run
  EXPECT_EQ(push(7, 1, 2), (std::vector<uint64_t>{2, 2}));  // re-sent: dropped, version kept
  push(7, 2, 1);
  push(9, 1, 1);  // a restarted trainer
  std::vector<float> out(4);
  auto meta = store.ReadState(0, out.data(), 4);
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(out, (std::vector<float>{3, 1, 0, 0}));
  EXPECT_EQ(meta->version, 4u);
  ASSERT_EQ(meta->marks.size(), 2u);
  EXPECT_EQ(meta->marks[1].session, 9u);
  // The marks travel with the state: a copy given it drops the same re-sent push.
  ParamStore copy(*map, 0, init.data());
  ASSERT_TRUE(copy.SetState(0, out.data(), 4, *meta).ok());
  auto again = copy.ReadState(0, out.data(), 4);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->marks[1].session, 9u);
  EXPECT_EQ(again->marks[1].seq, 1u);
}

// States order by (term, version): an older term is refused whatever its version, the same term
// replaces only an older version, a newer term replaces any.
TEST(ParamStoreMarks, ACopyTakesOnlyANewerState) {
  auto map = shard::ShardMap::Make(4, 16, 1, 1);
  ASSERT_TRUE(map.ok());
  std::vector<float> init(4, 0.f), v(4, 5.f), out(4);
  ParamStore store(*map, 0, init.data());
  ShardMeta m;
  m.term = 3;
  m.version = 10;
  EXPECT_EQ(*store.SetState(0, v.data(), 4, m), SetResult::kApplied);
  m.version = 9;
  EXPECT_EQ(*store.SetState(0, init.data(), 4, m), SetResult::kHeld);
  m.term = 2;
  m.version = 100;
  EXPECT_EQ(*store.SetState(0, init.data(), 4, m), SetResult::kStale);
  ASSERT_TRUE(store.ReadState(0, out.data(), 4).ok());
  EXPECT_EQ(out, v);
  m.term = 4;
  m.version = 1;
  EXPECT_EQ(*store.SetState(0, init.data(), 4, m), SetResult::kApplied);
  EXPECT_EQ(store.Term(0), 4u);
  ASSERT_TRUE(store.RaiseTerm(0, 2).ok());  // never lowered
  EXPECT_EQ(store.Term(0), 4u);
}

// A state's identity survives the wire; a mark of a trainer index out of range is refused,
// named, instead of growing the marks without bound.
TEST(ParamStoreMarks, TheWireKeepsTheIdentityAndRefusesAnOutOfRangeTrainer) {
  ShardMeta meta;
  meta.version = 12;
  meta.term = 3;
  meta.marks.resize(3);
  meta.marks[2] = PushMark{5, 9, 2};
  v1::ForwardRequest req;
  MetaToProto(meta, &req);
  EXPECT_EQ(req.marks_size(), 1);  // marks of no push are left out
  auto back = MetaFromProto(req);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->version, 12u);
  EXPECT_EQ(back->term, 3u);
  ASSERT_EQ(back->marks.size(), 3u);
  EXPECT_EQ(back->marks[2].seq, 9u);
  EXPECT_EQ(back->marks[2].parts, 2u);
  req.mutable_marks(0)->set_trainer(kMaxTrainers);
  auto bad = MetaFromProto(req);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("marks trainer 65536"), std::string::npos);
}

// A server process of the test: a store of every shard and its ReplicaService on loopback.
struct CopyServer {
  CopyServer(const shard::ShardMap& map, uint32_t id, const std::vector<float>& init)
      : store(map, 0, init.data()),
        routing(id, std::chrono::seconds(60)),
        replica(nullptr, id, "") {
    replica.AcceptForwards(&store, &routing);
    auto s = net::StartServer(*net::Transport::Plaintext(), "127.0.0.1:0", {&replica});
    ADAM_CHECK(s.ok());
    server = std::move(*s);
    address = "127.0.0.1:" + std::to_string(server.port);
  }
  ~CopyServer() { server.server->Shutdown(); }
  ParamStore store;
  Routing routing;
  ReplicaService replica;
  net::Server server;
  std::string address;
};

v1::ShardMap MapAt(uint64_t version, const std::vector<std::string>& addresses,
                   std::vector<uint32_t> replicas) {
  v1::ShardMap m;
  m.set_version(version);
  for (uint32_t id = 0; id < addresses.size(); ++id) {
    auto* s = m.add_servers();
    s->set_id(id);
    s->set_alive(!addresses[id].empty());
    s->set_replication_address(addresses[id]);
  }
  auto* r = m.add_shards();
  r->set_shard(0);
  for (uint32_t id : replicas) r->add_replicas(id);
  return m;
}

// A push waits until one of the two other copies holds it (a quorum of three), then is
// answered; with neither copy reachable it waits, and once the primary's lease runs out it is
// refused instead of acknowledged.
TEST(Forwarder, AcknowledgesOnceAQuorumOfCopiesHoldsTheUpdate) {
  auto map = shard::ShardMap::Make(4, 16, 1, 1);
  ASSERT_TRUE(map.ok());
  std::vector<float> init(4, 0.f);
  CopyServer c1(*map, 1, init);
  ParamStore store(*map, 0, init.data());
  Routing r(0, std::chrono::milliseconds(400));
  const v1::ShardMap m = MapAt(2, {"p", c1.address, "127.0.0.1:1"}, {0, 1, 2});
  ASSERT_TRUE(r.Update(m));
  ASSERT_TRUE(c1.routing.Update(m));
  r.RenewLease(std::chrono::steady_clock::now());
  Forwarder f(net::Transport::Plaintext(), 0, &r, &store, std::chrono::milliseconds(1000));
  // Wait out the catch-up of the first map: ps-2 never answers, so it is dropped from the map.
  const v1::ShardMap m2 = MapAt(3, {"p", c1.address, ""}, {0, 1, 2});
  ASSERT_TRUE(r.Update(m2));
  ASSERT_TRUE(c1.routing.Update(m2));
  const float one[4] = {1, 1, 1, 1};
  ASSERT_TRUE(Eventually([&] { return r.Refusal(0).find("other copies") == std::string::npos; }));
  r.RenewLease(std::chrono::steady_clock::now());
  ASSERT_EQ(r.Refusal(0), "");
  // The push's clock said 2 epochs finished. Raised before the update reaches the store: the
  // forwarder may send the update as soon as it is there, reading the epochs just before it, so
  // raised after, the copy could hold the update without them (it did once under ASan).
  store.RaiseEpochs(2);
  ASSERT_TRUE(store.Add(0, one, 4).ok());
  std::promise<grpc::Status> answered;
  f.WhenDurable({{0, store.Version(0)}}, [&](const grpc::Status& s) { answered.set_value(s); });
  auto fut = answered.get_future();
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(3)), std::future_status::ready);
  EXPECT_TRUE(fut.get().ok());
  std::vector<float> out(4);
  ASSERT_TRUE(c1.store.ReadState(0, out.data(), 4).ok());
  EXPECT_EQ(out, std::vector<float>(one, one + 4));  // the copy holds it before the answer
  EXPECT_EQ(c1.store.epochs(), 2u);  // and the epochs finished, for its own checkpoints
  // Both copies unreachable (ps-1 stopped): not acknowledged; refused once the lease is over.
  c1.server.server->Shutdown();
  ASSERT_TRUE(store.Add(0, one, 4).ok());
  std::promise<grpc::Status> second;
  f.WhenDurable({{0, store.Version(0)}}, [&](const grpc::Status& s) { second.set_value(s); });
  auto fut2 = second.get_future();
  EXPECT_EQ(fut2.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  ASSERT_EQ(fut2.wait_for(std::chrono::seconds(3)), std::future_status::ready);
  const grpc::Status s = fut2.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("not acknowledged"), std::string::npos) << s.error_message();
  f.Stop();
}

// A newly promoted primary reads its shard from the other in-sync copies before serving it,
// takes the freshest state (an update only a copy got before the old primary died), and raises
// its term so the stale state's old primary cannot overwrite it afterwards.
TEST(Forwarder, APromotedPrimaryStartsFromTheFreshestCopy) {
  auto map = shard::ShardMap::Make(4, 16, 1, 1);
  ASSERT_TRUE(map.ok());
  std::vector<float> init(4, 0.f), fresh(4, 7.f);
  CopyServer c2(*map, 2, init);
  ShardMeta newer;
  newer.term = 0;
  newer.version = 5;
  newer.marks.resize(1);
  newer.marks[0] = PushMark{42, 3, 1};
  ASSERT_EQ(*c2.store.SetState(0, fresh.data(), 4, newer), SetResult::kApplied);
  c2.store.RaiseEpochs(4);
  ParamStore store(*map, 0, init.data());  // ps-1, the copy to be promoted, at version 0
  Routing r(1, std::chrono::seconds(60));
  r.RenewLease(std::chrono::steady_clock::now());
  ASSERT_TRUE(r.Update(MapAt(4, {"", "self", c2.address}, {0, 1, 2})));  // ps-0 the primary
  ASSERT_TRUE(c2.routing.Update(MapAt(4, {"", "self", c2.address}, {0, 1, 2})));
  Forwarder f(net::Transport::Plaintext(), 1, &r, &store, std::chrono::milliseconds(20));
  ASSERT_TRUE(r.Update(MapAt(5, {"", "self", c2.address}, {1, 2})));  // ps-0 died
  ASSERT_TRUE(c2.routing.Update(MapAt(5, {"", "self", c2.address}, {1, 2})));
  EXPECT_NE(r.Refusal(0).find("from its other copies"), std::string::npos);
  ASSERT_TRUE(Eventually([&] { return r.Refusal(0).empty(); })) << r.Refusal(0);
  std::vector<float> out(4);
  auto meta = store.ReadState(0, out.data(), 4);
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(out, fresh);
  EXPECT_EQ(meta->version, 5u);
  EXPECT_EQ(meta->term, 5u);
  EXPECT_EQ(store.epochs(), 4u);  // with the epochs that state had finished
  ASSERT_EQ(meta->marks.size(), 1u);
  EXPECT_EQ(meta->marks[0].session, 42u);
  // The old primary's state (term 0) no longer replaces the copy's, now at the new term.
  EXPECT_TRUE(Eventually([&] { return c2.store.Term(0) == 5; })) << c2.store.Term(0);
  ShardMeta old;
  old.term = 0;
  old.version = 99;
  EXPECT_EQ(*c2.store.SetState(0, init.data(), 4, old), SetResult::kStale);
  f.Stop();
}

}  // namespace
}  // namespace adam::ps
