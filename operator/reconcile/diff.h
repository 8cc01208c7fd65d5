// The diff phase of a reconcile, typed: the job's rendered objects (what it wants) set against the
// objects it owns (what the informers hold), before anything is written. Which objects are made,
// which are compared for drift and which wait out their deletion, stage by stage; whether the job
// already ran whole; and which pods the plan no longer has. The reconciler's apply phase
// (objects.cc: EnsureObjects) writes what this says, in its order. Pure functions over JSON.
// Thread-compatible.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reconcile/render.h"

namespace adam::op {

// How objects are keyed on both sides: "Kind/name".
std::string ObjectKey(const Json& object);

// Whether an existing object is as far along as the next stage needs: a StatefulSet once its
// desired replicas are ready, a pod (not a trainer: it has no readiness probe) once it is ready,
// anything else as soon as it exists.
bool ObjectReady(const Json& want, const Json& current);

enum class Change {
  kMake,     // absent: made (a pod only once its role's back-off ended)
  kCompare,  // present: compared with what the job wants, put back where another client changed it
  kWait,     // present but being deleted: left alone, not ready, made again once it is gone
};

struct ObjectChange {
  const Json* want = nullptr;     // into the desired objects given
  const Json* current = nullptr;  // into the existing objects given; null for kMake
  Change change = Change::kMake;
  bool ready = false;  // kCompare: ObjectReady; a made or waiting object is decided by apply
};

struct ObjectDiff {
  // By stage (render.h: StageOf), 0 first; a stage may be empty. PodGroups are not here: the gang
  // or PodGroup is made before any pod (objects.cc: EnsurePodGroup).
  std::vector<std::vector<ObjectChange>> stages;
  // The job ran whole (its Created condition) and still has a pod of its last stage: a lost pod is
  // then made again at once, whatever the other stages' state, instead of stage by stage.
  bool started = false;
  // Pods to delete: trainers the plan no longer has (a scale-down), and parameter servers it no
  // longer has (parameterServer.replicas lowered, copies > 1) once they retired: such a server
  // exits 0 by itself when the controller has moved its copies to the others, and serves until
  // then. Nothing else goes for a changed spec: the controllers hold the shard map, whose shape
  // the CRD keeps immutable; if a change slipped past it, they keep running.
  std::vector<std::string> unplanned_pods;
};

// The changes that bring `existing` (keyed by ObjectKey) to `desired`. `created`: the job's
// Created condition is true. The changes point into both arguments: valid while they are.
ObjectDiff DiffObjects(const std::vector<Json>& desired,
                       const std::map<std::string, Json>& existing, bool created);

// True when a pod or StatefulSet of `desired` does not exist yet: this pass makes the job's pods
// (and so places them where Kueue admitted the job).
bool MakesPods(const std::vector<Json>& desired, const std::map<std::string, Json>& existing);

// True when the job owns a StatefulSet (its controller group).
bool HasStatefulSet(const std::map<std::string, Json>& existing);

}  // namespace adam::op
