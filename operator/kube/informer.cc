// Informer.
#include "kube/informer.h"

#include <spdlog/spdlog.h>

namespace adam::kube {

std::string KeyOf(const Json& object) {
  auto field = [&](const char* key) -> std::string {
    if (!object.is_object()) return "";
    auto md = object.find("metadata");
    if (md == object.end() || !md->is_object()) return "";
    auto v = md->find(key);
    return v != md->end() && v->is_string() ? v->get<std::string>() : "";
  };
  return field("namespace") + "/" + field("name");
}

Informer::Informer(Client* client, Resource resource, std::string ns, std::string label_selector,
                   Handler handler, Clock* clock)
    : client_(client),
      resource_(std::move(resource)),
      ns_(std::move(ns)),
      selector_(std::move(label_selector)),
      handler_(std::move(handler)),
      clock_(clock) {}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Informer::WaitForSync(std::chrono::milliseconds timeout) const {
  MutexLock lock(mu_);
  clock_->AwaitFor(lock, cv_, timeout, [&] { return synced_.load() || stop_.load(); });
  return synced_.load();
}

std::optional<Json> Informer::Get(const std::string& ns, const std::string& name) const {
  MutexLock lock(mu_);
  auto it = cache_.find(ns + "/" + name);
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

std::vector<Json> Informer::List(const std::string& key, const std::string& value) const {
  MutexLock lock(mu_);
  std::vector<Json> out;
  for (const auto& [k, o] : cache_) {
    if (!key.empty()) {
      const Json labels = o["metadata"].value("labels", Json::object());
      if (labels.value(key, "") != value) continue;
    }
    out.push_back(o);
  }
  return out;
}

std::string Informer::resource_version() const {
  MutexLock lock(mu_);
  return version_;
}

Status Informer::ListOnce() {
  ListOptions lo;
  lo.label_selector = selector_;
  auto list = client_->List(resource_, ns_, lo);
  if (!list.ok()) return list.status();
  if (!list->is_object() || !list->contains("items") || !(*list)["items"].is_array() ||
      !list->value("metadata", Json::object()).is_object())
    return DataLossError("list " + resource_.plural + ": not a list object");
  for (const Json& item : (*list)["items"])
    if (!item.is_object() || !item.value("metadata", Json::object()).is_object())
      return DataLossError("list " + resource_.plural + ": an item without metadata");
  ++lists_;
  std::map<std::string, Json> fresh;
  for (const Json& item : list->value("items", Json::array())) fresh[KeyOf(item)] = item;
  std::vector<WatchEvent> events;
  {
    MutexLock lock(mu_);
    // The difference from what the cache held becomes events, so a relist misses nothing.
    for (const auto& [k, o] : cache_)
      if (!fresh.count(k)) events.push_back({"DELETED", o});
    for (const auto& [k, o] : fresh) {
      auto it = cache_.find(k);
      if (it == cache_.end())
        events.push_back({"ADDED", o});
      else if (it->second != o)
        events.push_back({"MODIFIED", o});
    }
    cache_ = std::move(fresh);
    const Json& rv = (*list)["metadata"]["resourceVersion"];
    version_ = rv.is_string() ? rv.get<std::string>() : "";
    synced_ = true;
  }
  cv_.notify_all();
  for (const auto& ev : events) Notify(ev);
  return OkStatus();
}

void Informer::Apply(const WatchEvent& ev) {
  {
    MutexLock lock(mu_);
    version_ = ev.object["metadata"].value("resourceVersion", version_);
    if (ev.type == "BOOKMARK") return;
    if (ev.type == "DELETED")
      cache_.erase(KeyOf(ev.object));
    else
      cache_[KeyOf(ev.object)] = ev.object;
  }
  Notify(ev);
}

void Informer::Notify(const WatchEvent& ev) {
  try {
    handler_(ev);
  } catch (const std::exception& e) {  // an object of an unexpected shape: skip it, keep watching
    spdlog::warn("{} event for {}: {}", resource_.plural, KeyOf(ev.object), e.what());
  }
}

void Informer::Run() {
  std::chrono::milliseconds backoff(100);
  bool need_list = true;
  auto sleep = [&](std::chrono::milliseconds d) {
    MutexLock lock(mu_);
    clock_->AwaitFor(lock, cv_, d, [&] { return stop_.load(); });
  };
  while (!stop_) {
    if (need_list) {
      Status s = ListOnce();
      if (!s.ok()) {
        spdlog::warn("list {}: {}", resource_.plural, s.message());
        sleep(backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
        continue;
      }
      need_list = false;
    }
    WatchOptions wo;
    wo.label_selector = selector_;
    wo.resource_version = resource_version();
    ++watches_;
    bool progressed = false;
    Status s = client_->Watch(
        resource_, ns_, wo,
        [&](const WatchEvent& ev) {
          progressed = true;
          Apply(ev);
          return !stop_.load();
        },
        &stop_);
    if (stop_) break;
    if (s.code() == StatusCode::kOutOfRange) {
      spdlog::info("watch {}: {}; listing again", resource_.plural, s.message());
      need_list = true;
      continue;
    }
    if (s.ok()) {  // the server ended the stream (its timeout): watch on from the last version
      backoff = std::chrono::milliseconds(100);
      continue;
    }
    if (progressed) backoff = std::chrono::milliseconds(100);
    spdlog::warn("watch {}: {}; reconnecting in {} ms", resource_.plural, s.message(),
                 backoff.count());
    sleep(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
}

}  // namespace adam::kube
