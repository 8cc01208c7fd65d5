// The Kubernetes client, informer, work queue and leader election against the in-process API
// server: the semantics they rely on, and their recovery from lost and compacted watches.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/clock.h"
#include "kube/client.h"
#include "kube/informer.h"
#include "kube/leader.h"
#include "kube/rate_limiter.h"
#include "kube/scrape.h"
#include "kube/watch.h"
#include "kube/workqueue.h"
#include "operator/fake_api_server.h"
#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam::kube {
namespace {

using testing::FakeApiServer;

using testing::Eventually;

Json Cm(const std::string& name, const std::string& value, const std::string& label = "a") {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"labels", {{"app", label}}}}},
          {"data", {{"k", value}}}};
}

Config Plain(const std::string& url) {
  Config c;
  c.server = url;
  return c;
}

struct Fixture : ::testing::Test {
  std::unique_ptr<FakeApiServer> api = FakeApiServer::Start();
  std::unique_ptr<Client> client = NewHttpClient(Plain(api->url()));
};

using ClientTest = Fixture;

TEST_F(ClientTest, CrudWithVersionsConflictsAndStatus) {
  auto created = client->Create(ConfigMaps(), "ns", Cm("one", "1"));
  ASSERT_TRUE(created.ok()) << created.status().message();
  EXPECT_EQ((*created)["metadata"]["namespace"], "ns");
  EXPECT_FALSE((*created)["metadata"]["resourceVersion"].get<std::string>().empty());
  auto dup = client->Create(ConfigMaps(), "ns", Cm("one", "1"));
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);

  Json stale = *created;
  Json fresh = *created;
  fresh["data"]["k"] = "2";
  auto updated = client->Update(ConfigMaps(), "ns", fresh);
  ASSERT_TRUE(updated.ok()) << updated.status().message();
  stale["data"]["k"] = "3";
  auto conflict = client->Update(ConfigMaps(), "ns", stale);
  EXPECT_EQ(conflict.status().code(), StatusCode::kAborted) << conflict.status().message();
  EXPECT_NE(conflict.status().message().find("has been modified"), std::string::npos);
  EXPECT_EQ((*client->Get(ConfigMaps(), "ns", "one"))["data"]["k"], "2");

  // Status subresource: a main PUT keeps status; a status PUT changes only status.
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "p"}}},
              {"spec", {{"containers", Json::array()}}}};
  auto p = client->Create(Pods(), "ns", pod);
  ASSERT_TRUE(p.ok());
  Json s = *p;
  s["status"] = {{"phase", "Running"}};
  s["spec"]["nodeName"] = "ignored";
  auto ps = client->UpdateStatus(Pods(), "ns", s);
  ASSERT_TRUE(ps.ok()) << ps.status().message();
  EXPECT_EQ((*ps)["status"]["phase"], "Running");
  EXPECT_FALSE((*ps)["spec"].contains("nodeName"));
  Json m = *ps;
  m["status"] = {{"phase", "Failed"}};
  auto pm = client->Update(Pods(), "ns", m);
  ASSERT_TRUE(pm.ok());
  EXPECT_EQ((*pm)["status"]["phase"], "Running");

  EXPECT_TRUE(client->Delete(ConfigMaps(), "ns", "one").ok());
  EXPECT_EQ(client->Get(ConfigMaps(), "ns", "one").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->Delete(ConfigMaps(), "ns", "one").code(), StatusCode::kNotFound);

  ListOptions lo;
  lo.label_selector = "app=a";
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("two", "2", "a")).ok());
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("three", "3", "b")).ok());
  auto list = client->List(ConfigMaps(), "ns", lo);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ((*list)["items"].size(), 1u);
  EXPECT_EQ((*list)["items"][0]["metadata"]["name"], "two");
}

TEST_F(ClientTest, WatchStreamsEventsAndReportsGoneAfterCompaction) {
  auto list = client->List(ConfigMaps(), "ns", {});
  ASSERT_TRUE(list.ok());
  const std::string from = (*list)["metadata"]["resourceVersion"];
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("a", "1")).ok());
  std::vector<std::string> seen;
  std::atomic<bool> stop{false};
  const int watches = api->watches_opened();
  std::thread writer([&] {
    // Once the watch is open: its events come from the stream, not from the history.
    EXPECT_TRUE(Eventually([&] { return api->watches_opened() > watches; }));
    (void)client->Create(ConfigMaps(), "ns", Cm("b", "1"));
    (void)client->Delete(ConfigMaps(), "ns", "a");
  });
  WatchOptions wo;
  wo.resource_version = from;
  Status s = client->Watch(
      ConfigMaps(), "ns", wo,
      [&](const WatchEvent& ev) {
        if (ev.type != "BOOKMARK")
          seen.push_back(ev.type + " " + ev.object["metadata"]["name"].get<std::string>());
        return seen.size() < 3;
      },
      &stop);
  writer.join();
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED a", "ADDED b", "DELETED a"}));

  api->Compact();
  s = client->Watch(
      ConfigMaps(), "ns", wo, [](const WatchEvent&) { return true; }, &stop);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.message();

  // A stop request ends a watch that waits for events.
  WatchOptions live;
  live.resource_version = std::to_string(api->version());
  const int open = api->watches_opened();
  std::thread stopper([&] {
    EXPECT_TRUE(Eventually([&] { return api->watches_opened() > open; }));  // waiting for events
    stop = true;
  });
  s = client->Watch(
      ConfigMaps(), "ns", live, [](const WatchEvent&) { return true; }, &stop);
  stopper.join();
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.message();

  // A handler that throws ends its watch as a lost connection would, naming what it threw.
  stop = false;
  s = client->Watch(
      ConfigMaps(), "ns", WatchOptions{},
      [](const WatchEvent&) -> bool { throw std::runtime_error("the handler broke"); }, &stop);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.message();
  EXPECT_NE(s.message().find("the handler broke"), std::string::npos) << s.message();
}

TEST(WatchDecoder, NamesTheLineAndByteOfBadInput) {
  WatchDecoder d;
  auto ok = d.Decode(R"({"type":"ADDED","object":{"metadata":{"resourceVersion":"5"}}})");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->type, "ADDED");
  auto bad = d.Decode(R"({"type":"ADDED","object":{"metadata":)");
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos);
  EXPECT_NE(bad.status().message().find("byte"), std::string::npos);
  EXPECT_FALSE(d.Decode(R"({"type":"EXPLODED","object":{}})").ok());
  // A number out of a double's range is an error, not an exception (as the fuzzer found in the
  // annotations parser).
  EXPECT_EQ(d.Decode(R"({"type":"ADDED","object":{"n":1e99999}})").status().code(),
            StatusCode::kDataLoss);
  EXPECT_FALSE(d.Decode(R"({"type":"ADDED","object":{"metadata":{"resourceVersion":5}}})").ok());
  EXPECT_TRUE(d.Decode(R"({"type":"ERROR","object":{"code":410}})").ok());
  EXPECT_EQ(WatchErrorStatus(Json{{"code", 410}, {"message", "too old"}}).code(),
            StatusCode::kOutOfRange);
}

using InformerTest = Fixture;

TEST_F(InformerTest, ReconnectsFromItsVersionAndRelistsAfterGone) {
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("a", "1")).ok());
  std::mutex mu;
  std::vector<std::string> events;
  Informer inf(client.get(), ConfigMaps(), "ns", "app=a", [&](const WatchEvent& ev) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(ev.type + " " + ev.object["metadata"]["name"].get<std::string>());
  });
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(std::chrono::seconds(5)));
  EXPECT_TRUE(inf.Get("ns", "a").has_value());
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("b", "1")).ok());
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("other", "1", "zzz")).ok());  // not selected
  EXPECT_TRUE(Eventually([&] { return inf.Get("ns", "b").has_value(); }));
  EXPECT_FALSE(inf.Get("ns", "other").has_value());

  // A cut stream: the informer watches again from its version, without listing.
  const uint64_t lists = inf.lists();
  api->BreakWatches();
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("c", "1")).ok());
  EXPECT_TRUE(Eventually([&] { return inf.Get("ns", "c").has_value(); }));
  EXPECT_EQ(inf.lists(), lists);
  EXPECT_GE(inf.watches(), 2u);

  // Compacted history: 410 Gone, a new list, and the deletion it missed still reported. An object
  // the informer does not select first moves the store past the informer's version, so the
  // compaction forgets history it has not seen however soon it watches again.
  Json unseen = Cm("unseen", "1", "zzz");
  unseen["metadata"]["namespace"] = "ns";
  api->Put("v1/configmaps", unseen);
  api->Compact();
  api->BreakWatches();
  ASSERT_TRUE(client->Delete(ConfigMaps(), "ns", "a").ok());
  api->Compact();
  EXPECT_TRUE(Eventually([&] { return !inf.Get("ns", "a").has_value(); }));
  EXPECT_GT(inf.lists(), lists);
  inf.Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_NE(std::find(events.begin(), events.end(), "DELETED a"), events.end());
  EXPECT_EQ(std::count(events.begin(), events.end(), "ADDED c"), 1);
}

TEST_F(InformerTest, BookmarksAdvanceTheVersionWithoutEvents) {
  std::atomic<int> events{0};
  Informer inf(client.get(), ConfigMaps(), "ns", "", [&](const WatchEvent&) { ++events; });
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(std::chrono::seconds(5)));
  const std::string before = inf.resource_version();
  ASSERT_TRUE(client->Create(Pods(), "ns", {{"metadata", {{"name", "p"}}}}).ok());  // another kind
  EXPECT_TRUE(Eventually([&] { return inf.resource_version() != before; }));
  EXPECT_EQ(events.load(), 0);
  inf.Stop();
}

TEST(PrometheusText, ParsesSamplesAndNamesBadLines) {
  auto m = ParsePrometheusText(
      "# HELP adam_trainer_epoch epochs\n# TYPE adam_trainer_epoch gauge\nadam_trainer_epoch 3\n"
      "h_bucket{le=\"0.5\",x=\"a b}\"} 7 1700000000\nh_bucket{le=\"+Inf\"} +Inf\n\n");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->at("adam_trainer_epoch"), 3);
  EXPECT_EQ(m->at("h_bucket{le=\"0.5\",x=\"a b}\"}"), 7);
  EXPECT_TRUE(std::isinf(m->at("h_bucket{le=\"+Inf\"}")));
  auto bad = ParsePrometheusText("ok 1\nbroken{a=\"1\" 2\n");
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos);
  EXPECT_FALSE(ParsePrometheusText("x one\n").ok());
  EXPECT_FALSE(ParsePrometheusText("x\n").ok());
}

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

using LeaderTest = Fixture;

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

// Runs `f` on a thread of its own; on every way out of the test's scope it moves `clock` on until
// `f` has returned, so a failed check never leaves `f` waiting on the fake clock (a hung test).
template <class F>
class OnFakeTime {
 public:
  OnFakeTime(FakeClock& clock, F f)
      : clock_(clock), result_(std::async(std::launch::async, std::move(f))) {}
  OnFakeTime(const OnFakeTime&) = delete;
  OnFakeTime& operator=(const OnFakeTime&) = delete;
  ~OnFakeTime() {
    while (result_.valid() &&
           result_.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready)
      clock_.Advance(std::chrono::seconds(1));
  }
  bool done() const {
    return result_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
  auto get() { return result_.get(); }

 private:
  FakeClock& clock_;
  std::future<std::invoke_result_t<F>> result_;
};

// A 429 with Retry-After is waited out (on the client's clock) and retried, as client-go does;
// the caller sees success.
TEST_F(ClientTest, TooManyRequestsIsRetriedAfterTheServersDelay) {
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("one", "1")).ok());
  FakeClock clock;
  Config c = Plain(api->url());
  c.clock = &clock;
  auto waiting = NewHttpClient(c);
  api->Throttle(2, 1);
  const int before = api->requests_served();
  OnFakeTime got(clock, [&] { return waiting->Get(ConfigMaps(), "ns", "one").ok(); });
  int64_t woken = clock.wakeups();
  for (int throttled = 1; throttled <= 2; ++throttled) {
    ASSERT_TRUE(Eventually([&] { return clock.wakeups() >= woken && clock.waiters() == 1; }))
        << "no wait after 429 number " << throttled;
    EXPECT_EQ(api->requests_served() - before, throttled);
    EXPECT_FALSE(got.done());
    woken = clock.wakeups() + 1;
    clock.Advance(std::chrono::seconds(1));
  }
  ASSERT_TRUE(got.get());
  EXPECT_EQ(api->requests_served() - before, 3);
  EXPECT_EQ(api->throttled_served(), 2);
  // Past max_retries the 429 is the answer (UNAVAILABLE, retried later by the caller's queue).
  c.max_retries = 1;
  c.clock = Clock::Real();
  api->Throttle(5, 0);
  EXPECT_EQ(NewHttpClient(c)->Get(ConfigMaps(), "ns", "one").status().code(),
            StatusCode::kUnavailable);
}

// The token bucket on fake time: the burst goes at once, then one request per 1 / qps, each let
// through exactly when its token is there, and how long it waited reported.
TEST(RateLimiterTest, TheBurstGoesAtOnceThenOnePerInterval) {
  FakeClock clock;
  RateLimiter limiter(/*qps=*/10, /*burst=*/3, &clock);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limiter.Acquire().count(), 0.0);
  std::atomic<int> got{0};
  OnFakeTime two(clock, [&] {
    std::vector<double> waited;
    for (int i = 0; i < 2; ++i) {
      waited.push_back(limiter.Acquire().count());
      ++got;
    }
    return waited;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  const int64_t woken = clock.wakeups();
  clock.Advance(std::chrono::milliseconds(99));
  ASSERT_TRUE(Eventually([&] { return clock.wakeups() > woken && clock.waiters() == 1; }));
  EXPECT_EQ(got.load(), 0) << "a request went before its token was there";
  clock.Advance(std::chrono::milliseconds(1));
  ASSERT_TRUE(Eventually([&] { return got.load() == 1; }));
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(std::chrono::milliseconds(100));
  const std::vector<double> waited = two.get();
  EXPECT_NEAR(waited[0], 0.1, 1e-9);
  EXPECT_NEAR(waited[1], 0.1, 1e-9);
  RateLimiter none(/*qps=*/0, /*burst=*/1, &clock);  // no limit: never waits
  for (int i = 0; i < 100; ++i) EXPECT_EQ(none.Acquire().count(), 0.0);
}

// qps and burst bound a client's requests: the burst goes at once, the next waits its interval
// on the client's clock.
TEST_F(ClientTest, RequestsAreRateLimited) {
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("one", "1")).ok());
  FakeClock clock;
  Config c = Plain(api->url());
  c.qps = 20;
  c.burst = 5;
  c.clock = &clock;
  auto limited = NewHttpClient(c);
  const int before = api->requests_served();
  OnFakeTime six(clock, [&] {
    for (int i = 0; i < 6; ++i)
      if (!limited->Get(ConfigMaps(), "ns", "one").ok()) return false;
    return true;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(api->requests_served() - before, 5);
  clock.Advance(std::chrono::milliseconds(50));  // 1 / qps
  EXPECT_TRUE(six.get());
  EXPECT_EQ(api->requests_served() - before, 6);
}

// Clients made from one Config with a limiter (the operator's reads and writes) share its
// bucket: together they get one burst and then one request per interval.
TEST_F(ClientTest, ClientsOfOneLimiterShareItsRate) {
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("one", "1")).ok());
  FakeClock clock;
  Config c = Plain(api->url());
  c.qps = 20;
  c.burst = 5;
  c.limiter = NewRateLimiter(c.qps, c.burst, &clock);
  auto reads = NewHttpClient(c), writes = NewHttpClient(c);
  const int before = api->requests_served();
  OnFakeTime all(clock, [&] {
    for (int i = 0; i < 10; ++i)
      if (!(i % 2 ? writes : reads)->Get(ConfigMaps(), "ns", "one").ok()) return false;
    return true;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(api->requests_served() - before, 5) << "the two clients had a burst each";
  for (int more = 1; more <= 5; ++more) {
    clock.Advance(std::chrono::milliseconds(50));
    ASSERT_TRUE(Eventually([&] { return api->requests_served() - before == 5 + more; }));
    if (more < 5) ASSERT_TRUE(clock.AwaitWaiters(1));
    EXPECT_EQ(api->requests_served() - before, 5 + more);
  }
  EXPECT_TRUE(all.get());
}

// Sockets to or from `port` in TIME_WAIT: each one a connection that was closed.
int ClosedConnections(int port) {
  int n = 0;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);
    while (std::getline(f, line)) {
      std::istringstream in(line);
      std::string sl, local, remote, state;
      in >> sl >> local >> remote >> state;
      auto port_of = [](const std::string& a) {
        return std::stoi(a.substr(a.rfind(':') + 1), nullptr, 16);
      };
      if (state == "06" && (port_of(local) == port || port_of(remote) == port)) ++n;
    }
  }
  return n;
}

// One client keeps its connection: 50 requests open no 50 connections.
TEST_F(ClientTest, ConnectionsAreReused) {
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("one", "1")).ok());
  const int port = std::stoi(api->url().substr(api->url().rfind(':') + 1));
  const int before = ClosedConnections(port);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(client->Get(ConfigMaps(), "ns", "one").ok());
  EXPECT_LE(ClosedConnections(port) - before, 2);
}

// A token file is read again when it changes (the kubelet rotates bound tokens).
// A client reading its token from DIR/token, which holds "first" as the API server expects.
std::unique_ptr<Client> TokenFileClient(const testing::TmpDir& dir, FakeApiServer* api) {
  std::ofstream(dir.File("token")) << "first\n";
  api->SetToken("first");
  Config c = Plain(api->url());
  c.token_file = dir.File("token");
  return NewHttpClient(c);
}

TEST(Credentials, ATokenFileIsReadAgainWhenRotated) {
  testing::TmpDir dir;
  auto api = FakeApiServer::StartTls("", "", "");
  auto client = TokenFileClient(dir, api.get());
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("one", "1")).ok());
  api->SetToken("second");
  EXPECT_EQ(client->Get(ConfigMaps(), "ns", "one").status().code(),
            StatusCode::kFailedPrecondition);
  std::ofstream(dir.File("token")) << "second\n";
  auto got = client->Get(ConfigMaps(), "ns", "one");
  EXPECT_TRUE(got.ok()) << got.status().message();
}

// A token file caught empty (rewritten in place, between the truncate and the write) is not sent
// as no token at all, which a real API server answers as anonymous with 403: the last token is.
TEST(Credentials, AnEmptiedTokenFileKeepsTheLastToken) {
  testing::TmpDir dir;
  auto api = FakeApiServer::StartTls("", "", "");
  auto client = TokenFileClient(dir, api.get());
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("one", "1")).ok());
  std::ofstream(dir.File("token"), std::ios::trunc).flush();
  auto got = client->Get(ConfigMaps(), "ns", "one");
  EXPECT_TRUE(got.ok()) << got.status().message();
  std::ofstream(dir.File("token")) << "second\n";
  api->SetToken("second");
  got = client->Get(ConfigMaps(), "ns", "one");
  EXPECT_TRUE(got.ok()) << got.status().message();
}

// Never written: the error names the file instead of sending an anonymous request.
TEST(Credentials, AnEmptyTokenFileIsAnError) {
  testing::TmpDir dir;
  auto api = FakeApiServer::StartTls("", "", "");
  std::ofstream(dir.File("token")).flush();
  Config c = Plain(api->url());
  c.token_file = dir.File("token");
  auto got = NewHttpClient(c)->Get(ConfigMaps(), "ns", "one");
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("token file is empty"), std::string::npos)
      << got.status().message();
}

// An exec plugin's credential is cached until it expires or is refused, then asked for again.
TEST(Credentials, AnExecPluginIsRunOnceAndAgainWhenRefused) {
  testing::TmpDir dir;
  auto api = FakeApiServer::StartTls("", "", "");
  const std::string plugin = dir.File("plugin.sh");
  std::ofstream(plugin)
      << "#!/bin/sh\n"
         "echo run >> \"$(dirname \"$0\")/runs\"\n"
         "case \"$KUBERNETES_EXEC_INFO\" in *ExecCredential*) ;; *) exit 3;; esac\n"
         "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
         "\"status\":{\"token\":\"%s\"}}' \"$(cat \"$(dirname \"$0\")/token\")\"\n";
  std::filesystem::permissions(plugin, std::filesystem::perms::owner_all);
  std::ofstream(dir.File("token")) << "t1";
  api->SetToken("t1");
  const std::string kubeconfig = R"(
apiVersion: v1
kind: Config
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: ")" +
                                 api->url() + R"("}}]
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./plugin.sh
      env: [{name: PLUGIN_MODE, value: test}]
)";
  auto c = ParseKubeconfig(kubeconfig, dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE(c->exec.has_value());
  EXPECT_EQ(c->exec->command, dir.File("./plugin.sh"));
  auto client = NewHttpClient(*c);
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("one", "1")).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client->Get(ConfigMaps(), "ns", "one").ok());
  auto runs = [&] {
    std::ifstream f(dir.File("runs"));
    int n = 0;
    for (std::string l; std::getline(f, l);) ++n;
    return n;
  };
  EXPECT_EQ(runs(), 1);
  std::ofstream(dir.File("token")) << "t2";
  api->SetToken("t2");
  auto got = client->Get(ConfigMaps(), "ns", "one");  // 401, the plugin again, then success
  EXPECT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(runs(), 2);

  // Bad stanzas and bad answers are named.
  std::string bad = kubeconfig;
  bad.replace(bad.find("authentication.k8s.io/v1\n"), 25, "authentication.k8s.io/v9\n");
  EXPECT_NE(
      ParseKubeconfig(bad, dir.path()).status().message().find("users[u].user.exec.apiVersion"),
      std::string::npos);
  std::ofstream(plugin) << "#!/bin/sh\necho not json\n";
  std::filesystem::permissions(plugin, std::filesystem::perms::owner_all);
  auto broken = NewHttpClient(*c)->Get(ConfigMaps(), "ns", "one");
  EXPECT_NE(broken.status().message().find("no ExecCredential JSON"), std::string::npos)
      << broken.status().message();
}

TEST(Kubeconfig, TheFirstExistingFileOfTheListIsUsed) {
  testing::TmpDir dir;
  std::ofstream(dir.File("one")) << "x";
  std::ofstream(dir.File("two")) << "x";
  EXPECT_EQ(DefaultKubeconfigPath(dir.File("one") + ":" + dir.File("two")), dir.File("one"));
  EXPECT_EQ(DefaultKubeconfigPath("/nonexistent:" + dir.File("two")), dir.File("two"));
  EXPECT_EQ(DefaultKubeconfigPath(":/nonexistent"), "");
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

// HTTPS as on a real cluster: the server's certificate checked against the configured CA, the
// bearer token sent; a client with the wrong CA or token is refused.
TEST(Tls, VerifiesTheServerAndSendsTheToken) {
  testing::TmpDir dir;
  const std::string d = dir.path();
  const std::string cmd =
      "cd " + d +
      " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca "
      "-keyout ca.key -out ca.crt 2>/dev/null && "
      "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key -out server.csr "
      "2>/dev/null && printf 'subjectAltName=IP:127.0.0.1\\n' > ext && "
      "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 "
      "-extfile ext -out server.crt 2>/dev/null && "
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=other -keyout other.key "
      "-out other.crt 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl failed";
  auto api = FakeApiServer::StartTls(d + "/server.crt", d + "/server.key", "s3cret");
  auto read = [](const std::string& p) { return testing::ReadText(p); };
  Config c;
  c.server = api->url();
  c.token = "s3cret";
  c.ca_pem = read(d + "/ca.crt");
  auto good = NewHttpClient(c);
  auto created = good->Create(ConfigMaps(), "ns", Cm("tls", "1"));
  ASSERT_TRUE(created.ok()) << created.status().message();
  EXPECT_TRUE(good->Get(ConfigMaps(), "ns", "tls").ok());
  // A watch (its own transport) over the same TLS, with the same token.
  std::atomic<bool> stop{false};
  auto watch = [&](Client& client) {
    std::vector<std::string> seen;
    Status s = client.Watch(
        ConfigMaps(), "ns", WatchOptions{},
        [&](const WatchEvent& ev) {
          seen.push_back(ev.type + " " + ev.object["metadata"].value("name", ""));
          return false;
        },
        &stop);
    return std::make_pair(s, seen);
  };
  auto [watched, seen] = watch(*good);
  EXPECT_TRUE(watched.ok()) << watched.message();
  EXPECT_EQ(seen, std::vector<std::string>{"ADDED tls"});

  Config wrong_token = c;
  wrong_token.token = "guess";
  auto denied = NewHttpClient(wrong_token)->Get(ConfigMaps(), "ns", "tls");
  EXPECT_EQ(denied.status().code(), StatusCode::kFailedPrecondition) << denied.status().message();
  EXPECT_NE(denied.status().message().find("401"), std::string::npos);
  const Status denied_watch = watch(*NewHttpClient(wrong_token)).first;
  EXPECT_EQ(denied_watch.code(), StatusCode::kFailedPrecondition) << denied_watch.message();
  EXPECT_NE(denied_watch.message().find("401"), std::string::npos) << denied_watch.message();

  Config wrong_ca = c;
  wrong_ca.ca_pem = read(d + "/other.crt");
  auto untrusted = NewHttpClient(wrong_ca)->Get(ConfigMaps(), "ns", "tls");
  EXPECT_EQ(untrusted.status().code(), StatusCode::kUnavailable) << untrusted.status().message();
  const Status untrusted_watch = watch(*NewHttpClient(wrong_ca)).first;
  EXPECT_EQ(untrusted_watch.code(), StatusCode::kUnavailable) << untrusted_watch.message();
}

TEST(InCluster, ReadsTheServiceAccount) {
  testing::TmpDir dir;
  const std::string sa = dir.path() + "/var/run/secrets/kubernetes.io/serviceaccount";
  std::filesystem::create_directories(sa);
  std::ofstream(sa + "/token") << "tok";
  std::ofstream(sa + "/ca.crt") << "CA";
  std::ofstream(sa + "/namespace") << "ml";
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_EQ(InClusterConfig(dir.path()).status().code(), StatusCode::kNotFound);
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto c = InClusterConfig(dir.path());
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  // The token is a file the kubelet rotates: the client reads it, not a copy made once.
  EXPECT_EQ(c->token, "");
  EXPECT_EQ(c->token_file, sa + "/token");
  EXPECT_EQ(c->ca_pem, "CA");
  EXPECT_EQ(c->name_space, "ml");
}

TEST(Kubeconfig, ReadsTheCurrentContextAndNamesBadFields) {
  const std::string text = R"(
apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context: {cluster: c1, user: u1, namespace: team}
clusters:
- name: c1
  cluster: {server: "https://10.0.0.1:6443", certificate-authority-data: "Q0EK"}
users:
- name: u1
  user: {token: secret-token}
)";
  auto c = ParseKubeconfig(text, "");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->token, "secret-token");
  EXPECT_EQ(c->ca_pem, "CA\n");
  EXPECT_EQ(c->name_space, "team");
  auto missing = ParseKubeconfig(text, "", "prod");
  EXPECT_NE(missing.status().message().find("no context 'prod'"), std::string::npos);
  std::string bad = text;
  bad.replace(bad.find("Q0EK"), 4, "!!!!");
  auto b = ParseKubeconfig(bad, "");
  EXPECT_NE(b.status().message().find("certificate-authority-data"), std::string::npos)
      << b.status().message();
  EXPECT_FALSE(ParseKubeconfig("[1, 2", "").ok());
}

TEST(Time, FormatsAndParsesRfc3339) {
  const auto t = std::chrono::system_clock::from_time_t(1790000000);
  EXPECT_EQ(FormatTime(t), "2026-09-21T14:13:20Z");
  EXPECT_EQ(ParseTime("2026-09-21T14:13:20Z"), t);
  EXPECT_EQ(ParseTime("2026-09-21T14:13:20.123456Z"), t);
  EXPECT_FALSE(ParseTime("yesterday").has_value());
}

}  // namespace
}  // namespace adam::kube
