// Why a job's pods do not start, in the cluster's words: a create the API server refused (Pod
// Security admission, a ResourceQuota, a webhook, an invalid field), a container the kubelet
// cannot start (an image it cannot pull, a missing ConfigMap or Secret key), or a pod that waits
// for what only the kubelet's events tell (a volume that will not mount, a sandbox that fails).
// Pure functions over the objects the reconciler already holds; the reconciler turns the first
// failure into the job's StartFailure condition and a Warning event. Thread-compatible.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace adam::op {

struct StartFailure {
  std::string reason;   // FailedCreate, ErrImagePull, FailedMount, ... (the cluster's word)
  std::string object;   // "pod NAME", "statefulset NAME", "pod NAME, container C"
  std::string message;  // OBJECT: what the API server or the kubelet said
};

// How long a scheduled pod may go without a started container before its events are read.
inline constexpr std::chrono::seconds kStartGrace{5};

// A create of `kind` `name` that the API server refused for good (400, 403, 422: admission,
// quota, validation); nullopt for an error a retry may cure (a conflict, 429, 5xx, no answer).
std::optional<StartFailure> RefusedCreate(const std::string& kind, const std::string& name,
                                          const Status& refusal);

// The first container of the pods that the kubelet reports waiting for a reason no wait cures
// (an image it cannot pull, a bad container configuration), in the pods' order.
std::optional<StartFailure> WaitingContainer(const std::vector<nlohmann::ordered_json>& pods);

// The uids of the pods scheduled at least kStartGrace before `now` with no container started,
// and of the StatefulSets with fewer pods than they want: what only their events explain.
std::vector<std::string> StuckObjects(const std::vector<nlohmann::ordered_json>& pods,
                                      const std::vector<nlohmann::ordered_json>& sets,
                                      std::chrono::system_clock::time_point now);

// The newest Warning event (core/v1 Event objects, as listed) about one of `uids`, as a failure
// naming its object; nullopt when none.
std::optional<StartFailure> FromEvents(const nlohmann::ordered_json& events,
                                       const std::vector<std::string>& uids);

}  // namespace adam::op
