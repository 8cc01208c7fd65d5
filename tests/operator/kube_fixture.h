// The kube suites' common part: a ConfigMap to write, a plain client of the in-process API
// server, the fixture that starts one, and a call run on a fake clock's time. kube_test.cc (the
// client, watches, informers, rate limits, TLS), kube_credentials_test.cc (tokens, exec plugins,
// kubeconfig, in-cluster) and kube_leader_queue_test.cc (the work queue, leader election, the
// metrics cache) share it.
#pragma once

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

using testing::FakeApiServer;

using testing::Eventually;

inline Json Cm(const std::string& name, const std::string& value, const std::string& label = "a") {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"labels", {{"app", label}}}}},
          {"data", {{"k", value}}}};
}

inline Config Plain(const std::string& url) {
  Config c;
  c.server = url;
  return c;
}

struct Fixture : ::testing::Test {
  std::unique_ptr<FakeApiServer> api = FakeApiServer::Start();
  std::unique_ptr<Client> client = NewHttpClient(Plain(api->url()));
};

using ClientTest = Fixture;

using InformerTest = Fixture;

using LeaderTest = Fixture;

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

}  // namespace adam::kube
