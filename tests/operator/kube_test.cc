// The Kubernetes client against the in-process API server (kube_fixture.h): the semantics the
// operator relies on, watches and informers and their recovery from lost and compacted watches,
// 429s and rate limits, reused connections, TLS, times.
#include "operator/kube_fixture.h"

namespace adam::kube {
namespace {

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

TEST(Time, FormatsAndParsesRfc3339) {
  const auto t = std::chrono::system_clock::from_time_t(1790000000);
  EXPECT_EQ(FormatTime(t), "2026-09-21T14:13:20Z");
  EXPECT_EQ(ParseTime("2026-09-21T14:13:20Z"), t);
  EXPECT_EQ(ParseTime("2026-09-21T14:13:20.123456Z"), t);
  EXPECT_FALSE(ParseTime("yesterday").has_value());
}

}  // namespace
}  // namespace adam::kube
