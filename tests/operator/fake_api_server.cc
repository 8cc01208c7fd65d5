// FakeApiServer on cpprest's listener: the store, the test's calls and the watches' reaper; the
// HTTP requests are in fake_api_server_http.cc.
#include "operator/fake_api_server_impl.h"

namespace adam::testing {

FakeApiServer::FakeApiServer() : impl_(std::make_unique<Impl>()) {}

std::unique_ptr<FakeApiServer> FakeApiServer::Start() { return StartTls("", "", ""); }

std::unique_ptr<FakeApiServer> FakeApiServer::StartTls(const std::string& cert_file,
                                                       const std::string& key_file,
                                                       const std::string& token) {
  std::unique_ptr<FakeApiServer> s(new FakeApiServer());
  Impl* impl = s->impl_.get();
  const int port = FreePort();
  const bool tls = !cert_file.empty();
  impl->url = std::string(tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(port);
  impl->token = token;
  http::experimental::listener::http_listener_config config;
  if (tls)
    config.set_ssl_context_callback([cert_file, key_file](boost::asio::ssl::context& ctx) {
      ctx.set_options(boost::asio::ssl::context::default_workarounds);
      ctx.use_certificate_chain_file(cert_file);
      ctx.use_private_key_file(key_file, boost::asio::ssl::context::pem);
    });
  impl->listener = std::make_unique<http::experimental::listener::http_listener>(impl->url, config);
  impl->listener->support([impl](http::http_request req) {
    try {
      impl->Handle(req);
    } catch (const std::exception& e) {
      Impl::Reply(req, 500, Json{{"kind", "Status"}, {"message", e.what()}, {"code", 500}});
    }
  });
  impl->listener->open().wait();
  impl->reaper = std::thread([impl] { impl->Reap(); });
  return s;
}

FakeApiServer::~FakeApiServer() {
  impl_->stop = true;
  impl_->reaper.join();
  BreakWatches();
  // Every stream's last chunk written (or its write failed) before the listener closes.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      std::erase_if(impl_->streams, [](const pplx::task<void>& t) { return t.is_done(); });
      if (impl_->streams.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  impl_->listener->close().wait();
}

std::string FakeApiServer::url() const { return impl_->url; }

std::vector<Json> FakeApiServer::List(const std::string& collection, const std::string& ns) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<Json> out;
  auto it = impl_->store.find(collection);
  if (it == impl_->store.end()) return out;
  for (const auto& [k, o] : it->second)
    if (ns.empty() || o["metadata"].value("namespace", "") == ns) out.push_back(o);
  return out;
}

Json FakeApiServer::Get(const std::string& collection, const std::string& ns,
                        const std::string& name) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->store.find(collection);
  if (it == impl_->store.end()) return nullptr;
  auto o = it->second.find(ns + "/" + name);
  return o == it->second.end() ? Json(nullptr) : o->second;
}

Json FakeApiServer::Put(const std::string& collection, const Json& object) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Json o = object;
  auto& objs = impl_->store[collection];
  const std::string k = Impl::Key(o);
  const bool existed = objs.count(k);
  if (!existed) {
    o["metadata"]["uid"] = "uid-" + std::to_string(impl_->rv + 1);
    o["metadata"]["creationTimestamp"] = impl_->Now();
    o["metadata"]["generation"] = 1;
  }
  o = impl_->Stamp(o);
  objs[k] = o;
  impl_->Emit(collection, existed ? "MODIFIED" : "ADDED", o);
  return o;
}

bool FakeApiServer::Remove(const std::string& collection, const std::string& ns,
                           const std::string& name) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->store[collection].count(ns + "/" + name)) return false;
  impl_->DeleteLocked(collection, ns + "/" + name);
  return true;
}

void FakeApiServer::SetPodPhase(const std::string& ns, const std::string& name,
                                const std::string& phase, bool ready, int exit_code,
                                const std::string& message) {
  Json pod = Get("v1/pods", ns, name);
  if (pod.is_null()) return;
  Json st = {{"phase", phase},
             {"podIP", name},  // tests' metrics sources key on it
             {"conditions", {{{"type", "Ready"}, {"status", ready ? "True" : "False"}}}}};
  if (phase == "Failed" || phase == "Succeeded") {
    Json terminated = {{"exitCode", exit_code}};
    if (!message.empty()) terminated["message"] = message;
    st["containerStatuses"] = {{{"name", "main"}, {"state", {{"terminated", terminated}}}}};
  }
  pod["status"] = st;
  Put("v1/pods", pod);
}

void FakeApiServer::SetStatefulSetReady(const std::string& ns, const std::string& name, int ready) {
  Json sts = Get("apps/v1/statefulsets", ns, name);
  if (sts.is_null()) return;
  sts["status"] = {{"replicas", sts["spec"].value("replicas", 0)}, {"readyReplicas", ready}};
  Put("apps/v1/statefulsets", sts);
}

void FakeApiServer::Compact() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->compacted = impl_->rv;
  impl_->history.clear();
}

void FakeApiServer::BreakWatches() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& w : impl_->watchers) impl_->Close(w);
  impl_->watchers.clear();
}

void FakeApiServer::FailUpdates(int n) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->fail_updates = n;
}

void FakeApiServer::HoldPodDeletions(bool on) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->hold_pod_deletions = on;
}

void FakeApiServer::RefuseCreates(const std::string& collection, int code,
                                  const std::string& message) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (code == 0)
    impl_->refuse_creates.erase(collection);
  else
    impl_->refuse_creates[collection] = {code, message};
}

void FakeApiServer::TouchOnEvents(bool on) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->touch_on_events = on;
}

void FakeApiServer::Throttle(int n, int retry_after_seconds) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->throttle = n;
  impl_->retry_after = retry_after_seconds;
}

void FakeApiServer::SetClock(const Clock* clock) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->clock = clock;
}

void FakeApiServer::Delay(std::chrono::milliseconds d) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->delay = d;
}

void FakeApiServer::SetToken(const std::string& token) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->token = token;
}

int FakeApiServer::requests_served() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->requests;
}

int FakeApiServer::throttled_served() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->throttled;
}

int FakeApiServer::watches_opened() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->watches;
}
int FakeApiServer::lists_served() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->lists;
}
int FakeApiServer::applies_served() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->applies;
}
int FakeApiServer::conflicts_served() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->conflicts;
}
int64_t FakeApiServer::version() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->rv;
}

}  // namespace adam::testing
