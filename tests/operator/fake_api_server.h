// An in-process Kubernetes API server for tests, with the semantics the operator relies on:
// resourceVersions (one counter, as etcd's revision), list + watch from a version (chunked
// streams of JSON lines), bookmarks, 410 Gone for a compacted version, 409 on a stale update and
// on a duplicate create, generateName, metadata.generation bumped by spec changes, the status
// subresource (a main-resource PUT keeps status, a /status PUT changes only status), finalizers
// with deletionTimestamp, background garbage collection through ownerReferences, and
// server-side apply (PATCH, simplified: maps merged key by key, lists replaced whole).
//
// There is no scheduler or kubelet: tests play them by writing pod status (SetPodPhase). Faults:
// Compact() forgets history, BreakWatches() cuts every open stream, FailUpdates(n) answers the
// next n PUTs with 409, RefuseCreates(collection, code, message) every create there,
// TouchOnEvents(true) changes an object's metadata (a new resourceVersion) whenever an Event about
// it is created, as a client annotating it all the time would between a reader's GET and PUT,
// Throttle(n, s) the next n requests with 429 and Retry-After: s, Delay(d) holds every request for
// d before answering, SetToken() changes the accepted token. Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace adam {
class Clock;
}  // namespace adam

namespace adam::testing {

class FakeApiServer {
 public:
  using Json = nlohmann::ordered_json;
  static std::unique_ptr<FakeApiServer> Start();
  // Over HTTPS with this certificate chain and key (PEM files); with a non-empty `token`, every
  // request must carry "Authorization: Bearer TOKEN" (else 401).
  static std::unique_ptr<FakeApiServer> StartTls(const std::string& cert_file,
                                                 const std::string& key_file,
                                                 const std::string& token);
  ~FakeApiServer();

  std::string url() const;

  // Direct store access (no HTTP): `collection` is "v1/pods", "apps/v1/statefulsets", ...
  std::vector<Json> List(const std::string& collection, const std::string& ns = "") const;
  Json Get(const std::string& collection, const std::string& ns, const std::string& name) const;
  // Creates or replaces (no version check), as another actor would.
  Json Put(const std::string& collection, const Json& object);
  bool Remove(const std::string& collection, const std::string& ns, const std::string& name);

  // The kubelet's part: a pod's phase, its Ready condition, and (Failed/Succeeded) exit code and
  // termination message; status.podIP is set to the pod's name.
  void SetPodPhase(const std::string& ns, const std::string& name, const std::string& phase,
                   bool ready, int exit_code = 0, const std::string& message = "");
  // The StatefulSet controller's part: status.replicas and readyReplicas.
  void SetStatefulSetReady(const std::string& ns, const std::string& name, int ready);

  void Compact();
  void BreakWatches();
  void FailUpdates(int n);
  // Answers every create (POST) in `collection` with HTTP `code` (403, 422, ...) and `message`,
  // as an admission plugin, a quota or validation would; code 0 accepts them again.
  void RefuseCreates(const std::string& collection, int code, const std::string& message);
  void TouchOnEvents(bool on);
  // A pod on a node is deleted as a real API server deletes it: marked (deletionTimestamp) and
  // kept until its kubelet confirms (Remove), unless the delete asks for gracePeriodSeconds 0.
  void HoldPodDeletions(bool on);
  void Throttle(int n, int retry_after_seconds);
  void Delay(std::chrono::milliseconds d);
  // Where the times written into objects (creationTimestamp, deletionTimestamp) are read (the real
  // clock until then): a test that runs the operator on a FakeClock gives it here too. Not owned.
  void SetClock(const Clock* clock);
  void SetToken(const std::string& token);
  int requests_served() const;
  int throttled_served() const;

  int watches_opened() const;
  int lists_served() const;
  int conflicts_served() const;
  int applies_served() const;  // server-side apply PATCHes, whether they changed anything or not
  int64_t version() const;

 private:
  FakeApiServer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace adam::testing
