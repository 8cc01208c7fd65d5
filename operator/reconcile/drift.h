// Drift: what of an object the operator owns, and whether another client changed it.
//
// The operator creates its objects (POST) and from then on writes them with server-side apply as
// field manager kFieldManager. What it applies to an object that exists (ApplyConfiguration) is,
// by kind:
// - Pod: its labels and annotations (a pod's spec cannot change after it is made; a pod keeps the
//   adam.dev/generation it was made at, which is therefore left out);
// - PersistentVolumeClaim: its labels and annotations likewise (its spec is the storage's, and a
//   claim outlives its job);
// - StatefulSet: its metadata, replicas, pod template, update strategy and claim retention policy
//   (its selector, service name and claim templates cannot change);
// - everything else (ConfigMap, Service, NetworkPolicy, PodDisruptionBudget): the whole object.
// FirstDifference says where the object as it is differs from that, comparing only what the
// configuration names, so that the defaults the API server fills in are no drift.
//
// Server-side apply merges keyed lists item by item, so an item another client re-keyed (a
// Service port renumbered, still named "grpc") stays beside the operator's, and the API server
// may refuse the result (two ports of one name). Such an object is written whole instead
// (WrittenOver, a PUT at the version read).
#pragma once

#include <string>

#include "kube/client.h"

namespace adam::op {

inline constexpr const char* kFieldManager = "adam-operator";

// The part of the rendered object `o` the operator applies to the object once it exists.
kube::Json ApplyConfiguration(const kube::Json& o);

// The first field that `want` names and `live` lacks or holds with another value, as a path such
// as "spec.ports[0].port" or "spec.template.spec.containers[name=adam].image"; "" when `live`
// holds all of `want`. apiVersion and kind are not compared (a list's items come without them).
// A zero value in `want` (false, 0, "", an empty object or list) matches a missing field, as the
// API server leaves those out; lists must have the same length; quantities ("1", 1, "1000m",
// "1Gi") compare by value.
std::string FirstDifference(const kube::Json& want, const kube::Json& live);

// `live` with what `want` names written over it: maps merged key by key, lists and values
// replaced whole (the operator's lists are complete: an item another client added to one goes).
kube::Json WrittenOver(const kube::Json& live, const kube::Json& want);

// The value of a Kubernetes quantity ("500m" = 0.5, "2Gi" = 2^31), or false when `q` is none.
bool QuantityValue(const std::string& q, long double* value);

}  // namespace adam::op
