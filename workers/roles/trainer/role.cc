#include "trainer/role.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/exit_codes.h"
#include "model/layout.h"
#include "net/grpc.h"
#include "topology/topology.h"
#include "trainer/push_check.h"
#include "trainer/split_replica.h"

namespace adam::trainer {

namespace {

// In a Kubernetes pod the kubelet keeps what a container wrote to this file as its termination
// message, in the pod's status after it ended: the operator reads the job's final figures there
// (trainer 0's last evaluation), which no scrape of a container that has exited can give. Only
// an existing file is written (the kubelet mounts it); elsewhere nothing is.
constexpr const char* kTerminationLog = "/dev/termination-log";

void WriteTerminationMessage(const TrainerResult& r) {
  nlohmann::json m = {{"epochs", r.epochs}, {"images", r.images}};
  if (r.test_accuracy >= 0) m["testAccuracy"] = r.test_accuracy;
  const std::string text = m.dump() + "\n";
  const int fd = ::open(kTerminationLog, O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return;
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    spdlog::warn("could not write the termination message to {}", kTerminationLog);
  ::close(fd);
}

// The trainer's series, registered on its metrics server.
TrainerMetrics RegisterMetrics(metrics::MetricsServer& reg) {
  TrainerMetrics tm{
      &reg.Counter("adam_trainer_images_total", "Training images processed"),
      &reg.Gauge("adam_trainer_loss", "Mean training loss of the last epoch"),
      &reg.Gauge("adam_trainer_test_accuracy", "Test accuracy after the last epoch"),
      &reg.Gauge("adam_trainer_epoch", "Epochs completed"),
      &reg.Counter("adam_trainer_pushes_total", "Update pushes to the parameter servers"),
      &reg.Counter("adam_trainer_push_bytes_total", "Update bytes pushed"),
      &reg.Counter("adam_trainer_pull_bytes_total", "Parameter bytes pulled")};
  const std::vector<double> latency = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                       0.05,   0.1,   0.25,  0.5,   1,    2.5};
  tm.push_seconds = &reg.Histogram("adam_trainer_push_seconds",
                                   "Time of one push to every parameter server", latency);
  tm.pull_seconds =
      &reg.Histogram("adam_trainer_pull_seconds",
                     "Time of one pull from every parameter server (with its waits)", latency);
  tm.map_version =
      &reg.Gauge("adam_trainer_shard_map_version",
                 "Version of the controller's shard map the trainer routes by (copies > 1)");
  tm.staleness =
      &reg.Gauge("adam_trainer_staleness_images",
                 "Images trained on the replica's weights since their last pull, at the last push");
  tm.drift_waits =
      &reg.Counter("adam_trainer_drift_waits_total",
                   "Times a worker waited because the replica was kMaxUnsyncedPushes "
                   "pushes ahead of its last push (e.g. a push held up by a failover)");
  tm.ring_waits = &reg.Counter("adam_trainer_ring_waits_total",
                               "threadWeights private: steps a worker published only after waiting "
                               "for a slower worker to apply its earlier ones");
  tm.held_back = &reg.Counter(
      "adam_trainer_filter_held_entries_total",
      "Entries of pushed weight deltas the significantly-modified filter kept for a later push");
  tm.quorum_wait = &reg.Counter("adam_trainer_quorum_wait_seconds_total",
                                "Seconds trainer 0 waited at the job's last epoch for the epoch "
                                "quorum of trainers to finish it");
  return tm;
}

// --check-pushes: the acknowledged-update check (push_check.h) instead of training. Exit 0 when
// nothing acknowledged was lost or applied twice and every copy agrees with its primary.
int CheckPushes(const spec::AdamJob& job, const spec::TrainerOptions& options,
                const RoleProcess& process, const shard::ShardMap& map, ParamServerClient* ps) {
  if (options.controller.empty()) {
    spdlog::error("--check-pushes compares a shard's copies: it needs --controller (copies > 1)");
    return kExitInvalid;
  }
  PushCheckOptions co;
  co.pushes = options.check_pushes;
  co.round = options.check_round;
  co.trainers = job.roles.trainer.replicas;
  co.index = options.index;
  co.every = std::chrono::milliseconds(options.check_every_ms);
  co.controller = spec::MemberAddresses(options.controller);
  co.transport = process.transport;
  co.clock = process.clock;
  auto r = RunPushCheck(map, ps, co);
  if (!r.ok()) {
    spdlog::error("{}", r.status().message());
    return r.status().code() == StatusCode::kInvalidArgument ? kExitInvalid : 1;
  }
  return r->lost + r->twice + r->disagree > 0 ? 1 : 0;
}

// How the trainer (and a model worker) reaches the parameter servers, its waits counted in `reg`.
GrpcParamServerClientOptions ClientOptions(const spec::AdamJob& job,
                                           const spec::TrainerOptions& options,
                                           const RoleProcess& process,
                                           metrics::MetricsServer& reg) {
  GrpcParamServerClientOptions po;
  po.trainer_name = options.common.name;
  po.trainer_index = options.index;
  po.transport = process.transport;
  po.format = {job.training.communication.float16, job.training.communication.zstd};
  po.sparse_pushes = job.training.communication.filter > 0;
  po.waits = &reg.Counter("adam_trainer_server_wait_seconds_total",
                          "Seconds requests spent waiting for an unreachable parameter server "
                          "(copies: 1) or data server");
  po.waiting =
      &reg.Gauge("adam_trainer_servers_unreachable",
                 "1 while a push or pull waits for an unreachable parameter server (copies: 1)");
  po.missing = &reg.Counter("adam_trainer_pulled_updates_missing_total",
                            "Updates missing from shards pulled at a lower version than this "
                            "trainer pulled before: lost at a failover (never acknowledged) or "
                            "with a server restarted from its checkpoint");
  return po;
}

// A client of `po` for a slice of the vector (all of it when `slice` is empty): to the servers
// the options list, or routed by the controller's shard map.
StatusOr<std::unique_ptr<ParamServerClient>> Connect(const spec::AdamJob& job,
                                                     const spec::TrainerOptions& options,
                                                     const update::JobLayout& derived,
                                                     GrpcParamServerClientOptions po,
                                                     std::vector<model::SliceRange> slice) {
  po.slice = std::move(slice);
  if (!spec::ControllerOwnsShards(job))
    return ConnectParamServers(derived.map, derived.plan, options.ps, po);
  return ConnectRoutedParamServers(derived.map, derived.layout, job.training.push_every,
                                   spec::MemberAddresses(options.controller), po);
}

// A model worker of a split replica (split_replica.h): its slice of the model, for the trainer.
int RunWorker(const spec::AdamJob& job, const spec::TrainerOptions& options,
              const RoleProcess& process, const update::JobLayout& derived,
              metrics::MetricsServer& reg) {
  const model::ModelLayout& layout = derived.layout;
  SplitOptions so;
  so.threads = options.threads > 0 ? options.threads : job.roles.trainer.threads;
  so.batch = job.training.batch_size;
  so.momentum = float(job.training.momentum);
  so.weight_decay = float(job.training.weight_decay);
  so.label_smoothing = float(job.training.label_smoothing);
  so.workers = options.model_workers;
  so.transport = process.transport;
  so.images = &reg.Counter("adam_model_worker_images_total",
                           "Images this model worker trained its slice of the model on");
  so.communication = job.training.communication;
  const GrpcParamServerClientOptions po = ClientOptions(job, options, process, reg);
  so.connect_slice = [&](std::vector<model::SliceRange> slice) {
    return Connect(job, options, derived, po, std::move(slice));
  };
  if (Status st = RunModelWorker(layout, so, options.model_worker); !st.ok()) {
    spdlog::error("{}", st.message());
    return kExitFailed;
  }
  spdlog::info("done: the trainer stopped its model workers");
  return 0;
}

// The trainer's own options from the job and the command line; threads are pinned only where
// this machine allows it (the reason is logged when it does not).
TrainerOptions OptionsOf(const spec::AdamJob& job, const spec::TrainerOptions& options,
                         const RoleProcess& process) {
  TrainerOptions to;
  to.index = options.index;
  to.threads = options.threads > 0 ? options.threads : job.roles.trainer.threads;
  to.name = options.common.name;
  to.evaluate_only = options.evaluate_only;
  to.model_out = options.model_out;
  to.model_workers = options.model_workers;
  to.transport = process.transport;
  to.clock = process.clock;
  to.bind = !options.no_bind && job.placement.numa_pinning;
  if (to.bind) {
    if (const auto pin = topology::DecidePinningHere(); !pin.pin) {
      spdlog::warn("worker threads not pinned: {}", pin.why);
      to.bind = false;
    }
  }
  return to;
}

// The data-server replica a trainer starts with: its own (its index modulo the replicas, which
// spreads the trainers over them) or, when that one does not answer (lost before this trainer
// started), the next that does; each asked for a second at a time, all of them for 30 s.
StatusOr<size_t> WaitForADataServer(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                                    const spec::TrainerOptions& options, Clock* clock) {
  const size_t n = channels.size();
  if (n == 0) return InvalidArgumentError("--data-server: no address given");
  const auto deadline = clock->Now() + std::chrono::seconds(30);
  const auto each = n == 1 ? std::chrono::milliseconds(30000) : std::chrono::milliseconds(1000);
  for (size_t k = 0;; ++k) {
    const size_t i = (size_t(std::max(0, options.index)) + k) % n;
    Status st = net::WaitForReady(channels[i].get(), "data server", options.data_server[i], each);
    if (st.ok()) return i;
    if (clock->Now() >= deadline)
      return n == 1 ? st
                    : UnavailableError(
                          "none of the " + std::to_string(n) +
                          " data servers answered within 30 s; the last: " + st.message());
  }
}

// How the trainer reaches the data-server replicas (`first` first), its waits counted in `reg`.
DataClientOptions DataOptions(const std::vector<std::string>& addresses, size_t first,
                              std::chrono::milliseconds timeout, prometheus::Counter* waits,
                              metrics::MetricsServer& reg) {
  DataClientOptions dco;
  dco.timeout = timeout;
  dco.addresses = addresses;
  dco.first = first;
  dco.waits = waits;
  dco.waiting = &reg.Gauge("adam_trainer_data_server_unreachable",
                           "1 while a request waits for an unreachable data server, else 0");
  dco.switches = &reg.Counter("adam_trainer_data_server_switches_total",
                              "Moves to another data-server replica after the one in use was lost");
  dco.in_use = &reg.Gauge("adam_trainer_data_server_in_use",
                          "The data-server replica this trainer's requests go to (its index in "
                          "--data-server, from 0)");
  return dco;
}

}  // namespace

TrainerRole::TrainerRole(const spec::AdamJob& job, spec::TrainerOptions options,
                         RoleProcess process, const update::JobLayout& derived)
    : job_(job), options_(std::move(options)), process_(std::move(process)), derived_(derived) {}

Status TrainerRole::Start() {
  ADAM_ASSIGN_OR_RETURN(
      metrics_, metrics::MetricsServer::Start(options_.metrics_host, options_.common.metrics_port));
  return OkStatus();
}

void TrainerRole::Stop() {
  MutexLock lock(mu_);
  stopped_ = true;
  if (running_ != nullptr) running_->Stop();
}

events::Ready TrainerRole::ReadyEvent() const {
  events::Ready ready;  // a trainer listens for nothing else
  ready.metrics_port = metrics_ ? metrics_->port() : 0;
  return ready;
}

int TrainerRole::Run() {
  const spec::AdamJob& job = job_;
  const spec::TrainerOptions& options = options_;
  const RoleProcess& process = process_;
  const model::ModelLayout& layout = derived_.layout;
  const shard::ShardMap& map = derived_.map;
  auto& reg = *metrics_;
  if (options.model_worker > 0) return RunWorker(job, options, process, derived_, reg);
  const TrainerMetrics tm = RegisterMetrics(reg);
  const GrpcParamServerClientOptions po = ClientOptions(job, options, process, reg);
  auto ps = Connect(job, options, derived_, po, {});
  if (!ps.ok()) {
    spdlog::error("{}", ps.status().message());
    return 1;
  }
  if (options.check_pushes > 0) return CheckPushes(job, options, process, map, ps->get());
  std::vector<std::shared_ptr<grpc::Channel>> data_channels;
  for (const auto& addr : options.data_server)
    data_channels.push_back(net::MakeChannel(*process.transport, addr));
  auto first_data = WaitForADataServer(data_channels, options, process.clock);
  if (!first_data.ok()) {
    spdlog::error("{}", first_data.status().message());
    return 1;
  }
  TrainerOptions to = OptionsOf(job, options, process);
  to.connect_slice = [&](std::vector<model::SliceRange> slice) {
    return Connect(job, options, derived_, po, std::move(slice));
  };
  reg.Gauge("adam_cpu_pinned", "1 when this role's threads are pinned to cores of its own, else 0")
      .Set(to.bind ? 1 : 0);
  spdlog::info("training with {} threads, batch {}, {} parameters in {} shards on {} servers",
               to.threads, job.training.batch_size, layout.num_params(), map.shards().size(),
               map.num_servers());
  const DataClientOptions dco =
      DataOptions(options.data_server, *first_data, to.rpc_timeout, po.waits, reg);
  Trainer trainer(job, to, tm, MakeGrpcDataClient(data_channels, dco), std::move(*ps));
  return Finish(RunStoppable(trainer));
}

StatusOr<TrainerResult> TrainerRole::RunStoppable(Trainer& trainer) {
  {
    MutexLock lock(mu_);
    if (stopped_) trainer.Stop();
    running_ = &trainer;
  }
  auto result = trainer.Run();
  MutexLock lock(mu_);
  running_ = nullptr;
  return result;
}

int TrainerRole::Finish(const StatusOr<TrainerResult>& result) {
  if (!result.ok()) {
    spdlog::error("{}", result.status().message());
    return kExitFailed;
  }
  if (!result->diverged.empty()) {
    spdlog::error("{}", result->diverged);
    return kExitDiverged;
  }
  spdlog::info("done: {} epochs, {} images in {:.1f} s", result->epochs, result->images,
               result->seconds);
  WriteTerminationMessage(*result);
  return 0;
}

}  // namespace adam::trainer
