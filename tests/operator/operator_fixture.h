// The operator test suites' fixture: the operator end to end against the in-process API server,
// the tests playing kubectl (writing AdamJobs), the kubelet (pod phases) and the StatefulSet
// controller (ready replicas). operator_test.cc (creation, status, certificates, deadlines,
// watches, leaders), operator_restarts_test.cc (pods replaced, back-off, lost nodes, adoption),
// operator_start_failures_test.cc (pods that do not start, said on the job) and
// operator_queues_test.cc (concurrency, scaling, drift, suspension, Kueue, gangs) share it.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "core/clock.h"
#include "kube/client.h"
#include "kube/workqueue.h"
#include "net/access.h"
#include "net/tls.h"
#include "operator.h"
#include "operator/fake_api_server.h"
#include "reconcile/drift.h"
#include "reconcile/kueue.h"
#include "reconcile/reconciler.h"
#include "reconcile/render.h"
#include "reconcile/start_failures.h"
#include "spec/yaml_json.h"
#include "testing/wait.h"

namespace adam::op {

using testing::FakeApiServer;
constexpr const char* kJobs = "adam.dev/v1alpha1/adamjobs";
constexpr const char* kPods = "v1/pods";
constexpr const char* kSets = "apps/v1/statefulsets";
constexpr const char* kEvents = "events.k8s.io/v1/events";  // the operator's own

using testing::Eventually;

inline Json Example(const std::string& name) {
  const std::string yaml =
      testing::ReadText(std::string(ADAM_SOURCE_DIR) + "/examples/" + name + ".yaml");
  Json j = Json::parse(spec::YamlToJson(yaml).dump());
  j["metadata"]["namespace"] = "ml";
  return j;
}

inline kube::Config Plain(const std::string& url) {
  kube::Config c;
  c.server = url;
  return c;
}

// Trainers' /metrics as the operator would read them, keyed by pod address.
class FakeMetrics : public kube::MetricsSource {
 public:
  void Set(const std::string& host, std::map<std::string, double> m) {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_[host] = std::move(m);
  }
  StatusOr<std::map<std::string, double>> Scrape(const std::string& host, int port) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (port != kMetricsPort || !metrics_.count(host))
      return UnavailableError(host + " not serving");
    auto& m = metrics_[host];
    if (m.count("adam_trainer_images_total")) m["adam_trainer_images_total"] += step_;  // training
    return m;
  }
  void SetStep(double images_per_scrape) {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = images_per_scrape;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::map<std::string, double>> metrics_;
  double step_ = 0;
};

// Events about the job with `reason` whose message holds `text`.
inline int EventsOf(const FakeApiServer& api, const std::string& reason, const std::string& text) {
  int n = 0;
  for (const Json& e : api.List(kEvents, "ml"))
    n += e["reason"] == reason && e["note"].get<std::string>().find(text) != std::string::npos;
  return n;
}

struct OperatorTest : ::testing::Test {
  static constexpr std::chrono::milliseconds kStatusPeriod{200};
  // OnFakeTime's clock: declared first, so that it outlives the API server and the operator.
  std::unique_ptr<FakeClock> fake;
  std::unique_ptr<FakeApiServer> api = FakeApiServer::Start();
  std::unique_ptr<kube::Client> client = kube::NewHttpClient(Plain(api->url()));
  std::unique_ptr<Operator> op;

  std::shared_ptr<FakeMetrics> metrics = std::make_shared<FakeMetrics>();

  void StartOperator(std::chrono::seconds certificate_validity = net::kCertificateValidity,
                     bool kueue = false) {
    OperatorOptions o;
    o.kueue = kueue;
    o.certificate_validity = certificate_validity;
    o.leader_elect = false;
    o.metrics = metrics;
    o.status_period = kStatusPeriod;
    o.metrics_address = "127.0.0.1:0";
    // These tests change pods one step at a time and wait for each reconcile: at once rather
    // than a batch later (QueueOwner's test covers the batching).
    o.child_event_batch = std::chrono::milliseconds(0);
    o.restart_backoff = restart_backoff;
    o.restart_backoff_max = restart_backoff_max;
    o.default_image = default_image;
    o.node_loss_timeout = node_loss_timeout;
    if (fake) o.clock = fake.get();
    auto started = Operator::Start(client.get(), o);
    ASSERT_TRUE(started.ok()) << started.status().message();
    op = std::move(*started);
  }
  void TearDown() override {
    if (op) op->Stop();
  }
  // No back-off unless a test asks for one: most tests fail one pod after another.
  std::chrono::milliseconds restart_backoff{0}, restart_backoff_max{0};
  std::string default_image;
  std::chrono::milliseconds node_loss_timeout{120000};

  // The operator on fake time (called before StartOperator): its timers, back-offs and deadlines,
  // its work queue's delays, the times it writes, and the API server's timestamps move only when
  // the test calls Advance. What is not time (the HTTP calls, the watches) runs as it does.
  void OnFakeTime() {
    fake = std::make_unique<FakeClock>();
    api->SetClock(fake.get());
  }
  void Advance(std::chrono::milliseconds d) { fake->Advance(d); }

  // Waits until the operator has finished two reconciles since the call, each brought about by
  // `touch` when given (a change to an object it watches), else by its own look at every job
  // each status period (200 ms; on fake time, the clock is advanced by that much). The second
  // began after the call, so a check after it sees what the operator did with the cluster as it
  // is now: what a test expects not to happen, it checks after these passes rather than after a
  // sleep.
  bool Passes(const std::function<void()>& touch = {}) {
    for (int i = 0; i < 2; ++i) {
      const uint64_t from = op->reconciles();
      if (touch)
        touch();
      else if (fake)
        fake->Advance(kStatusPeriod);
      if (!Eventually([&] { return op->reconciles() > from; })) return false;
    }
    return true;
  }
  // An annotation changed on an object: a new resourceVersion the operator's watch sees.
  void Touch(const std::string& collection, const std::string& name) {
    Json o = api->Get(collection, "ml", name);
    o["metadata"]["annotations"]["test/touched"] = std::to_string(++touches_);
    api->Put(collection, o);
  }
  int touches_ = 0;

  Json Job(const std::string& name) { return api->Get(kJobs, "ml", name); }
  std::string Phase(const std::string& name) {
    return Job(name).value("status", Json::object()).value("phase", "");
  }
  std::vector<Json> PodsOf(const std::string& role, const std::string& job = "") {
    std::vector<Json> out;
    for (Json& p : api->List(kPods, "ml"))
      if (p["metadata"]["labels"].value(kRoleLabel, "") == role &&
          (job.empty() || p["metadata"]["labels"].value(kJobLabel, "") == job) &&
          !p["metadata"].contains("deletionTimestamp"))
        out.push_back(p);
    return out;
  }
  std::string Condition(const std::string& job, const std::string& type) {
    for (const Json& c :
         Job(job).value("status", Json::object()).value("conditions", Json::array()))
      if (c["type"] == type)
        return c["status"].get<std::string>() + " " + c["reason"].get<std::string>();
    return "";
  }
  // The kubelet: every pod of `role` running and ready.
  void RunAll(const std::string& role, const std::string& job = "") {
    for (const Json& p : PodsOf(role, job))
      if (p["status"].value("phase", "") != "Running")
        api->SetPodPhase("ml", p["metadata"]["name"], "Running", true);
  }
  // Brings a job to Running: every stage's pods started in order.
  void BringUp(const std::string& name, bool ha) {
    if (ha) {
      ASSERT_TRUE(
          Eventually([&] { return !api->Get(kSets, "ml", name + "-controller").is_null(); }));
      api->SetStatefulSetReady("ml", name + "-controller", 3);
    }
    ASSERT_TRUE(Eventually([&] { return PodsOf("ps", name).size() == (ha ? 3u : 2u); }));
    RunAll("ps", name);
    ASSERT_TRUE(Eventually([&] {
      return PodsOf("trainer", name).size() == 2u && PodsOf("data-server", name).size() == 1u;
    }));
    RunAll("data-server", name);
    RunAll("trainer", name);
    ASSERT_TRUE(Eventually([&] { return Phase(name) == "Running"; })) << Job(name).dump(2);
  }
  // The fashion-mnist example submitted to LocalQueue "team": the name of its Workload, once the
  // job is Queued ("" if it never is).
  std::string QueueExample() {
    Json j = Example("fashion-mnist");
    j["metadata"]["labels"] = {{kQueueLabel, "team"}};
    api->Put(kJobs, j);
    if (!Eventually([&] { return Phase("fashion-mnist") == "Queued"; })) return "";
    const std::string uid = Job("fashion-mnist")["metadata"]["uid"];
    return "adamjob-fashion-mnist-" + uid.substr(0, 5);
  }
};

}  // namespace adam::op
