// The inside of FakeApiServer, shared by fake_api_server.cc (the store, the test's calls, the
// watches' reaper) and fake_api_server_http.cc (the HTTP requests). Not a public header.
#pragma once

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

#include "core/clock.h"
#include "core/ports.h"
#include "operator/fake_api_server.h"

namespace adam::testing {

namespace http = web::http;
using Json = FakeApiServer::Json;

inline bool HasStatusSubresource(const std::string& collection) {
  return collection != "v1/configmaps" && collection != "v1/events" &&
         collection != "events.k8s.io/v1/events" && collection != "v1/secrets" &&
         collection != "coordination.k8s.io/v1/leases";
}

// "a=b,c!=d,e" -> does `labels` match?
inline bool Matches(const std::string& selector, const Json& labels) {
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

inline Json Labels(const Json& o) { return o["metadata"].value("labels", Json::object()); }

inline Json StripForGeneration(Json o) {
  o.erase("metadata");
  o.erase("status");
  return o;
}

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
  const Clock* clock = Clock::Real();  // SetClock's: the times written into objects

  // The time as the API server writes it into an object (creationTimestamp, deletionTimestamp):
  // RFC 3339, whole seconds, UTC.
  std::string Now() const {
    const std::time_t t = std::chrono::system_clock::to_time_t(clock->WallNow());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
  }

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

  // ---- HTTP (fake_api_server_http.cc) ----

  struct Target {
    std::string collection, ns, name;
    bool status = false;
  };

  static bool Parse(const std::string& path, Target* t);
  // Bodies as bytes (cpprest's std::string overloads do a cast UBSan reports).
  static void Reply(http::http_request& req, int code, const Json& body);
  static void Fail(http::http_request& req, int code, const std::string& reason,
                   const std::string& message);
  void Handle(http::http_request req);
  // mu held.
  void Watch(http::http_request& req, const Target& t, const std::string& selector,
             std::map<std::string, std::string>& query);

  // ---- the watches' deadlines and bookmarks ----

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

}  // namespace adam::testing
