// The operator's loops' parts against the in-process API server (kube_fixture.h): the work queue,
// leader election on a Lease, the metrics cache.
#include "operator/kube_fixture.h"

namespace adam::kube {
namespace {

TEST(WorkQueue, OneWorkerPerKeyAndNoLostAdds) {
  WorkQueue q;
  q.Add("a");
  q.Add("a");
  q.Add("b");
  EXPECT_EQ(q.Depth(), 2u);
  auto k = q.Get();
  ASSERT_EQ(*k, "a");
  q.Add("a");  // while processing: not handed out again before Done
  auto k2 = q.Get();
  ASSERT_EQ(*k2, "b");
  EXPECT_EQ(q.Depth(), 0u);
  q.Done("a");
  EXPECT_EQ(q.Depth(), 1u);  // the add during processing is kept
  q.Done("b");
  EXPECT_EQ(*q.Get(), "a");
  q.Done("a");
  q.ShutDown();
  EXPECT_FALSE(q.Get().has_value());
}

// A key waits once: adds of a burst that fall due later leave it due when first asked, one due
// sooner moves it up, and when it is handed out nothing of the burst is left to queue it again.
TEST(WorkQueue, TheAddsOfABurstQueueTheKeyOnce) {
  FakeClock clock;
  WorkQueue::Options o;
  o.clock = &clock;
  WorkQueue q(o);
  using std::chrono::milliseconds;
  q.AddAfter("a", milliseconds(100));  // due at 100
  clock.Advance(milliseconds(40));
  q.AddAfter("a", milliseconds(100));  // would be 140: stays at 100
  q.AddAfter("a", milliseconds(10));   // 50: moved up
  clock.Advance(milliseconds(9));
  q.Add("b");
  EXPECT_EQ(*q.Get(), "b");  // at 49, "a" is not due yet
  q.Done("b");
  EXPECT_EQ(q.Depth(), 0u);
  clock.Advance(milliseconds(1));
  EXPECT_EQ(*q.Get(), "a");
  q.Done("a");
  clock.Advance(milliseconds(200));  // past 100 and 140
  q.Add("c");
  EXPECT_EQ(*q.Get(), "c");
  EXPECT_EQ(q.Depth(), 0u) << "an add of the burst queued the key a second time";
  q.Done("c");
}

// On a fake clock: a failing key comes back exactly its backoff later (20, 40, 80 ms, at most
// max_delay), not a tick sooner, and a worker waiting in Get meanwhile gets it then.
TEST(WorkQueue, RateLimitedRetriesBackOffPerKey) {
  FakeClock clock;
  WorkQueue::Options o;
  o.base_delay = std::chrono::milliseconds(20);
  o.max_delay = std::chrono::milliseconds(100);
  o.clock = &clock;
  WorkQueue q(o);
  auto due_after = [&](std::chrono::milliseconds backoff) {
    std::promise<std::string> got;
    std::thread worker([&] {
      auto k = q.Get();
      got.set_value(k.value_or(""));
    });
    std::future<std::string> f = got.get_future();
    EXPECT_TRUE(clock.AwaitWaiters(1));
    clock.Advance(backoff - std::chrono::milliseconds(1));
    EXPECT_TRUE(clock.AwaitWaiters(1));  // woken, still not due: waiting again
    EXPECT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
    clock.Advance(std::chrono::milliseconds(1));
    worker.join();
    const std::string key = f.get();
    q.Done(key);
    return key;
  };
  q.AddRateLimited("x");
  EXPECT_EQ(due_after(std::chrono::milliseconds(20)), "x");
  q.AddRateLimited("x");  // second failure
  EXPECT_EQ(due_after(std::chrono::milliseconds(40)), "x");
  q.AddRateLimited("x");  // third
  EXPECT_EQ(due_after(std::chrono::milliseconds(80)), "x");
  q.AddRateLimited("x");  // fourth: 160 ms, capped
  EXPECT_EQ(due_after(std::chrono::milliseconds(100)), "x");
  q.AddRateLimited("y");  // per key: y's first failure
  EXPECT_EQ(due_after(std::chrono::milliseconds(20)), "y");
  EXPECT_EQ(q.Requeues("x"), 4);
  q.Forget("x");
  EXPECT_EQ(q.Requeues("x"), 0);
  EXPECT_EQ(q.retries(), 5u);
}

TEST_F(LeaderTest, OneLeaderAndAQuickHandOver) {
  LeaderOptions o;
  o.lease_duration = std::chrono::milliseconds(1000);
  o.renew_deadline = std::chrono::milliseconds(700);
  o.retry_period = std::chrono::milliseconds(50);
  o.identity = "one";
  auto c2 = NewHttpClient(Plain(api->url()));
  std::atomic<int> started{0};
  LeaderElector a(
      client.get(), o, [&] { ++started; }, nullptr);
  o.identity = "two";
  LeaderElector b(
      c2.get(), o, [&] { ++started; }, nullptr);
  a.Start();
  b.Start();
  ASSERT_TRUE(Eventually([&] { return a.Leading() || b.Leading(); }));
  // Rounds of both candidates (each reads the Lease; the leader writes it too) leave one leader.
  const int requests = api->requests_served();
  ASSERT_TRUE(Eventually([&] { return api->requests_served() >= requests + 8; }));
  EXPECT_NE(a.Leading(), b.Leading());
  EXPECT_EQ(started.load(), 1);
  LeaderElector& leader = a.Leading() ? a : b;
  LeaderElector& other = a.Leading() ? b : a;
  const auto t0 = std::chrono::steady_clock::now();
  leader.Stop();  // gives the Lease up
  EXPECT_TRUE(Eventually([&] { return other.Leading(); }));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(900));
  Json lease = api->Get("coordination.k8s.io/v1/leases", "default", "adam-operator");
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 1);
  other.Stop();
}

TEST_F(LeaderTest, AnUnrenewedLeaseIsTakenOnlyAfterItsDuration) {
  FakeClock clock;
  LeaderOptions o;
  o.lease_duration = std::chrono::milliseconds(1000);
  o.identity = "one";
  o.clock = &clock;
  LeaderElector a(client.get(), o, nullptr, nullptr);
  ASSERT_TRUE(a.TryAcquireOrRenew());  // "one" holds it and then goes silent
  o.identity = "two";
  LeaderElector b(client.get(), o, nullptr, nullptr);
  EXPECT_FALSE(b.TryAcquireOrRenew());  // "two" sees the record now
  clock.Advance(std::chrono::milliseconds(999));
  EXPECT_FALSE(b.TryAcquireOrRenew());  // unchanged for 999 ms of its 1 s: still held
  clock.Advance(std::chrono::milliseconds(1));
  EXPECT_TRUE(b.TryAcquireOrRenew());   // its whole duration: taken
  EXPECT_FALSE(a.TryAcquireOrRenew());  // the old holder sees the new one and does not take it back
}

// A leader whose renewals hang steps down at its renew deadline, while the request still hangs,
// and its fenced writes stop at that moment.
TEST_F(LeaderTest, ALeaderWhoseRenewalsHangStepsDownAtTheDeadline) {
  LeaderOptions o;
  o.lease_duration = std::chrono::milliseconds(3000);
  o.renew_deadline = std::chrono::milliseconds(1000);
  o.retry_period = std::chrono::milliseconds(100);
  o.identity = "one";
  Config slow = Plain(api->url());
  slow.request_timeout = std::chrono::seconds(10);  // longer than the deadline on purpose
  auto c = NewHttpClient(slow);
  std::atomic<bool> stopped{false};
  LeaderElector a(c.get(), o, nullptr, [&] { stopped = true; });
  FencedClient fenced(c.get(), [&] { return a.Leading(); });
  a.Start();
  ASSERT_TRUE(Eventually([&] { return a.Leading(); }));
  ASSERT_TRUE(fenced.Create(ConfigMaps(), "ns", Cm("ok", "1")).ok());
  api->Delay(std::chrono::milliseconds(4000));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return stopped.load(); }, std::chrono::milliseconds(3000)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
  EXPECT_FALSE(a.Leading());
  auto refused = fenced.Create(ConfigMaps(), "ns", Cm("late", "1"));
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("no longer holds the leader Lease"), std::string::npos);
  api->Delay(std::chrono::milliseconds(0));
  a.Stop();
}

TEST(LeaderTimes, ALeaseThatALastWriteCouldOutliveIsRefused) {
  LeaderOptions o;  // 15 s, 10 s, 2 s
  EXPECT_TRUE(CheckLeaderTimes(o, std::chrono::seconds(2)).ok());
  auto s = CheckLeaderTimes(o, std::chrono::seconds(5));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--leader-elect-lease-duration"), std::string::npos);
  o.retry_period = std::chrono::seconds(10);
  EXPECT_NE(
      CheckLeaderTimes(o, std::chrono::seconds(1)).message().find("--leader-elect-retry-period"),
      std::string::npos);
}

// A pod that does not answer costs a scrape thread its timeout, never the caller a wait.
TEST(MetricsCacheTest, ASlowPodHoldsNobody) {
  struct Source : MetricsSource {
    std::atomic<int> calls{0};
    StatusOr<std::map<std::string, double>> Scrape(const std::string& host, int) override {
      ++calls;
      if (host == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return std::map<std::string, double>{{"up", host == "slow" ? 0.0 : 1.0}};
    }
  } source;
  MetricsCache cache(&source, std::chrono::milliseconds(100), 2);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(cache.Latest("a", "slow", 1).empty());
  EXPECT_TRUE(cache.Latest("b", "fast", 1).empty());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
  ASSERT_TRUE(Eventually([&] { return cache.Latest("b", "fast", 1).size() == 2; },
                         std::chrono::milliseconds(1000)));
  EXPECT_EQ(cache.Latest("b", "fast", 1)[0].values.at("up"), 1.0);
  EXPECT_TRUE(cache.Latest("a", "slow", 1).empty());  // still in flight
  ASSERT_TRUE(Eventually([&] { return !cache.Latest("a", "slow", 1).empty(); },
                         std::chrono::milliseconds(3000)));
}

// On the cache's clock: a pod is scraped when first asked about, then once every period (two
// samples, their times a period apart), and one nobody asked about for three periods is dropped.
TEST(MetricsCacheTest, ScrapesEveryPeriodAndForgetsAPodNobodyAsksAbout) {
  using std::chrono::milliseconds;
  struct Source : MetricsSource {
    std::atomic<int> calls{0};
    StatusOr<std::map<std::string, double>> Scrape(const std::string&, int) override {
      return std::map<std::string, double>{{"n", double(++calls)}};
    }
  } source;
  FakeClock clock;
  MetricsCache cache(&source, milliseconds(100), 1, &clock);
  // Waits until the scrape thread has woken since `before` and waits on the clock again.
  auto settled = [&](int64_t before) {
    return Eventually([&] { return clock.wakeups() > before && clock.waiters() == 1; });
  };
  ASSERT_TRUE(clock.AwaitWaiters(1));
  int64_t woken = clock.wakeups();
  EXPECT_TRUE(cache.Latest("a", "pod-a", 9090).empty());
  ASSERT_TRUE(Eventually([&] { return cache.scrapes() == 1; }));
  ASSERT_TRUE(settled(woken));
  ASSERT_EQ(cache.Latest("a", "pod-a", 9090).size(), 1u);

  woken = clock.wakeups();
  clock.Advance(milliseconds(99));  // not due yet
  ASSERT_TRUE(settled(woken));
  EXPECT_EQ(cache.scrapes(), 1u);
  clock.Advance(milliseconds(1));
  ASSERT_TRUE(Eventually([&] { return cache.scrapes() == 2; }));
  const auto samples = cache.Latest("a", "pod-a", 9090);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].values.at("n"), 2.0);  // newest first
  EXPECT_EQ(samples[0].at - samples[1].at, milliseconds(100));

  // Not asked about for more than three periods: dropped before its next scrape.
  ASSERT_TRUE(clock.AwaitWaiters(1));
  woken = clock.wakeups();
  clock.Advance(milliseconds(301));
  ASSERT_TRUE(settled(woken));
  EXPECT_EQ(cache.scrapes(), 2u);
  EXPECT_TRUE(cache.Latest("a", "pod-a", 9090).empty());  // its history starts again
}

}  // namespace
}  // namespace adam::kube
