// A small Kubernetes API client: the REST verbs the operator needs, over JSON.
//
// `Client` is the interface the reconciler, informers and leader election use; `NewHttpClient`
// returns the real one (cpprestsdk; HTTPS with a bearer token or client certificate). Errors map
// the API's answers to Status codes: 404 -> NOT_FOUND, 409 on create -> ALREADY_EXISTS, 409 on
// update (stale resourceVersion) -> ABORTED, 410 Gone (a compacted resourceVersion) ->
// OUT_OF_RANGE, 422 -> INVALID_ARGUMENT, no answer -> UNAVAILABLE; the message carries the
// server's own. cpprest stays inside kube/ (its U() macro breaks other headers). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/status.h"

namespace adam::kube {

using Json = nlohmann::ordered_json;

// A kind of object in the API: "v1" + "pods", "apps/v1" + "statefulsets", ...
struct Resource {
  std::string group_version;  // "v1" (core) or "group/version"
  std::string plural;
  bool namespaced = true;

  // The collection path: /api/v1/namespaces/NS/pods, /apis/apps/v1/namespaces/NS/statefulsets;
  // an empty namespace lists across all namespaces.
  std::string Path(const std::string& name_space) const;
  bool operator==(const Resource&) const = default;
};

// The resources the operator touches.
Resource AdamJobs();
Resource Pods();
Resource Services();
Resource ConfigMaps();
Resource PersistentVolumeClaims();
Resource StatefulSets();
Resource Events();    // core/v1: read, for the kubelet's and controllers' events about pods
Resource EventsV1();  // events.k8s.io/v1: the operator's own, on its jobs
Resource Leases();
Resource NetworkPolicies();
Resource PodDisruptionBudgets();
Resource Secrets();
Resource Nodes();  // cluster-scoped
// Kueue's (kueue.x-k8s.io/v1beta2) and the scheduler-plugins coscheduling plugin's
// (scheduling.x-k8s.io/v1alpha1), used only for jobs that ask for them.
Resource Workloads();
Resource ResourceFlavors();          // cluster-scoped
Resource WorkloadPriorityClasses();  // cluster-scoped
Resource PodGroups();
// Kubernetes' own gang scheduling (scheduling.k8s.io/v1alpha2, 1.36 with GenericWorkload).
Resource GangPodGroups();

// Base64 (standard alphabet, padded), as a Secret's data holds its values.
std::string Base64Encode(const std::string& bytes);
StatusOr<std::string> Base64Decode(const std::string& text);

// The resource a rendered object of `kind` ("Pod", "StatefulSet", ...) belongs to.
StatusOr<Resource> ResourceForKind(const std::string& api_version, const std::string& kind);

// NOLINTNEXTLINE(bugprone-exception-escape): its implicit moves move a json, which may throw.
struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  Json object;
};

struct ListOptions {
  std::string label_selector;  // "k=v,k2=v2"; empty = everything
};

struct WatchOptions {
  std::string label_selector;
  std::string resource_version;       // events after this version
  bool bookmarks = true;              // allowWatchBookmarks
  std::chrono::seconds timeout{300};  // the server ends the stream after this (timeoutSeconds)
};

class Client {
 public:
  virtual ~Client() = default;

  virtual StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) = 0;
  // A list object: items plus metadata.resourceVersion, the version a watch continues from.
  virtual StatusOr<Json> List(const Resource& r, const std::string& ns, const ListOptions& o) = 0;
  // POST; the object's metadata.namespace is ignored in favour of `ns`.
  virtual StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& object) = 0;
  // PUT of the whole object; its metadata.resourceVersion must be current (else ABORTED).
  virtual StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& object) = 0;
  // PUT to the status subresource: only .status changes.
  virtual StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns,
                                      const Json& object) = 0;
  // Server-side apply (PATCH, application/apply-patch+yaml) as field manager `manager`, with
  // force: the fields `object` names become the manager's and take its values, whoever set them
  // last; fields it leaves out that others own are kept. The object must name apiVersion, kind
  // and metadata.name.
  virtual StatusOr<Json> Apply(const Resource& r, const std::string& ns, const Json& object,
                               const std::string& manager) = 0;
  // DELETE with propagationPolicy Background; NOT_FOUND when already gone.
  virtual Status Delete(const Resource& r, const std::string& ns, const std::string& name) = 0;
  // DELETE with gracePeriodSeconds 0: the object goes at once, without waiting for a kubelet to
  // confirm that a pod's containers stopped (one on an unreachable node never will).
  virtual Status ForceDelete(const Resource& r, const std::string& ns, const std::string& name) = 0;
  // Streams events to `on_event` until the server ends the stream (OK), `on_event` returns
  // false (OK), `stop` becomes true (CANCELLED), or the connection fails. An ERROR event with
  // code 410, or a 410 answer, returns OUT_OF_RANGE: the caller must list again.
  virtual Status Watch(const Resource& r, const std::string& ns, const WatchOptions& o,
                       const std::function<bool(const WatchEvent&)>& on_event,
                       const std::atomic<bool>* stop) = 0;
};

// An exec credential plugin (a kubeconfig user's `exec`, client.authentication.k8s.io/v1 or
// v1beta1): a command that prints an ExecCredential with a token or a client certificate.
struct ExecPlugin {
  std::string api_version = "client.authentication.k8s.io/v1";
  std::string command;  // a path (resolved against the kubeconfig's folder when relative) or a name
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;  // added to the operator's own
  std::string where;  // "kubeconfig.users[NAME].user.exec", for errors
};

// One answer of the API server, or a failure to get one, as the client saw it (metrics).
struct RequestRecord {
  std::string method;  // GET, POST, PUT, PATCH, DELETE, WATCH
  int code = 0;        // HTTP status; 0 = no answer
  double seconds = 0;  // until the answer's headers (a watch: until the stream opened)
};

// A token bucket of requests (kube/rate_limiter.h); NewRateLimiter makes one.
class RateLimiter;

// Where the API server is, how to authenticate, and the client's own limits.
struct Config {
  std::string server;  // https://host:port (or http:// for tests)
  std::string token;   // bearer token; empty = none
  // A file holding the bearer token, read again whenever it changes and after a 401 (bound
  // service-account tokens are rotated by the kubelet); replaces `token`.
  std::string token_file;
  std::optional<ExecPlugin> exec;  // credentials from a plugin, cached until they expire
  std::string ca_pem;              // CA bundle to verify the server; empty = system roots
  std::string client_cert_pem;     // client certificate and key (kubeconfig users)
  std::string client_key_pem;
  bool insecure_skip_tls_verify = false;
  std::string name_space = "default";  // the context's (or service account's) namespace
  // Client-side rate limit of requests (not watches): `qps` per second on average, bursts of
  // `burst`; qps <= 0 = none. A 429 or 503 answer with Retry-After is retried after that long,
  // up to `max_retries` times.
  double qps = 20;
  int burst = 30;
  // Set (NewRateLimiter(qps, burst)): every client made from a copy of this Config draws on
  // this one bucket, so that qps and burst bound them together. Null: each client has its own.
  std::shared_ptr<RateLimiter> limiter;
  int max_retries = 10;
  // A request whose answer makes no progress for this long fails UNAVAILABLE (a watch: its own
  // timeout plus 30 s).
  std::chrono::milliseconds request_timeout{30000};
  std::function<void(const RequestRecord&)> observer;  // every answer, on the calling thread
  // Where the waits of Retry-After and of the rate limit (a limiter a client makes for itself)
  // read and wait out time. Must outlive the clients.
  Clock* clock = Clock::Real();
};
// The service account's token file and CA, and KUBERNETES_SERVICE_HOST/PORT; NOT_FOUND outside a
// pod. The token is read again whenever the kubelet rotates it. `root` replaces "/" for tests.
StatusOr<Config> InClusterConfig(const std::string& root = "");

// The current (or named) context of a kubeconfig file: server, CA (file or -data), and the user's
// token, tokenFile, client certificate (file or -data) or exec plugin. Errors name the field at
// fault.
StatusOr<Config> LoadKubeconfig(const std::string& path, const std::string& context = "");
// The same, from the file's text; relative file references resolve against `base_dir`.
StatusOr<Config> ParseKubeconfig(const std::string& text, const std::string& base_dir,
                                 const std::string& context = "");

// The first existing file of a $KUBECONFIG-style list ("a:b"; missing ones are skipped, as
// kubectl does), or ~/.kube/config when `list` is empty and that file exists; "" when none is.
std::string DefaultKubeconfigPath(const std::string& list);

// Over HTTPS (HTTP for tests), reusing its connections; thread-safe.
std::unique_ptr<Client> NewHttpClient(const Config& config);
std::shared_ptr<RateLimiter> NewRateLimiter(double qps, int burst, Clock* clock = Clock::Real());

// RFC 3339 UTC time ("2026-11-23T05:55:15Z") of a system_clock time point, and back (nullopt
// when malformed).
std::string FormatTime(std::chrono::system_clock::time_point t);
// The same with microseconds ("2026-11-23T05:55:15.123456Z"), as an Event's eventTime is written.
std::string FormatMicroTime(std::chrono::system_clock::time_point t);
std::optional<std::chrono::system_clock::time_point> ParseTime(const std::string& text);

}  // namespace adam::kube
