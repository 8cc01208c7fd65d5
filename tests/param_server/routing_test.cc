#include "param_server/routing.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "param_server/param_store.h"
#include "shard/shard_map.h"

namespace adam::ps {
namespace {

v1::ShardMap Map(uint64_t version, std::vector<std::vector<uint32_t>> replicas,
                 std::vector<std::vector<uint32_t>> copying = {}) {
  v1::ShardMap m;
  m.set_version(version);
  for (uint32_t id = 0; id < 3; ++id) {
    auto* s = m.add_servers();
    s->set_id(id);
    s->set_alive(true);
    s->set_replication_address("repl-" + std::to_string(id));
  }
  for (size_t i = 0; i < replicas.size(); ++i) {
    auto* r = m.add_shards();
    r->set_shard(uint32_t(i));
    for (uint32_t id : replicas[i]) r->add_replicas(id);
    if (i < copying.size())
      for (uint32_t id : copying[i]) r->add_copying(id);
  }
  return m;
}

TEST(Routing, ServesOnlyItsPrimaryShardsWhileItsLeaseLasts) {
  Routing r(1, std::chrono::milliseconds(50));
  EXPECT_NE(r.Refusal(0).find("no shard map yet"), std::string::npos);
  ASSERT_TRUE(r.Update(Map(3, {{1, 0, 2}, {0, 1, 2}})));
  EXPECT_FALSE(r.Update(Map(2, {{0, 1, 2}, {0, 1, 2}})));  // older: ignored
  EXPECT_NE(r.Refusal(0).find("has not heard from the controller"), std::string::npos);
  r.RenewLease(std::chrono::steady_clock::now());
  EXPECT_EQ(r.Refusal(0), "");
  EXPECT_EQ(r.Refusal(1), "ps-1 is not the primary of shard 1 at shard map version 3; the primary is ps-0");
  EXPECT_EQ(r.primaries(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  EXPECT_NE(r.Refusal(0).find("has not heard"), std::string::npos);  // lease ran out
}

TEST(Routing, ForwardsToTheOtherCopiesAndReportsPromotionsOnce) {
  Routing r(0);
  ASSERT_TRUE(r.Update(Map(5, {{0, 1, 2}, {1, 0}}, {{}, {2}})));
  auto targets = r.ForwardTargets();
  ASSERT_EQ(targets.size(), 1u);
  EXPECT_EQ(targets[0].first, 0u);
  EXPECT_EQ(targets[0].second, (std::vector<std::string>{"repl-1", "repl-2"}));
  EXPECT_FALSE(r.TakePromotion(0));  // primary from the first map: not a promotion
  ASSERT_TRUE(r.Update(Map(6, {{0, 1, 2}, {0, 2}})));  // ps-1 died: shard 1 moves here
  EXPECT_TRUE(r.TakePromotion(1));
  EXPECT_FALSE(r.TakePromotion(1));
  auto t = r.ForwardTargets();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].second, (std::vector<std::string>{"repl-2"}));
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

// Replication lag: 0 while rounds leave every copy current; growing while a copy is unreachable.
TEST(Forwarder, ReportsLagWhileACopyIsUnreachable) {
  auto map = shard::ShardMap::Make(2000, 4000, 1, 1);  // shards 0 and 1 of 1000 floats
  ASSERT_TRUE(map.ok());
  std::vector<float> init(2000, 1.f);
  ParamStore store(*map, 0, init.data());
  Routing r(0);
  v1::ShardMap m = Map(1, {{0, 1}, {0, 1}});
  m.mutable_servers(1)->set_replication_address("127.0.0.1:1");  // nothing listens there
  ASSERT_TRUE(r.Update(m));
  Forwarder f(0, &r, &store, std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double lag = f.lag_seconds();
  EXPECT_GT(lag, 0.2);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_GT(f.lag_seconds(), lag);
  // No copies to keep current: in sync at once.
  ASSERT_TRUE(r.Update(Map(2, {{0}, {0}})));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(f.lag_seconds(), 0);
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
  m.mutable_servers(1)->set_replication_address("127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
  ASSERT_TRUE(r.Update(m));
  Forwarder f(0, &r, &store, std::chrono::milliseconds(20));
  std::this_thread::sleep_for(Forwarder::kForwardDeadline + std::chrono::milliseconds(500));
  EXPECT_GT(f.lag_seconds(), 1.0);
  f.Stop();
  close(fd);
}

}  // namespace
}  // namespace adam::ps
