// Operator: wiring of informers, work queue, workers, leader election and endpoints.
#include "operator.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <thread>

#include "core/mutex.h"
#include "core/signals.h"
#include "kube/http_endpoint.h"
#include "kube/informer.h"
#include "kube/leader.h"
#include "kube/workqueue.h"
#include "reconcile/reconciler.h"
#include "reconcile/render.h"

namespace adam::op {

void QueueOwner(kube::WorkQueue* queue, const Json& object, std::chrono::milliseconds batch) {
  const Json md = object.value("metadata", Json::object());
  const std::string job = md.value("labels", Json::object()).value(kJobLabel, "");
  if (job.empty()) return;
  const std::string key = md.value("namespace", "") + "/" + job;
  if (batch.count() > 0)
    queue->AddAfter(key, batch);
  else
    queue->Add(key);
}

namespace {

constexpr const char* kManagedSelector = "app.kubernetes.io/managed-by=adam-operator";

}  // namespace

struct Operator::Impl : public Children {
  kube::Client* reads = nullptr;   // informers
  kube::Client* writes = nullptr;  // the Lease; the reconciler through `fenced`
  std::unique_ptr<kube::FencedClient> fenced;
  OperatorOptions o;
  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Counter* reconcile_success = nullptr;
  prometheus::Counter* reconcile_error = nullptr;
  prometheus::Counter* reconcile_requeue_after = nullptr;
  prometheus::Counter* reconcile_errors = nullptr;
  prometheus::Histogram* reconcile_time = nullptr;
  prometheus::Gauge* depth = nullptr;
  prometheus::Counter* adds = nullptr;
  prometheus::Counter* retries = nullptr;
  prometheus::Family<prometheus::Counter>* repairs = nullptr;  // by kind
  prometheus::Gauge* leader_gauge = nullptr;
  prometheus::Gauge* active_workers = nullptr;

  std::unique_ptr<kube::HttpEndpoint> endpoint;
  std::unique_ptr<kube::LeaderElector> elector;
  // Serialises StartRunning, StopRunning and the metrics. The workers read the queue, informers,
  // by_plural, scrapes and reconciler without it: those are set before the workers start and torn
  // down only after they are joined (thread start and join order those accesses).
  Mutex mu;
  std::unique_ptr<kube::WorkQueue> queue;
  std::vector<std::unique_ptr<kube::Informer>> informers;  // jobs first, then children
  std::map<std::string, kube::Informer*> by_plural;
  std::unique_ptr<kube::MetricsCache> scrapes;
  std::unique_ptr<Reconciler> reconciler;  // shared by the workers; the queue hands out each key
                                           // to one worker at a time
  std::vector<std::thread> workers ABSL_GUARDED_BY(mu);
  // running: written under mu, read without it by workers for a log line only. was_leader and
  // lost: set by the elector's callbacks, read by LostLeadership. reconciles: a counter. Each a
  // value on its own, ordering no other data (sequentially consistent, rarely written).
  std::atomic<bool> running{false};
  std::atomic<bool> was_leader{false};
  std::atomic<bool> lost{false};
  std::atomic<uint64_t> reconciles{0};
  uint64_t adds_seen ABSL_GUARDED_BY(mu) = 0, retries_seen ABSL_GUARDED_BY(mu) = 0;

  std::vector<Json> Owned(const kube::Resource& r, const std::string& ns, const std::string& job,
                          const std::string& uid) const override {
    auto it = by_plural.find(r.plural);
    if (it == by_plural.end()) return {};
    std::vector<Json> out;
    for (Json& o : it->second->List(kJobLabel, job)) {
      if (o["metadata"].value("namespace", "") != ns) continue;
      std::string controller_uid;
      bool has_controller = false;
      for (const Json& ref : o["metadata"].value("ownerReferences", Json::array()))
        if (ref.value("controller", false)) {
          has_controller = true;
          controller_uid = ref.value("uid", "");
        }
      if (has_controller && controller_uid != uid) continue;  // another job's of the same name
      out.push_back(std::move(o));
    }
    return out;
  }

  void SetUpMetrics() {
    auto& total = prometheus::BuildCounter()
                      .Name("controller_runtime_reconcile_total")
                      .Help("Total number of reconciliations per controller")
                      .Register(*registry);
    reconcile_success = &total.Add({{"controller", "adamjob"}, {"result", "success"}});
    reconcile_error = &total.Add({{"controller", "adamjob"}, {"result", "error"}});
    reconcile_requeue_after = &total.Add({{"controller", "adamjob"}, {"result", "requeue_after"}});
    reconcile_errors = &prometheus::BuildCounter()
                            .Name("controller_runtime_reconcile_errors_total")
                            .Help("Total number of reconciliation errors per controller")
                            .Register(*registry)
                            .Add({{"controller", "adamjob"}});
    reconcile_time =
        &prometheus::BuildHistogram()
             .Name("controller_runtime_reconcile_time_seconds")
             .Help("Length of time per reconciliation per controller")
             .Register(*registry)
             .Add({{"controller", "adamjob"}}, prometheus::Histogram::BucketBoundaries{
                                                   0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5});
    active_workers = &prometheus::BuildGauge()
                          .Name("controller_runtime_active_workers")
                          .Help("Number of currently used workers per controller")
                          .Register(*registry)
                          .Add({{"controller", "adamjob"}});
    depth = &prometheus::BuildGauge()
                 .Name("workqueue_depth")
                 .Help("Current depth of workqueue")
                 .Register(*registry)
                 .Add({{"name", "adamjob"}});
    adds = &prometheus::BuildCounter()
                .Name("workqueue_adds_total")
                .Help("Total number of adds handled by workqueue")
                .Register(*registry)
                .Add({{"name", "adamjob"}});
    retries = &prometheus::BuildCounter()
                   .Name("workqueue_retries_total")
                   .Help("Total number of retries handled by workqueue")
                   .Register(*registry)
                   .Add({{"name", "adamjob"}});
    repairs = &prometheus::BuildCounter()
                   .Name("adam_operator_repairs_total")
                   .Help("Objects of a job put back after another client changed them, by kind")
                   .Register(*registry);
    leader_gauge = &prometheus::BuildGauge()
                        .Name("leader_election_master_status")
                        .Help("1 while this candidate holds the leader Lease, else 0")
                        .Register(*registry)
                        .Add({{"name", o.lease_name}});
  }

  std::string MetricsText() {
    MutexLock lock(mu);
    if (queue) {
      depth->Set(double(queue->Depth()));
      adds->Increment(double(queue->adds() - adds_seen));
      adds_seen = queue->adds();
      retries->Increment(double(queue->retries() - retries_seen));
      retries_seen = queue->retries();
    }
    return prometheus::TextSerializer().Serialize(registry->Collect());
  }

  bool Synced() {
    MutexLock lock(mu);
    if (!running) return o.leader_elect;  // a standby is ready to take over
    for (const auto& i : informers)
      if (!i->Synced()) return false;
    return true;
  }

  // Begins reconciling: informers, then workers once the caches are filled.
  void StartRunning() {
    MutexLock lock(mu);
    if (running) return;
    kube::WorkQueue::Options qo;
    qo.clock = o.clock;  // a pass's requeue_after and the retries' back-off, as its timers
    queue = std::make_unique<kube::WorkQueue>(qo);
    adds_seen = retries_seen = 0;
    if (o.metrics)
      scrapes = std::make_unique<kube::MetricsCache>(o.metrics.get(), o.status_period,
                                                     kube::MetricsCache::kThreads, o.clock);
    reconciler =
        std::make_unique<Reconciler>(fenced.get(), this, o.clock, scrapes.get(), o.status_period);
    reconciler->set_certificate_validity(o.certificate_validity);
    reconciler->set_kueue(o.kueue);
    reconciler->set_default_image(o.default_image);
    reconciler->set_reporting_instance(o.identity);
    reconciler->set_restart_backoff(o.restart_backoff, o.restart_backoff_max);
    reconciler->set_node_loss_timeout(o.node_loss_timeout);
    reconciler->set_on_repair([f = repairs](const std::string& kind) {
      f->Add({{"kind", kind}}).Increment();
    });
    kube::WorkQueue* q = queue.get();
    // The echo of the reconciler's own status write queues nothing: each write would otherwise
    // reconcile the job once more.
    auto job_handler = [q, r = reconciler.get()](const kube::WatchEvent& ev) {
      if (!r->OwnWrite(ev)) q->Add(kube::KeyOf(ev.object));
    };
    auto child_handler = [q, batch = o.child_event_batch](const kube::WatchEvent& ev) {
      QueueOwner(q, ev.object, batch);
    };
    informers.push_back(std::make_unique<kube::Informer>(reads, kube::AdamJobs(), o.watch_namespace,
                                                         "", job_handler, o.clock));
    by_plural.clear();
    // Not Secrets: the reconciler reads its jobs' two by name, so the operator needs no right to
    // list or watch every Secret of the cluster.
    std::vector<kube::Resource> children = {kube::Pods(),
                                            kube::StatefulSets(),
                                            kube::ConfigMaps(),
                                            kube::Services(),
                                            kube::PersistentVolumeClaims(),
                                            kube::NetworkPolicies(),
                                            kube::PodDisruptionBudgets()};
    if (o.kueue) children.push_back(kube::Workloads());
    for (const kube::Resource& r : children) {
      informers.push_back(std::make_unique<kube::Informer>(
          reads, r, o.watch_namespace, kManagedSelector, child_handler, o.clock));
      by_plural[r.plural] = informers.back().get();
    }
    // Children first, so a job's first reconcile sees what it already owns.
    for (size_t i = informers.size(); i-- > 0;) informers[i]->Start();
    running = true;
    for (int w = 0; w < std::max(1, o.workers); ++w) workers.emplace_back([this] { Work(); });
  }

  void StopRunning() {
    std::vector<std::thread> ws;
    {
      MutexLock lock(mu);
      if (!running) return;
      running = false;
      queue->ShutDown();
      ws.swap(workers);
    }
    for (auto& t : ws) t.join();
    // No reconcile runs from here on (and no write of theirs started after the fence closed).
    spdlog::info("reconciling stopped");
    MutexLock lock(mu);
    for (auto& i : informers) i->Stop();
    informers.clear();
    by_plural.clear();
    scrapes.reset();
  }

  void Work() {
    kube::WorkQueue* q = queue.get();
    for (const auto& i : informers) i->WaitForSync(std::chrono::seconds(60));
    while (auto key = q->Get()) {
      const size_t slash = key->find('/');
      const std::string ns = key->substr(0, slash), name = key->substr(slash + 1);
      active_workers->Increment();
      const auto t0 = o.clock->Now();
      StatusOr<ReconcileResult> r = [&]() -> StatusOr<ReconcileResult> {
        try {
          return reconciler->Reconcile(ns, name);
        } catch (const std::exception& e) {  // an object of an unexpected shape: retry, never die
          return InternalError("reconcile " + *key + ": " + e.what());
        }
      }();
      reconcile_time->Observe(o.clock->SecondsSince(t0));
      active_workers->Decrement();
      ++reconciles;
      if (!r.ok()) {
        reconcile_error->Increment();
        reconcile_errors->Increment();
        if (r.status().code() != StatusCode::kAborted && running.load())
          spdlog::warn("reconcile {}: {}", *key, r.status().message());
        q->AddRateLimited(*key);
      } else {
        q->Forget(*key);
        if (r->requeue_after) {
          reconcile_requeue_after->Increment();
          q->AddAfter(*key, *r->requeue_after);
        } else {
          reconcile_success->Increment();
        }
      }
      q->Done(*key);
    }
  }
};

namespace {

// --kueue: said at once when Workloads cannot be listed, not as caches that never fill.
Status CheckKueue(kube::Client* reads, const std::string& watch_namespace) {
  kube::ListOptions lo;
  lo.label_selector = kManagedSelector;
  auto probe = reads->List(kube::Workloads(), watch_namespace, lo);
  if (probe.ok()) return OkStatus();
  return FailedPreconditionError(
      "--kueue: cannot list kueue.x-k8s.io/v1beta2 Workloads (is Kueue installed, and may the "
      "operator read them?): " +
      probe.status().message());
}

// /metrics (`metrics`' text), /healthz and /readyz (503 until `synced`) on `addr` (HOST:PORT; no
// colon: any host, port 8080).
StatusOr<std::unique_ptr<kube::HttpEndpoint>> ServeHttp(const std::string& addr,
                                                        const std::function<std::string()>& metrics,
                                                        const std::function<bool()>& synced) {
  const size_t colon = addr.rfind(':');
  const std::string host = colon == std::string::npos ? "0.0.0.0" : addr.substr(0, colon);
  const int port = colon == std::string::npos ? 8080 : std::atoi(addr.c_str() + colon + 1);
  return kube::HttpEndpoint::Start(
      host.empty() ? "0.0.0.0" : host, port,
      {{"/metrics",
        [metrics] {
          return kube::HttpAnswer{200, "text/plain; version=0.0.4; charset=utf-8", metrics()};
        }},
       {"/healthz",
        [] {
          return kube::HttpAnswer{200, "text/plain; charset=utf-8", "ok\n"};
        }},
       {"/readyz", [synced] {
          return synced()
                     ? kube::HttpAnswer{200, "text/plain; charset=utf-8", "ok\n"}
                     : kube::HttpAnswer{503, "text/plain; charset=utf-8", "caches not synced\n"};
        }}});
}

kube::LeaderOptions LeaderOptionsOf(const OperatorOptions& o, const std::string& identity) {
  kube::LeaderOptions lo;
  lo.name_space = o.lease_namespace.empty() ? "default" : o.lease_namespace;
  lo.name = o.lease_name;
  lo.identity = identity;
  lo.lease_duration = o.lease_duration;
  lo.renew_deadline = o.renew_deadline;
  lo.retry_period = o.retry_period;
  lo.clock = o.clock;
  return lo;
}

}  // namespace

Operator::Operator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Operator::~Operator() { Stop(); }

StatusOr<std::unique_ptr<Operator>> Operator::Start(kube::Client* reads, kube::Client* writes,
                                                    const OperatorOptions& o) {
  auto impl = std::make_unique<Impl>();
  impl->reads = reads;
  impl->writes = writes;
  impl->o = o;
  impl->registry = o.registry ? o.registry : std::make_shared<prometheus::Registry>();
  if (impl->o.identity.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    impl->o.identity = std::string(host) + "-" + std::to_string(getpid());
  }
  if (o.kueue) ADAM_RETURN_IF_ERROR(CheckKueue(reads, o.watch_namespace));
  impl->SetUpMetrics();
  Impl* raw = impl.get();
  auto endpoint = ServeHttp(
      o.metrics_address, [raw] { return raw->MetricsText(); }, [raw] { return raw->Synced(); });
  if (!endpoint.ok()) return endpoint.status();
  impl->endpoint = std::move(*endpoint);
  const kube::LeaderOptions lo = LeaderOptionsOf(o, raw->o.identity);
  if (o.leader_elect) ADAM_RETURN_IF_ERROR(kube::CheckLeaderTimes(lo, o.write_timeout));
  std::unique_ptr<Operator> op(new Operator(std::move(impl)));
  if (!o.leader_elect) {
    raw->fenced = std::make_unique<kube::FencedClient>(writes, [] { return true; });
    raw->leader_gauge->Set(1);
    raw->StartRunning();
    return op;
  }
  raw->fenced = std::make_unique<kube::FencedClient>(
      writes, [raw] { return raw->elector && raw->elector->Leading(); });
  raw->elector = std::make_unique<kube::LeaderElector>(
      writes, lo,
      [raw] {
        raw->was_leader = true;
        raw->leader_gauge->Set(1);
        raw->StartRunning();
      },
      [raw] {
        raw->leader_gauge->Set(0);
        if (raw->was_leader) raw->lost = true;
        // Stopping joins workers; never from a worker, and the elector's thread is not one.
        raw->StopRunning();
      });
  raw->elector->Start();
  return op;
}

void Operator::Stop() {
  if (!impl_) return;
  if (impl_->elector) impl_->elector->Stop();
  impl_->StopRunning();
  impl_->endpoint.reset();
}

bool Operator::IsLeader() const { return impl_->elector ? impl_->elector->Leading() : true; }
bool Operator::LostLeadership() const { return impl_->lost.load(); }
int Operator::metrics_port() const { return impl_->endpoint ? impl_->endpoint->port() : 0; }
uint64_t Operator::reconciles() const { return impl_->reconciles.load(); }

namespace {

// Where the operator finds its cluster, as controller-runtime looks: --kubeconfig, then
// $KUBECONFIG, then the pod's service account, then ~/.kube/config.
StatusOr<kube::Config> FindConfig(const std::string& kubeconfig, const std::string& context) {
  if (!kubeconfig.empty()) return kube::LoadKubeconfig(kubeconfig, context);
  const char* env = std::getenv("KUBECONFIG");
  if (env && *env) {
    const std::string path = kube::DefaultKubeconfigPath(env);
    if (path.empty())
      return InvalidArgumentError(std::string("$KUBECONFIG (") + env +
                                  ") names no file that exists");
    return kube::LoadKubeconfig(path, context);
  }
  auto in_cluster = kube::InClusterConfig();
  if (in_cluster.ok() ||
      in_cluster.status().message().find("KUBERNETES_SERVICE_HOST") == std::string::npos)
    return in_cluster;
  const std::string home = kube::DefaultKubeconfigPath("");
  if (!home.empty()) return kube::LoadKubeconfig(home, context);
  return NotFoundError("no cluster: pass --kubeconfig, set $KUBECONFIG, or run in a pod");
}

}  // namespace

int OperatorMain(const OperatorOptions& options, const std::string& kubeconfig,
                 const std::string& context) {
  BlockTerminationSignals();
  auto config = FindConfig(kubeconfig, context);
  if (!config.ok()) {
    spdlog::error("{}", config.status().message());
    return 2;
  }
  OperatorOptions o = options;
  if (o.lease_namespace.empty()) o.lease_namespace = config->name_space;
  o.metrics = kube::NewHttpMetricsSource();
  o.registry = std::make_shared<prometheus::Registry>();
  // client-go's names: requests by answer code and method, and their latency.
  auto& requests = prometheus::BuildCounter()
                       .Name("rest_client_requests_total")
                       .Help("Number of HTTP requests to the API server, by status code and method")
                       .Register(*o.registry);
  auto& latency = prometheus::BuildHistogram()
                      .Name("rest_client_request_duration_seconds")
                      .Help("Request latency to the API server, by verb")
                      .Register(*o.registry);
  config->observer = [&requests, &latency](const kube::RequestRecord& r) {
    requests.Add({{"code", r.code ? std::to_string(r.code) : "<error>"}, {"method", r.method}})
        .Increment();
    latency
        .Add({{"verb", r.method}},
             prometheus::Histogram::BucketBoundaries{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15,
                                                     30, 60})
        .Observe(r.seconds);
  };
  config->qps = o.qps;
  config->burst = o.burst;
  config->limiter = kube::NewRateLimiter(o.qps, o.burst);  // the reads' and the writes' together
  kube::Config read_config = *config;
  read_config.request_timeout = std::chrono::seconds(30);
  kube::Config write_config = *config;
  write_config.request_timeout = o.write_timeout;
  auto reads = kube::NewHttpClient(read_config);
  auto writes = kube::NewHttpClient(write_config);
  auto op = Operator::Start(reads.get(), writes.get(), o);
  if (!op.ok()) {
    spdlog::error("{}", op.status().message());
    return op.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  spdlog::info(
      "adam operator: API {}, watching {}, endpoints on port {}, {} workers, {} QPS "
      "(burst {})",
      config->server,
      o.watch_namespace.empty() ? "every namespace" : "namespace " + o.watch_namespace,
      (*op)->metrics_port(), o.workers, config->qps, config->burst);
  int code = 0;
  while (true) {
    if (WaitForTerminationSignal(std::chrono::milliseconds(100))) break;
    if ((*op)->LostLeadership()) {
      spdlog::error("lost the leader Lease; exiting to start again clean");
      code = 1;
      break;
    }
  }
  (*op)->Stop();
  return code;
}

}  // namespace adam::op
