// `adam operator`: informers, a work queue and workers running the AdamJob reconciler, behind
// Lease leader election, with /metrics, /healthz and /readyz.
//
// Only the leader runs informers and workers; a leader that cannot renew its Lease stops them
// (and the process exits, as controller-runtime's managers do, to start again clean). Its writes
// go through a FencedClient: none starts once renew_deadline has passed without a renewal, so a
// standby that takes over after lease_duration never writes at the same time (kube/leader.h).
// Up to `workers` different jobs are reconciled at once; trainers' /metrics are scraped in the
// background (kube::MetricsCache), so a slow pod never holds a reconcile. Metrics use the
// conventional names (controller_runtime_reconcile_total, workqueue_depth,
// rest_client_requests_total, ...; see docs/reference/metrics.md). Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/clock.h"
#include "core/status.h"
#include "kube/client.h"
#include "kube/scrape.h"
#include "net/tls.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace adam::kube {
class WorkQueue;
}  // namespace adam::kube

namespace adam::op {

struct OperatorOptions {
  std::string watch_namespace;  // "" = every namespace
  // Where the operator's metrics live (the API client's too, when the caller records them
  // there); null = a registry of its own.
  std::shared_ptr<prometheus::Registry> registry;
  std::string metrics_address = "0.0.0.0:8080";  // /metrics, /healthz, /readyz; port 0 = any
  bool leader_elect = true;
  std::string lease_namespace;  // "" = the operator's own namespace ("default" in tests)
  std::string lease_name = "adam-operator";
  std::string identity;  // this candidate; default: the host name
  int workers = 2;
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  // The bound on each request of the `writes` client (checked against the Lease times).
  std::chrono::milliseconds write_timeout{2000};
  // Client-side limit on API requests (not watches): qps on average, bursts of `burst`.
  double qps = 50;
  int burst = 100;
  // How long a job waits for a reconcile after a change to one of its objects (a pod's status,
  // say), so that the changes of a burst are reconciled once, as Kubernetes' Job controller
  // batches pod updates; changes to the AdamJob itself are never delayed. 0 = at once. With
  // the rate above, measured at scale in docs/reference/performance.md.
  std::chrono::milliseconds child_event_batch{2000};
  // Reads trainers' /metrics for the job status (epoch, accuracy, images/s); null = none.
  std::shared_ptr<kube::MetricsSource> metrics;
  std::chrono::milliseconds status_period{10000};
  // Lifetime of the job certificates the operator issues; renewed with a third of it left.
  std::chrono::seconds certificate_validity = net::kCertificateValidity;
  // Kueue: jobs labelled kueue.x-k8s.io/queue-name wait for their Workload's admission
  // (reconcile/kueue.h). Start fails when the API server has no Kueue Workloads.
  bool kueue = false;
  // spec.image of a job that names none ("" = spec::AdamJob's own default); the chart passes its
  // image.
  std::string default_image;
  // How long a trainer or data server waits on an unreachable node before it is force-deleted
  // and made again elsewhere (Reconciler::set_node_loss_timeout); 0 = never.
  std::chrono::milliseconds node_loss_timeout{120000};
  // Back-off between re-creations of a role's failed pods (Reconciler::set_restart_backoff).
  std::chrono::milliseconds restart_backoff{10000};
  std::chrono::milliseconds restart_backoff_max{300000};
  // Where the operator reads the time: the Lease, reconciles' timers and the work queue's delays,
  // the informers' reconnects, the scrape cache and the reconcile-duration metric (not owned).
  Clock* clock = Clock::Real();
};

class Operator {
 public:
  // Does not take ownership of the clients, which must outlive the operator. `reads` serves the
  // informers' lists and watches; `writes` the reconciler and the Lease, and its requests must be
  // bounded (Config::request_timeout) so that the leader's last write ends before its Lease does.
  static StatusOr<std::unique_ptr<Operator>> Start(kube::Client* reads, kube::Client* writes,
                                                   const OperatorOptions& o);
  static StatusOr<std::unique_ptr<Operator>> Start(kube::Client* client, const OperatorOptions& o) {
    return Start(client, client, o);
  }
  ~Operator();

  // Stops workers, informers and campaigning (a leader gives up its Lease).
  void Stop();
  bool IsLeader() const;
  // True once this operator lost a leadership it held (the process should exit).
  bool LostLeadership() const;
  int metrics_port() const;
  uint64_t reconciles() const;

 private:
  struct Impl;
  explicit Operator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Queues the AdamJob that owns `object` (by its job label; nothing for an object without one):
// at once, or `batch` after the first change of a burst (QueueOwner's later calls within it
// add nothing).
void QueueOwner(kube::WorkQueue* queue, const kube::Json& object, std::chrono::milliseconds batch);

// The `adam operator` process: runs until SIGINT/SIGTERM or lost leadership; returns the exit
// code. Configuration: `kubeconfig` (a file) or, when empty, the pod's service account.
int OperatorMain(const OperatorOptions& options, const std::string& kubeconfig,
                 const std::string& context);

}  // namespace adam::op
