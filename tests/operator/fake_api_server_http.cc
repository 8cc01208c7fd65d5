// FakeApiServer's HTTP side: a request's path parsed, answered from the store, and watches.
#include "operator/fake_api_server_impl.h"

namespace adam::testing {

bool FakeApiServer::Impl::Parse(const std::string& path, Target* t) {
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
void FakeApiServer::Impl::Reply(http::http_request& req, int code, const Json& body) {
  const std::string text = body.dump();
  http::http_response resp(static_cast<http::status_code>(code));
  resp.set_body(std::vector<unsigned char>(text.begin(), text.end()));
  resp.headers().set_content_type("application/json");
  req.reply(resp);
}

void FakeApiServer::Impl::Fail(http::http_request& req, int code, const std::string& reason,
                               const std::string& message) {
  Reply(req, code,
        Json{{"kind", "Status"},
             {"apiVersion", "v1"},
             {"status", "Failure"},
             {"reason", reason},
             {"message", message},
             {"code", code}});
}

void FakeApiServer::Impl::Handle(http::http_request req) {
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
    if (touch_on_events && t.collection == "v1/events") Touch(o["involvedObject"].value("uid", ""));
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
void FakeApiServer::Impl::Watch(http::http_request& req, const Target& t,
                                const std::string& selector,
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

}  // namespace adam::testing
