// Start failures.
#include "reconcile/start_failures.h"

#include <algorithm>
#include <set>

#include "kube/client.h"

namespace adam::op {

using Json = nlohmann::ordered_json;

namespace {

// Waiting reasons of a container that waiting alone does not cure: the kubelet retries them
// with a back-off, and the job would sit Pending. ImagePullBackOff is ErrImagePull between two
// tries: one reason for both, so that the condition and its event do not flap.
std::string HardWaitingReason(const std::string& reason) {
  static const std::set<std::string> hard = {
      "ErrImagePull",         "ErrImageNeverPull",          "InvalidImageName",
      "CreateContainerError", "CreateContainerConfigError", "RunContainerError",
      "PreCreateHookError",   "PreStartHookError",          "PostStartHookError"};
  if (reason == "ImagePullBackOff") return "ErrImagePull";
  return hard.count(reason) ? reason : "";
}

std::string Name(const Json& o) { return o["metadata"].value("name", ""); }

bool Started(const Json& cs) {
  const Json state = cs.value("state", Json::object());
  return state.contains("running") || state.contains("terminated");
}

}  // namespace

std::optional<StartFailure> RefusedCreate(const std::string& kind, const std::string& name,
                                          const Status& refusal) {
  if (refusal.code() != StatusCode::kInvalidArgument &&
      refusal.code() != StatusCode::kFailedPrecondition)
    return std::nullopt;
  // The client's message is "METHOD PATH: HTTP CODE: the API server's message".
  std::string said = refusal.message();
  if (const size_t at = said.find(": HTTP "); at != std::string::npos) {
    const size_t colon = said.find(": ", at + 7);
    if (colon != std::string::npos) said = said.substr(colon + 2);
  }
  std::string lower = kind;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string object = lower + " " + name;
  return StartFailure{"FailedCreate", object, object + ": the API server refused it: " + said};
}

std::optional<StartFailure> WaitingContainer(const std::vector<Json>& pods) {
  for (const Json& pod : pods) {
    if (pod["metadata"].contains("deletionTimestamp")) continue;
    const Json st = pod.value("status", Json::object());
    for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
      for (const Json& cs : st.value(list, Json::array())) {
        const Json waiting = cs.value("state", Json::object()).value("waiting", Json::object());
        const std::string reason = HardWaitingReason(waiting.value("reason", ""));
        if (reason.empty()) continue;
        const std::string object = "pod " + Name(pod) + ", container " + cs.value("name", "");
        std::string message = object + ": " + waiting.value("reason", "");
        if (const std::string m = waiting.value("message", ""); !m.empty()) message += ": " + m;
        return StartFailure{reason, object, message};
      }
    }
  }
  return std::nullopt;
}

std::vector<std::string> StuckObjects(const std::vector<Json>& pods, const std::vector<Json>& sets,
                                      std::chrono::system_clock::time_point now) {
  std::vector<std::string> uids;
  for (const Json& pod : pods) {
    if (pod["metadata"].contains("deletionTimestamp")) continue;
    const Json st = pod.value("status", Json::object());
    if (st.value("phase", "Pending") != "Pending") continue;
    std::optional<std::chrono::system_clock::time_point> scheduled;
    for (const Json& c : st.value("conditions", Json::array()))
      if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "True")
        scheduled = kube::ParseTime(c.value("lastTransitionTime", ""));
    if (!scheduled || now - *scheduled < kStartGrace) continue;
    const Json containers = st.value("containerStatuses", Json::array());
    if (std::any_of(containers.begin(), containers.end(), Started)) continue;
    uids.push_back(pod["metadata"].value("uid", ""));
  }
  for (const Json& set : sets) {
    const int want = set.value("spec", Json::object()).value("replicas", 1);
    if (set.value("status", Json::object()).value("replicas", 0) < want)
      uids.push_back(set["metadata"].value("uid", ""));
  }
  return uids;
}

std::optional<StartFailure> FromEvents(const Json& events, const std::vector<std::string>& uids) {
  const Json items = events.value("items", Json::array());  // `newest` points into it
  const Json* newest = nullptr;
  std::string newest_time;
  for (const Json& e : items) {
    if (e.value("type", "") != "Warning") continue;
    const Json obj = e.value("involvedObject", Json::object());
    if (std::find(uids.begin(), uids.end(), obj.value("uid", "")) == uids.end()) continue;
    // lastTimestamp (core/v1 recorders) or eventTime (events.k8s.io ones): RFC 3339, so
    // comparable as text.
    std::string t = e.value("lastTimestamp", "");
    if (t.empty() && e.contains("eventTime") && e["eventTime"].is_string()) t = e["eventTime"];
    if (!newest || t >= newest_time) {
      newest = &e;
      newest_time = t;
    }
  }
  if (!newest) return std::nullopt;
  const Json obj = newest->value("involvedObject", Json::object());
  std::string kind = obj.value("kind", "object");
  std::transform(kind.begin(), kind.end(), kind.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string object = kind + " " + obj.value("name", "");
  return StartFailure{newest->value("reason", "Failed"), object,
                      object + ": " + newest->value("message", "")};
}

}  // namespace adam::op
