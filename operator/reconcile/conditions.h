// Kubernetes conditions (metav1.Condition) in an object's status, as the operator reads and
// writes them on AdamJobs, pods and Kueue Workloads. Header-only; thread-compatible.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace adam::op {

// The condition of `type` in `status` (an object's .status), or null; a pointer into `status`.
inline const nlohmann::ordered_json* FindCondition(const nlohmann::ordered_json& status,
                                                   const std::string& type) {
  if (!status.is_object() || !status.contains("conditions")) return nullptr;
  const nlohmann::ordered_json& conds = status["conditions"];
  if (!conds.is_array()) return nullptr;
  for (const auto& c : conds)
    if (c.value("type", "") == type) return &c;
  return nullptr;
}

// Whether `status` has the condition `type` with status `value` ("True", "False").
inline bool ConditionIs(const nlohmann::ordered_json& status, const std::string& type,
                        const std::string& value) {
  const nlohmann::ordered_json* c = FindCondition(status, type);
  return c != nullptr && c->value("status", "") == value;
}

// Sets (or adds) the condition `type` in `status`; its lastTransitionTime becomes `now` only when
// its status changes. A false one never set is added only with `report_false`.
inline void PutCondition(nlohmann::ordered_json& status, const std::string& type, bool value,
                         const std::string& reason, const std::string& message,
                         const std::string& now, int64_t generation, bool report_false = true) {
  nlohmann::ordered_json& conds = status["conditions"];
  if (!conds.is_array()) conds = nlohmann::ordered_json::array();
  const std::string v = value ? "True" : "False";
  for (auto& c : conds) {
    if (c.value("type", "") != type) continue;
    if (c.value("status", "") != v) c["lastTransitionTime"] = now;
    c["status"] = v;
    c["reason"] = reason;
    c["message"] = message;
    c["observedGeneration"] = generation;
    return;
  }
  if (!value && !report_false) return;
  conds.push_back({{"type", type},
                   {"status", v},
                   {"observedGeneration", generation},
                   {"lastTransitionTime", now},
                   {"reason", reason},
                   {"message", message}});
}

}  // namespace adam::op
