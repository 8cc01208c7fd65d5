// The diff phase: the job's rendered objects set against those it owns (diff.h).
#include "reconcile/diff.h"

#include <algorithm>
#include <set>

#include "reconcile/observe.h"

namespace adam::op {

std::string ObjectKey(const Json& object) {
  return object["kind"].get<std::string>() + "/" + object["metadata"]["name"].get<std::string>();
}

bool ObjectReady(const Json& want, const Json& current) {
  const std::string kind = want["kind"];
  if (kind == "StatefulSet") {
    const int replicas = want["spec"]["replicas"];
    return current.value("status", Json::object()).value("readyReplicas", 0) >= replicas;
  }
  if (kind == "Pod") return PodRoleOf(current) == PodRole::kTrainer || PodReady(current);
  return true;
}

namespace {

bool IsPod(const std::string& key) { return key.rfind("Pod/", 0) == 0; }

// A pod the plan no longer has that goes (diff.h: ObjectDiff::unplanned_pods).
bool GoesUnplanned(const Json& pod) {
  const PodRole role = PodRoleOf(pod);
  return role == PodRole::kTrainer ||
         (role == PodRole::kParamServer && RolePhase(pod) == "Succeeded");
}

}  // namespace

ObjectDiff DiffObjects(const std::vector<Json>& desired,
                       const std::map<std::string, Json>& existing, bool created) {
  ObjectDiff diff;
  std::set<std::string> planned;
  int last_stage = 0;
  for (const Json& o : desired) {
    last_stage = std::max(last_stage, StageOf(o));
    planned.insert(ObjectKey(o));
  }
  diff.stages.resize(size_t(last_stage) + 1);
  for (const Json& o : desired) {
    if (o["kind"] == "PodGroup") continue;
    ObjectChange c;
    c.want = &o;
    auto it = existing.find(ObjectKey(o));
    if (it != existing.end()) {
      c.current = &it->second;
      c.change = HasDeletion(it->second) ? Change::kWait : Change::kCompare;
      c.ready = c.change == Change::kCompare && ObjectReady(o, it->second);
    }
    diff.stages[size_t(StageOf(o))].push_back(c);
  }
  for (const auto& [key, o] : existing) {
    if (!IsPod(key) || HasDeletion(o)) continue;
    diff.started = diff.started || (created && StageOf(o) == last_stage);
    if (!planned.count(key) && GoesUnplanned(o))
      diff.unplanned_pods.push_back(o["metadata"]["name"].get<std::string>());
  }
  return diff;
}

bool MakesPods(const std::vector<Json>& desired, const std::map<std::string, Json>& existing) {
  return std::any_of(desired.begin(), desired.end(), [&](const Json& o) {
    return (o["kind"] == "Pod" || o["kind"] == "StatefulSet") && !existing.count(ObjectKey(o));
  });
}

bool HasStatefulSet(const std::map<std::string, Json>& existing) {
  return std::any_of(existing.begin(), existing.end(),
                     [](const auto& e) { return e.first.rfind("StatefulSet/", 0) == 0; });
}

}  // namespace adam::op
