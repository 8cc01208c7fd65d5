// FakeApiServer on cpprest's listener.
#include "operator/fake_api_server.h"

#include <cpprest/http_listener.h>
#include <cpprest/producerconsumerstream.h>

#include <atomic>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "core/ports.h"

namespace adam::testing {

namespace http = web::http;
using Json = FakeApiServer::Json;

namespace {

std::string Now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool HasStatusSubresource(const std::string& collection) {
  return collection != "v1/configmaps" && collection != "v1/events" &&
         collection != "events.k8s.io/v1/events" && collection != "v1/secrets" &&
         collection != "coordination.k8s.io/v1/leases";
}

// "a=b,c!=d,e" -> does `labels` match?
bool Matches(const std::string& selector, const Json& labels) {
  std::stringstream ss(selector);
  for (std::string term; std::getline(ss, term, ',');) {
    if (term.empty()) continue;
    const size_t ne = term.find("!=");
    const size_t eq = term.find('=');
    if (ne != std::string::npos) {
      if (labels.value(term.substr(0, ne), "") == term.substr(ne + 2)) return false;
    } else if (eq != std::string::npos) {
      const std::string key = term.substr(0, eq);
      std::string val = term.substr(eq + 1);
      if (!val.empty() && val[0] == '=') val = val.substr(1);
      if (!labels.contains(key) || labels[key] != val) return false;
    } else if (!labels.contains(term)) {
      return false;
    }
  }
  return true;
}

Json Labels(const Json& o) { return o["metadata"].value("labels", Json::object()); }

Json StripForGeneration(Json o) {
  o.erase("metadata");
  o.erase("status");
  return o;
}

}  // namespace

struct FakeApiServer::Impl {
  struct Event {
    int64_t rv;
    std::string collection, ns, type;
    Json object;
  };
  struct Watcher {
    std::string collection, ns, selector;
    bool bookmarks = false;
    concurrency::streams::producer_consumer_buffer<uint8_t> buf;
    std::chrono::steady_clock::time_point deadline, next_bookmark;
    bool open = true;
  };

  mutable std::mutex mu;
  std::map<std::string, std::map<std::string, Json>> store;  // collection -> "ns/name" -> object
  std::deque<Event> history;
  int64_t rv = 1;
  int64_t compacted = 0;  // events at or below this version are forgotten
  std::vector<std::shared_ptr<Watcher>> watchers;
  // Every watch response not yet sent to its end: the destructor waits for them before closing
  // the listener. cpprest's listener closes its connections' sockets from the closing thread,
  // which races a write its own threads are still starting on one (a segfault in
  // epoll_reactor::start_op, seen under ASan in CI).
  std::vector<pplx::task<void>> streams;
  int fail_updates = 0;
  // RefuseCreates: collection -> the answer every create of it gets (code, message).
  std::map<std::string, std::pair<int, std::string>> refuse_creates;
  bool touch_on_events = false;
  bool hold_pod_deletions = false;
  int throttle = 0, retry_after = 1, throttled = 0, requests = 0;
  std::chrono::milliseconds delay{0};
  int watches = 0, lists = 0, conflicts = 0, applies = 0;
  std::mt19937 rng{7};
  std::unique_ptr<http::experimental::listener::http_listener> listener;
  std::string url;
  std::string token;
  std::atomic<bool> stop{false};
  std::thread reaper;

  // ---- store (mu held) ----

  void Write(std::shared_ptr<Watcher>& w, const std::string& type, const Json& object) {
    if (!w->open) return;
    const std::string line = Json{{"type", type}, {"object", object}}.dump() + "\n";
    w->buf.putn_nocopy(reinterpret_cast<const uint8_t*>(line.data()), line.size()).wait();
    w->buf.sync().wait();
  }

  void Close(std::shared_ptr<Watcher>& w) {
    if (!w->open) return;
    w->open = false;
    w->buf.close(std::ios_base::out).wait();
  }

  void Emit(const std::string& collection, const std::string& type, const Json& object) {
    const std::string ns = object["metadata"].value("namespace", "");
    history.push_back({rv, collection, ns, type, object});
    for (auto& w : watchers)
      if (w->open && w->collection == collection && (w->ns.empty() || w->ns == ns) &&
          Matches(w->selector, Labels(object)))
        Write(w, type, object);
  }

  // Server-side apply, simplified: the patch's maps are merged into the object key by key and
  // its lists replace the object's whole (the real server merges keyed lists item by item); the
  // manager is recorded in metadata.managedFields. An apply that changes nothing writes nothing.
  void ApplyLocked(http::http_request& req, const std::string& collection, const std::string& key,
                   const Json& patch, const std::string& manager) {
    ++applies;
    auto& objs = store[collection];
    auto it = objs.find(key);
    if (it == objs.end()) return Fail(req, 404, "NotFound", collection + " " + key + " not found");
    const Json& cur = it->second;
    Json o = cur;
    MergeInto(patch, &o);
    for (const char* f : {"uid", "creationTimestamp", "generation", "deletionTimestamp",
                          "namespace", "resourceVersion", "managedFields"})
      if (cur["metadata"].contains(f))
        o["metadata"][f] = cur["metadata"][f];
      else
        o["metadata"].erase(f);
    if (o == cur) return Reply(req, 200, cur);
    if (StripForGeneration(o) != StripForGeneration(cur))
      o["metadata"]["generation"] = cur["metadata"].value("generation", 1) + 1;
    Json& managers = o["metadata"]["managedFields"];
    if (!managers.is_array()) managers = Json::array();
    bool listed = false;
    for (const Json& m : managers)
      listed = listed || (m.value("manager", "") == manager && m.value("operation", "") == "Apply");
    if (!listed) managers.push_back({{"manager", manager}, {"operation", "Apply"}});
    o = Stamp(o);
    it->second = o;
    Emit(collection, "MODIFIED", o);
    return Reply(req, 200, o);
  }

  static void MergeInto(const Json& patch, Json* o) {
    for (const auto& [k, v] : patch.items()) {
      if (v.is_object() && o->contains(k) && (*o)[k].is_object())
        MergeInto(v, &(*o)[k]);
      else
        (*o)[k] = v;
    }
  }

  // Another client's write to an object's metadata alone (an annotation): a new resourceVersion,
  // the same generation.
  void Touch(const std::string& uid) {
    for (auto& [collection, objs] : store)
      for (auto& [key, o] : objs) {
        if (o["metadata"].value("uid", "") != uid) continue;
        Json& notes = o["metadata"]["annotations"];
        if (!notes.is_object()) notes = Json::object();
        notes["touched"] = std::to_string(std::stoi(notes.value("touched", "0")) + 1);
        o = Stamp(o);
        Emit(collection, "MODIFIED", o);
        return;
      }
  }

  Json Stamp(Json o) {
    o["metadata"]["resourceVersion"] = std::to_string(++rv);
    return o;
  }

  static std::string Key(const Json& o) {
    return o["metadata"].value("namespace", "") + "/" + o["metadata"].value("name", "");
  }

  void RemoveLocked(const std::string& collection, const std::string& key) {
    auto& objs = store[collection];
    auto it = objs.find(key);
    if (it == objs.end()) return;
    Json gone = it->second;
    objs.erase(it);
    gone = Stamp(gone);
    Emit(collection, "DELETED", gone);
    // Background garbage collection of dependents.
    const std::string uid = gone["metadata"].value("uid", "");
    std::vector<std::pair<std::string, std::string>> dependents;
    for (auto& [c, m] : store)
      for (auto& [k, o] : m)
        for (const Json& ref : o["metadata"].value("ownerReferences", Json::array()))
          if (ref.value("uid", "") == uid) dependents.push_back({c, k});
    for (auto& [c, k] : dependents) DeleteLocked(c, k);
  }

  void DeleteLocked(const std::string& collection, const std::string& key) {
    auto& objs = store[collection];
    auto it = objs.find(key);
    if (it == objs.end()) return;
    Json& o = it->second;
    if (!o["metadata"].value("finalizers", Json::array()).empty()) {
      if (!o["metadata"].contains("deletionTimestamp")) {
        o["metadata"]["deletionTimestamp"] = Now();
        o = Stamp(o);
        Emit(collection, "MODIFIED", o);
      }
      return;
    }
    RemoveLocked(collection, key);
  }

  // ---- HTTP ----

  struct Target {
    std::string collection, ns, name;
    bool status = false;
  };

  static bool Parse(const std::string& path, Target* t) {
    std::vector<std::string> parts;
    std::stringstream ss(path);
    for (std::string p; std::getline(ss, p, '/');)
      if (!p.empty()) parts.push_back(p);
    size_t i = 0;
    std::string gv;
    if (parts.size() >= 2 && parts[0] == "api") {
      gv = parts[1];
      i = 2;
    } else if (parts.size() >= 3 && parts[0] == "apis") {
      gv = parts[1] + "/" + parts[2];
      i = 3;
    } else {
      return false;
    }
    if (i + 1 < parts.size() && parts[i] == "namespaces") {
      t->ns = parts[i + 1];
      i += 2;
    }
    if (i >= parts.size()) return false;
    t->collection = gv + "/" + parts[i++];
    if (i < parts.size()) t->name = parts[i++];
    if (i < parts.size()) {
      if (parts[i] != "status") return false;
      t->status = true;
      ++i;
    }
    return i == parts.size();
  }

  // Bodies as bytes (cpprest's std::string overloads do a cast UBSan reports).
  static void Reply(http::http_request& req, int code, const Json& body) {
    const std::string text = body.dump();
    http::http_response resp(static_cast<http::status_code>(code));
    resp.set_body(std::vector<unsigned char>(text.begin(), text.end()));
    resp.headers().set_content_type("application/json");
    req.reply(resp);
  }
  static void Fail(http::http_request& req, int code, const std::string& reason,
                   const std::string& message) {
    Reply(req, code,
          Json{{"kind", "Status"},
               {"apiVersion", "v1"},
               {"status", "Failure"},
               {"reason", reason},
               {"message", message},
               {"code", code}});
  }

  void Handle(http::http_request req) {
    std::chrono::milliseconds hold{0};
    std::string want_token;
    {
      std::lock_guard<std::mutex> lock(mu);
      ++requests;
      hold = delay;
      want_token = token;
      if (throttle > 0) {
        --throttle;
        ++throttled;
        http::http_response resp(429);
        resp.headers().add("Retry-After", std::to_string(retry_after));
        const std::string text = Json{
            {"kind", "Status"},
            {"code", 429},
            {"reason", "TooManyRequests"},
            {"message",
             "too many requests"}}.dump();
        resp.set_body(std::vector<unsigned char>(text.begin(), text.end()));
        req.reply(resp);
        return;
      }
    }
    if (hold.count() > 0) std::this_thread::sleep_for(hold);
    if (!want_token.empty()) {
      auto h = req.headers().find("Authorization");
      if (h == req.headers().end() || h->second != "Bearer " + want_token)
        return Fail(req, 401, "Unauthorized", "Unauthorized");
    }
    Target t;
    const std::string path = http::uri::decode(req.relative_uri().path());
    if (!Parse(path, &t)) return Fail(req, 404, "NotFound", "no route " + path);
    auto query = http::uri::split_query(req.relative_uri().query());
    for (auto& [k, v] : query) v = http::uri::decode(v);
    const std::string method = req.method();
    Json body;
    const bool apply = method == http::methods::PATCH;
    if (apply) {
      auto ct = req.headers().find("Content-Type");
      if (ct == req.headers().end() || ct->second.rfind("application/apply-patch+yaml", 0) != 0)
        return Fail(req, 415, "UnsupportedMediaType", "only server-side apply is served");
      if (query["fieldManager"].empty())
        return Fail(req, 400, "BadRequest", "fieldManager is required for apply patch");
    }
    if (method == http::methods::POST || method == http::methods::PUT || apply) {
      try {
        const std::vector<unsigned char> bytes = req.extract_vector().get();
        body = Json::parse(std::string(bytes.begin(), bytes.end()));
      } catch (const std::exception& e) {
        return Fail(req, 400, "BadRequest", std::string("body is not JSON: ") + e.what());
      }
      if (!body.is_object() || !body.contains("metadata") || !body["metadata"].is_object())
        return Fail(req, 422, "Invalid", "metadata: required");
    }
    if (method == http::methods::DEL) {  // DeleteOptions, when given
      try {
        const std::vector<unsigned char> bytes = req.extract_vector().get();
        if (!bytes.empty()) body = Json::parse(std::string(bytes.begin(), bytes.end()));
      } catch (const std::exception& e) {
        return Fail(req, 400, "BadRequest", std::string("body is not JSON: ") + e.what());
      }
    }
    std::unique_lock<std::mutex> lock(mu);
    auto& objs = store[t.collection];
    if (method == http::methods::GET && t.name.empty()) {
      const std::string selector = query.count("labelSelector") ? query["labelSelector"] : "";
      if (query.count("watch") && (query["watch"] == "1" || query["watch"] == "true"))
        return Watch(req, t, selector, query);
      ++lists;
      Json items = Json::array();
      for (auto& [k, o] : objs)
        if ((t.ns.empty() || o["metadata"].value("namespace", "") == t.ns) &&
            Matches(selector, Labels(o)))
          items.push_back(o);
      return Reply(req, 200,
                   Json{{"kind", "List"},
                        {"apiVersion", "v1"},
                        {"metadata", {{"resourceVersion", std::to_string(rv)}}},
                        {"items", items}});
    }
    const std::string key =
        t.ns + "/" + (t.name.empty() ? body["metadata"].value("name", "") : t.name);
    if (method == http::methods::GET) {
      auto it = objs.find(key);
      if (it == objs.end())
        return Fail(req, 404, "NotFound", t.collection + " " + key + " not found");
      return Reply(req, 200, it->second);
    }
    if (method == http::methods::POST) {
      if (auto r = refuse_creates.find(t.collection); r != refuse_creates.end())
        return Fail(req, r->second.first, r->second.first == 403 ? "Forbidden" : "Invalid",
                    r->second.second);
      Json o = body;
      if (!o["metadata"].contains("name")) {
        const std::string prefix = o["metadata"].value("generateName", "");
        if (prefix.empty()) return Fail(req, 422, "Invalid", "metadata.name: required");
        o["metadata"]["name"] = prefix + std::to_string(rng() % 100000);
      }
      o["metadata"]["namespace"] = t.ns;
      const std::string k = Key(o);
      if (objs.count(k))
        return Fail(req, 409, "AlreadyExists", t.collection + " " + k + " already exists");
      o["metadata"]["uid"] = "uid-" + std::to_string(rv + 1);
      o["metadata"]["creationTimestamp"] = Now();
      o["metadata"]["generation"] = 1;
      if (t.collection == "v1/pods" && !o.contains("status")) o["status"] = {{"phase", "Pending"}};
      o = Stamp(o);
      objs[k] = o;
      Emit(t.collection, "ADDED", o);
      if (touch_on_events && t.collection == "v1/events")
        Touch(o["involvedObject"].value("uid", ""));
      if (touch_on_events && t.collection == "events.k8s.io/v1/events")
        Touch(o["regarding"].value("uid", ""));
      return Reply(req, 201, o);
    }
    if (method == http::methods::PUT) {
      auto it = objs.find(key);
      if (it == objs.end())
        return Fail(req, 404, "NotFound", t.collection + " " + key + " not found");
      if (fail_updates > 0) {
        --fail_updates;
        ++conflicts;
        return Fail(req, 409, "Conflict", "injected conflict");
      }
      const Json& cur = it->second;
      const std::string want = body["metadata"].value("resourceVersion", "");
      if (!want.empty() && want != cur["metadata"].value("resourceVersion", "")) {
        ++conflicts;
        return Fail(req, 409, "Conflict",
                    "Operation cannot be fulfilled on " + t.collection + " " + key +
                        ": the object has been modified; please apply your changes to the latest "
                        "version and try again");
      }
      Json o;
      if (t.status) {
        o = cur;
        o["status"] = body.value("status", Json::object());
      } else {
        o = body;
        for (const char* f :
             {"uid", "creationTimestamp", "generation", "deletionTimestamp", "namespace"})
          if (cur["metadata"].contains(f)) o["metadata"][f] = cur["metadata"][f];
        if (HasStatusSubresource(t.collection)) {
          if (cur.contains("status"))
            o["status"] = cur["status"];
          else
            o.erase("status");
        }
        if (StripForGeneration(o) != StripForGeneration(cur))
          o["metadata"]["generation"] = cur["metadata"].value("generation", 1) + 1;
      }
      o = Stamp(o);
      it->second = o;
      Emit(t.collection, "MODIFIED", o);
      if (o["metadata"].contains("deletionTimestamp") &&
          o["metadata"].value("finalizers", Json::array()).empty())
        RemoveLocked(t.collection, key);
      return Reply(req, 200, o);
    }
    if (apply) return ApplyLocked(req, t.collection, key, body, query["fieldManager"]);
    if (method == http::methods::DEL) {
      if (!objs.count(key))
        return Fail(req, 404, "NotFound", t.collection + " " + key + " not found");
      Json& cur = objs[key];
      const bool now = body.is_object() && body.value("gracePeriodSeconds", -1) == 0;
      if (hold_pod_deletions && t.collection == "v1/pods" && !now &&
          !cur["spec"].value("nodeName", "").empty()) {
        if (!cur["metadata"].contains("deletionTimestamp")) {
          cur["metadata"]["deletionTimestamp"] = Now();
          cur = Stamp(cur);
          Emit(t.collection, "MODIFIED", cur);
        }
        return Reply(req, 200, cur);
      }
      DeleteLocked(t.collection, key);
      return Reply(req, 200, Json{{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Success"}});
    }
    return Fail(req, 405, "MethodNotAllowed", method);
  }

  // mu held.
  void Watch(http::http_request& req, const Target& t, const std::string& selector,
             std::map<std::string, std::string>& query) {
    ++watches;
    auto w = std::make_shared<Watcher>();
    w->collection = t.collection;
    w->ns = t.ns;
    w->selector = selector;
    w->bookmarks = query.count("allowWatchBookmarks") && query["allowWatchBookmarks"] == "true";
    const int timeout = query.count("timeoutSeconds") ? std::stoi(query["timeoutSeconds"]) : 300;
    w->deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout);
    w->next_bookmark = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    http::http_response resp(http::status_codes::OK);
    resp.headers().set_content_type("application/json");
    // Ended with its connection, so that nothing more is started on that socket once the
    // stream's reply task is done (see `streams`).
    resp.headers().add("Connection", "close");
    resp.set_body(w->buf.create_istream());
    const std::string from = query.count("resourceVersion") ? query["resourceVersion"] : "";
    if (!from.empty() && std::stoll(from) < compacted) {
      Write(w, "ERROR",
            Json{{"kind", "Status"},
                 {"apiVersion", "v1"},
                 {"status", "Failure"},
                 {"reason", "Expired"},
                 {"code", 410},
                 {"message",
                  "too old resource version: " + from + " (" + std::to_string(compacted) + ")"}});
      Close(w);
      streams.push_back(req.reply(resp));
      return;
    }
    auto match = [&](const std::string& ns, const Json& o) {
      return (t.ns.empty() || ns == t.ns) && Matches(selector, Labels(o));
    };
    if (from.empty()) {
      for (auto& [k, o] : store[t.collection])
        if (match(o["metadata"].value("namespace", ""), o)) Write(w, "ADDED", o);
    } else {
      const int64_t v = std::stoll(from);
      for (const Event& e : history)
        if (e.rv > v && e.collection == t.collection && match(e.ns, e.object))
          Write(w, e.type, e.object);
    }
    watchers.push_back(w);
    streams.push_back(req.reply(resp));
  }

  void Reap() {
    while (!stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::lock_guard<std::mutex> lock(mu);
      const auto now = std::chrono::steady_clock::now();
      for (auto& w : watchers) {
        if (!w->open) continue;
        if (now >= w->deadline) {
          Close(w);
        } else if (w->bookmarks && now >= w->next_bookmark) {
          w->next_bookmark = now + std::chrono::milliseconds(500);
          Write(
              w, "BOOKMARK",
              Json{{"kind", "Bookmark"}, {"metadata", {{"resourceVersion", std::to_string(rv)}}}});
        }
      }
      std::erase_if(watchers, [](const auto& w) { return !w->open; });
      std::erase_if(streams, [](const pplx::task<void>& t) { return t.is_done(); });
    }
  }
};

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
    o["metadata"]["creationTimestamp"] = Now();
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
