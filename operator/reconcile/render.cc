// Render: plan -> Kubernetes objects; ToYaml.
#include "reconcile/render.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <regex>

#include "spec/plan.h"
#include "spec/pod_template.h"
#include "spec/role_options.h"

namespace adam::op {
namespace {

using spec::Role;
using spec::RoleInstance;

// Start stage on a cluster: controllers, then parameter servers, then data servers and trainers.
// A gang starts at once: neither the coscheduling plugin nor Kubernetes' gang scheduling places
// any of its pods until all exist.
int KubeStage(const spec::AdamJob& job, Role role, bool has_controllers) {
  if (job.run_policy.scheduling.coscheduling || job.run_policy.scheduling.gang) return 0;
  const int base = has_controllers ? 1 : 0;
  switch (role) {
    case Role::kController:
      return 0;
    case Role::kParamServer:
      return base;
    case Role::kDataServer:
    case Role::kTrainer:
      return base + 1;
  }
  return 0;
}

Json Labels(const spec::AdamJob& job, const std::string& role) {
  return Json{{"app.kubernetes.io/name", "adam"},
              {"app.kubernetes.io/instance", job.name},
              {"app.kubernetes.io/component", role},
              {"app.kubernetes.io/managed-by", "adam-operator"},
              {kJobLabel, job.name},
              {kRoleLabel, role}};
}

Json Selector(const spec::AdamJob& job, const std::string& role) {
  return Json{{"matchLabels", {{kJobLabel, job.name}, {kRoleLabel, role}}}};
}

}  // namespace

Json Metadata(const spec::AdamJob& job, const std::string& name, const std::string& role, int stage,
              const RenderOptions& o) {
  Json md = {{"name", name}, {"namespace", job.name_space}, {"labels", Labels(job, role)}};
  md["annotations"] = Json{{kStageAnnotation, std::to_string(stage)},
                           {kGenerationAnnotation, std::to_string(o.generation)}};
  if (!o.owner_uid.empty())
    md["ownerReferences"] = Json::array({Json{{"apiVersion", "adam.dev/v1alpha1"},
                                              {"kind", "AdamJob"},
                                              {"name", job.name},
                                              {"uid", o.owner_uid},
                                              {"controller", true},
                                              {"blockOwnerDeletion", true}}});
  return md;
}

namespace {

// Requests and limits. With NUMA pinning both are set and equal (Guaranteed QoS: the kubelet's
// static CPU manager then gives the pod whole cores); missing values get the role's defaults.
Json ResourcesOf(const spec::AdamJob& job, const RoleInstance& in) {
  spec::Resources r = in.resources;
  if (job.placement.numa_pinning) {
    if (r.cpu.empty()) r.cpu = in.role == Role::kTrainer ? std::to_string(in.threads) : "1";
    if (r.memory.empty())
      r.memory = in.role == Role::kController ? "512Mi" : in.role == Role::kTrainer ? "2Gi" : "4Gi";
  }
  Json req = Json::object();
  if (!r.cpu.empty()) req["cpu"] = r.cpu;
  if (!r.memory.empty()) req["memory"] = r.memory;
  Json out = Json::object();
  if (!req.empty()) out["requests"] = req;
  if (job.placement.numa_pinning && !req.empty()) out["limits"] = req;
  return out;
}

Json ContainerPorts(const RoleInstance& in) {
  Json ports = Json::array();
  // Split trainers listen too: the model exchange between a replica's workers.
  if (in.role != Role::kTrainer || !in.host.empty())
    ports.push_back({{"name", "grpc"}, {"containerPort", kGrpcPort}});
  if (in.role == Role::kParamServer)
    ports.push_back({{"name", "replication"}, {"containerPort", kReplicationPort}});
  ports.push_back({{"name", "metrics"}, {"containerPort", kMetricsPort}});
  return ports;
}

// Anti-affinity among a role's pods on `key`: required where copies must not share a machine
// (controller members; parameter servers holding copies of one shard), preferred otherwise.
Json AntiAffinity(const spec::AdamJob& job, const std::string& role, bool required) {
  const Json term = {{"labelSelector", Selector(job, role)},
                     {"topologyKey", job.placement.replica_topology_key}};
  if (required)
    return {{"podAntiAffinity", {{"requiredDuringSchedulingIgnoredDuringExecution", {term}}}}};
  return {{"podAntiAffinity",
           {{"preferredDuringSchedulingIgnoredDuringExecution",
             {{{"weight", 100}, {"podAffinityTerm", term}}}}}}};
}

Json Spread(const spec::AdamJob& job, const std::string& role) {
  return Json::array({{{"maxSkew", 1},
                       {"topologyKey", job.placement.spread_topology_key},
                       {"whenUnsatisfiable", "ScheduleAnyway"},
                       {"labelSelector", Selector(job, role)}}});
}

// The job's certificates Secret as a pod of `role` mounts it: the CA and that role's own
// certificate and key, as ca.crt, tls.crt and tls.key (net/tls.h); no other role's key.
Json TlsVolume(const spec::AdamJob& job, Role role) {
  const std::string r = spec::RoleSubcommand(role);
  return {{"name", "tls"},
          {"secret",
           {{"secretName", CertificatesSecretName(job)},
            {"defaultMode", 0440},
            {"items",
             {{{"key", "ca.crt"}, {"path", "ca.crt"}},
              {{"key", r + ".crt"}, {"path", "tls.crt"}},
              {{"key", r + ".key"}, {"path", "tls.key"}}}}}}};
}

// The pod spec every role shares: the image, the manifest, the downward-API files, non-root.
Json PodSpec(const spec::AdamJob& job, const RoleInstance& in, std::vector<std::string> args,
             bool state_volume) {
  const std::string role = spec::RoleSubcommand(in.role);
  Json mounts = Json::array({{{"name", "job"}, {"mountPath", kJobMountPath}, {"readOnly", true}},
                             {{"name", "tls"}, {"mountPath", kTlsPath}, {"readOnly", true}},
                             {{"name", "podinfo"}, {"mountPath", kPodInfoPath}, {"readOnly", true}},
                             {{"name", "tmp"}, {"mountPath", "/tmp"}}});
  if (state_volume) mounts.push_back({{"name", "state"}, {"mountPath", kStatePath}});
  Json container = {
      {"name", role},
      {"image", job.image},
      {"command", {"adam"}},
      {"args", args},
      {"env",
       {{{"name", "ADAM_NODE_NAME"},
         {"valueFrom", {{"fieldRef", {{"fieldPath", "spec.nodeName"}}}}}},
        {{"name", "ADAM_POD_NAME"},
         {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}},
        // The container's CPU limit in millicores: a role pins its threads only when its
        // allowed cpuset is exactly this many whole CPUs (its own, from the static CPU manager).
        {{"name", "ADAM_CPU_LIMIT_MILLIS"},
         {"valueFrom",
          {{"resourceFieldRef",
            {{"containerName", role}, {"resource", "limits.cpu"}, {"divisor", "1m"}}}}}}}},
      {"ports", ContainerPorts(in)},
      {"resources", ResourcesOf(job, in)},
      // A failed container's last log lines become its termination message, which the operator
      // quotes in the job's Failed condition (a divergence's loss and learning rate, a refused
      // input's field).
      {"terminationMessagePolicy", "FallbackToLogsOnError"},
      {"volumeMounts", mounts},
      {"securityContext",
       {{"runAsNonRoot", true},
        {"allowPrivilegeEscalation", false},
        {"readOnlyRootFilesystem", true},
        {"capabilities", {{"drop", {"ALL"}}}}}}};
  if (in.role != Role::kTrainer)
    container["readinessProbe"] = {
        {"tcpSocket", {{"port", "grpc"}}}, {"periodSeconds", 2}, {"failureThreshold", 3}};
  Json volumes = Json::array(
      {{{"name", "job"}, {"configMap", {{"name", job.name + "-job"}}}},
       TlsVolume(job, in.role),
       {{"name", "podinfo"},
        {"downwardAPI",
         {{"items",
           {{{"path", "annotations"}, {"fieldRef", {{"fieldPath", "metadata.annotations"}}}},
            {{"path", "labels"}, {"fieldRef", {{"fieldPath", "metadata.labels"}}}}}}}}},
       {{"name", "tmp"}, {"emptyDir", Json::object()}}});
  Json pod = {{"containers", {container}},
              {"volumes", volumes},
              {"enableServiceLinks", false},
              // No role calls the Kubernetes API: no token for anyone who gets into a pod.
              {"automountServiceAccountToken", false},
              {"securityContext",
               {{"runAsNonRoot", true},
                {"runAsUser", 10001},
                {"runAsGroup", 10001},
                {"fsGroup", 10001},
                {"seccompProfile", {{"type", "RuntimeDefault"}}}}}};
  return pod;
}

// Mounts a manifest's volume (spec/adamjob.h VolumeSpec) into the pod's container as `name`.
void AddVolume(Json* pod, const std::string& name, const spec::VolumeSpec& v, bool read_only) {
  Json volume = Json::parse(v.source);
  volume["name"] = name;
  (*pod)["volumes"].push_back(volume);
  Json mount = {{"name", name}, {"mountPath", v.mount_path}};
  if (read_only) mount["readOnly"] = true;
  (*pod)["containers"][0]["volumeMounts"].push_back(mount);
}

std::vector<std::string> ArgsOf(const spec::AdamJob& job, const RoleInstance& in,
                                const spec::Endpoints& endpoints, const RenderOptions& o) {
  const std::string job_path = std::string(kJobMountPath) + "/job.yaml";
  // One template for every member of the controllers' StatefulSet: each finds its id in its host
  // name and its name in the pod's.
  spec::RoleIdentity identity;
  if (in.role == Role::kController) identity = {"hostname", "$(ADAM_POD_NAME)"};
  spec::RoleOptions options = spec::OptionsFor(in, job_path, endpoints, identity);
  spec::Common(options).tls_dir = kTlsPath;  // mutual TLS between the job's pods
  if (auto* c = std::get_if<spec::ControllerOptions>(&options)) {
    c->state_dir = std::string(kStatePath) + "/raft";
    // The Raft volume belongs to this job: one of a predecessor with the same name is refused.
    c->cluster_id = o.owner_uid;
  }
  if (auto* p = std::get_if<spec::ParamServerOptions>(&options)) {
    p->state_dir = std::string(kStatePath) + "/checkpoints";
    if (!job.networks.replication.empty()) p->replication_network = job.networks.replication;
    p->no_bind = !job.placement.numa_pinning;
  }
  if (auto* t = std::get_if<spec::TrainerOptions>(&options)) {
    t->metrics_host = "0.0.0.0";
    if (in.index == 0 && in.model_worker == 0 && !job.output.volume.source.empty())
      t->model_out = ModelPath(job);
    t->no_bind = !job.placement.numa_pinning;
  }
  return spec::ToArgs(options);
}

// Where each role finds the others: the data server, the parameter servers and the controller
// group (when the job has one), by the names of their pods.
spec::Endpoints EndpointsOf(const spec::Plan& plan, bool has_controllers) {
  spec::Endpoints endpoints;
  if (has_controllers) endpoints.controller_members = spec::ControllerMembersOf(plan);
  endpoints.model_workers = spec::ModelWorkerAddresses(plan);
  for (const auto& in : plan.instances) {
    const std::string addr = in.host + ":" + std::to_string(in.port);
    if (in.role == Role::kDataServer) endpoints.data_servers.push_back(addr);
    if (in.role == Role::kParamServer) endpoints.param_servers.push_back(addr);
  }
  return endpoints;
}

// The objects of the whole job: the manifest every role reads (a ConfigMap), the headless Service
// that names every pod, and the NetworkPolicy that keeps its ports to its own pods.
void AddJobObjects(const spec::AdamJob& job, const RenderOptions& o, std::vector<Json>* out) {
  Json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", Metadata(job, job.name + "-job", "job", 0, o)},
             {"data", {{"job.yaml", o.manifest}}}};
  out->push_back(cm);
  Json svc = {
      {"apiVersion", "v1"},
      {"kind", "Service"},
      {"metadata", Metadata(job, job.name, "job", 0, o)},
      {"spec",
       {{"clusterIP", "None"},
        // Peers must find each other before they are ready (Raft members, copies).
        {"publishNotReadyAddresses", true},
        {"selector", {{kJobLabel, job.name}}},
        {"ports",
         {{{"name", "grpc"}, {"port", kGrpcPort}, {"targetPort", "grpc"}},
          {{"name", "replication"}, {"port", kReplicationPort}, {"targetPort", "replication"}},
          {{"name", "metrics"}, {"port", kMetricsPort}, {"targetPort", "metrics"}}}}}}};
  out->push_back(svc);
  // Only the job's own pods reach its gRPC and replication ports; /metrics stays open to
  // scrapers (Prometheus, the operator's status reads). Egress is not restricted.
  Json np = {{"apiVersion", "networking.k8s.io/v1"},
             {"kind", "NetworkPolicy"},
             {"metadata", Metadata(job, job.name, "job", 0, o)},
             {"spec",
              {{"podSelector", {{"matchLabels", {{kJobLabel, job.name}}}}},
               {"policyTypes", {"Ingress"}},
               {"ingress",
                {{{"from", {{{"podSelector", {{"matchLabels", {{kJobLabel, job.name}}}}}}}},
                  {"ports",
                   {{{"protocol", "TCP"}, {"port", kGrpcPort}},
                    {{"protocol", "TCP"}, {"port", kReplicationPort}}}}},
                 {{"ports", {{{"protocol", "TCP"}, {"port", kMetricsPort}}}}}}}}}};
  out->push_back(np);
}

// What voluntary disruptions (a drain, an eviction through the API) may take of a job whose shards
// have copies: controller members down to a Raft quorum, and parameter servers down to a quorum of
// every shard's copies (a push is acknowledged once a quorum holds it; any copies - quorum servers
// leave each shard that many), at least one, so that a drain is never refused for good. A job of
// one copy has no budget: its servers resume from their checkpoints.
void AddDisruptionBudgets(const spec::AdamJob& job, const RenderOptions& o,
                          std::vector<Json>* out) {
  if (!spec::ControllerOwnsShards(job)) return;
  const int copies = job.roles.parameter_server.copies;
  auto budget = [&](const std::string& role, const char* key, int value) {
    return Json{{"apiVersion", "policy/v1"},
                {"kind", "PodDisruptionBudget"},
                {"metadata", Metadata(job, job.name + "-" + role, role, 0, o)},
                {"spec", {{"selector", Selector(job, role)}, {key, value}}}};
  };
  const int members = job.roles.controller.replicas;
  if (members >= 3)
    out->push_back(
        budget(spec::RoleSubcommand(Role::kController), "minAvailable", members / 2 + 1));
  out->push_back(budget(spec::RoleSubcommand(Role::kParamServer), "maxUnavailable",
                        std::max(1, copies - (copies / 2 + 1))));
}

// The job-wide podTemplate with the role's merged over it (spec/pod_template.h); an empty object
// when neither is given.
Json TemplateOf(const spec::AdamJob& job, Role role) {
  const std::string* own = nullptr;
  switch (role) {
    case Role::kController:
      own = &job.roles.controller.pod_template;
      break;
    case Role::kParamServer:
      own = &job.roles.parameter_server.pod_template;
      break;
    case Role::kDataServer:
      own = &job.roles.data_server.pod_template;
      break;
    case Role::kTrainer:
      own = &job.roles.trainer.pod_template;
      break;
  }
  auto parse = [](const std::string& t) {
    return t.empty() ? nlohmann::json::object() : nlohmann::json::parse(t);
  };
  return Json::parse(spec::MergePodTemplates(parse(job.pod_template), parse(*own)).dump());
}

// Adds `key`'s entries of `from` that `to` lacks (Adam's own entries win).
void AddEntries(const Json& from, const char* key, Json* to) {
  if (!from.contains(key)) return;
  for (const auto& [k, v] : from[key].items())
    if (!(*to)[key].contains(k)) (*to)[key][k] = v;
}

// A podTemplate's settings added to a pod's metadata and spec. Validation refused every
// conflict with Adam's own settings; where one slipped through, Adam's wins. The user's
// podAntiAffinity terms join Adam's (copies apart, spread), never replace them.
void ApplyTemplate(const Json& t, Json* md, Json* pod) {
  if (t.empty()) return;
  AddEntries(t, "labels", md);
  AddEntries(t, "annotations", md);
  for (const char* key : {"nodeSelector", "tolerations", "priorityClassName", "schedulerName",
                          "serviceAccountName", "imagePullSecrets"})
    if (t.contains(key)) (*pod)[key] = t[key];
  if (t.contains("affinity")) {
    Json& a = (*pod)["affinity"];
    for (const auto& [kind, terms] : t["affinity"].items()) {
      if (kind != "podAntiAffinity" || !a.contains(kind)) {
        a[kind] = terms;
        continue;
      }
      for (const auto& [when, list] : terms.items())
        for (const Json& term : list) a[kind][when].push_back(term);
    }
  }
  Json& container = (*pod)["containers"][0];
  for (const char* key : {"env", "volumeMounts"})
    if (t.contains(key))
      for (const Json& e : t[key]) container[key].push_back(e);
  if (t.contains("volumes"))
    for (const Json& v : t["volumes"]) (*pod)["volumes"].push_back(v);
  if (t.contains("securityContext")) {
    for (const auto& [k, v] : t["securityContext"].items()) (*pod)["securityContext"][k] = v;
    (*pod)["securityContext"]["runAsNonRoot"] = true;
  }
}

// The controller group: one StatefulSet (stable names and Raft volumes), rendered from its first
// member's instance.
Json ControllerSet(const spec::AdamJob& job, const RoleInstance& first,
                   const spec::Endpoints& endpoints, const RenderOptions& o) {
  const std::string role = spec::RoleSubcommand(Role::kController);
  const std::string name = job.name + "-" + role;
  Json md = Metadata(job, name, role, 0, o);
  Json pod = PodSpec(job, first, ArgsOf(job, first, endpoints, o), true);
  pod["affinity"] = AntiAffinity(job, role, true);
  pod["topologySpreadConstraints"] = Spread(job, role);
  Json tmd = {{"labels", Labels(job, role)}, {"annotations", {{kStageAnnotation, "0"}}}};
  ApplyTemplate(TemplateOf(job, Role::kController), &tmd, &pod);
  if (job.run_policy.scheduling.coscheduling) tmd["labels"][kPodGroupLabel] = job.name;
  if (job.run_policy.scheduling.gang) pod["schedulingGroup"] = {{"podGroupName", job.name}};
  return {{"apiVersion", "apps/v1"},
          {"kind", "StatefulSet"},
          {"metadata", md},
          {"spec",
           {{"serviceName", job.name},
            {"replicas", job.roles.controller.replicas},
            {"podManagementPolicy", "Parallel"},
            // A changed template (the spec's, or another client's change put back) reaches a
            // controller when its pod is made again, as every other role's pods: the operator
            // never rolls the Raft group.
            {"updateStrategy", {{"type", "OnDelete"}}},
            // The Raft volumes go with the job (a new job of the same name starts empty).
            {"persistentVolumeClaimRetentionPolicy",
             {{"whenDeleted", "Delete"}, {"whenScaled", "Retain"}}},
            {"selector", Selector(job, role)},
            {"template", {{"metadata", tmd}, {"spec", pod}}},
            {"volumeClaimTemplates",
             {{{"metadata", {{"name", "state"}}},
               {"spec",
                {{"accessModes", {"ReadWriteOnce"}},
                 {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}}}}}}};
}

// The coscheduling plugin's gang: every pod of the job, placed all together or not at all.
Json PodGroup(const spec::AdamJob& job, const RenderOptions& o) {
  return {{"apiVersion", "scheduling.x-k8s.io/v1alpha1"},
          {"kind", "PodGroup"},
          {"metadata", Metadata(job, job.name, "job", 0, o)},
          {"spec",
           {{"minMember", PodCount(job)},
            {"scheduleTimeoutSeconds", job.run_policy.scheduling.schedule_timeout_seconds}}}};
}

// Kubernetes' own gang (scheduling.k8s.io/v1alpha2): every pod of the job names it in its
// spec.schedulingGroup, and the scheduler binds none until minCount of them can all be placed.
Json GangPodGroup(const spec::AdamJob& job, const RenderOptions& o) {
  return {{"apiVersion", kGangApiVersion},
          {"kind", "PodGroup"},
          {"metadata", Metadata(job, job.name, "job", 0, o)},
          {"spec", {{"schedulingPolicy", {{"gang", {{"minCount", PodCount(job)}}}}}}}};
}

// A parameter server's checkpoint volume. It outlives the pod (a recreated server restores from
// it) and is not owned by the job: checkpoints outlive it, and a job of the same name resumes
// from them.
Json StateClaim(const spec::AdamJob& job, const RoleInstance& in, const std::string& name,
                int stage, const RenderOptions& o) {
  Json pvc = {{"apiVersion", "v1"},
              {"kind", "PersistentVolumeClaim"},
              {"metadata", Metadata(job, name + "-state", spec::RoleSubcommand(in.role), stage, o)},
              {"spec",
               {{"accessModes", {"ReadWriteOnce"}},
                {"resources",
                 {{"requests", {{"storage", job.roles.parameter_server.persistence.size}}}}}}}};
  pvc["metadata"]["labels"][kIndexLabel] = std::to_string(in.index);
  pvc["metadata"].erase("ownerReferences");
  return pvc;
}

// A model worker's pod goes where its trainer's is: the same domain of
// spec.placement.modelWorkerTopologyKey (required: the exchange is per image).
Json WithItsTrainer(const spec::AdamJob& job, const RoleInstance& in) {
  const Json term = {{"labelSelector",
                      {{"matchLabels",
                        {{kJobLabel, job.name},
                         {kRoleLabel, spec::RoleSubcommand(Role::kTrainer)},
                         {kIndexLabel, std::to_string(in.index)}}}}},
                     {"topologyKey", job.placement.model_worker_topology_key}};
  return {{"podAffinity", {{"requiredDuringSchedulingIgnoredDuringExecution", {term}}}}};
}

// The pod of one data-server, parameter-server, trainer or model-worker instance. A model worker
// (a split trainer's other processes) has a role label of its own, so that it counts as none of
// the job's trainers.
Json RolePod(const spec::AdamJob& job, const RoleInstance& in, const spec::Endpoints& endpoints,
             bool has_controllers, const RenderOptions& o) {
  const bool model_worker = in.role == Role::kTrainer && in.model_worker > 0;
  const std::string role = model_worker ? kModelWorkerRole : spec::RoleSubcommand(in.role);
  const std::string name = job.name + "-" + in.name;
  const bool ps = in.role == Role::kParamServer;
  Json md = Metadata(job, name, role, KubeStage(job, in.role, has_controllers), o);
  md["labels"][kIndexLabel] = std::to_string(in.index);
  if (ps && !job.networks.replication.empty())
    md["annotations"][kMultusAnnotation] = job.networks.replication;
  Json pod = PodSpec(job, in, ArgsOf(job, in, endpoints, o), ps);
  pod["hostname"] = name;
  pod["subdomain"] = job.name;
  // The operator restarts failed pods itself, counting them against runPolicy.backoffLimit.
  pod["restartPolicy"] = "Never";
  if (ps) {
    pod["affinity"] = AntiAffinity(job, role, has_controllers);
    pod["topologySpreadConstraints"] = Spread(job, role);
    pod["terminationGracePeriodSeconds"] = 60;  // the last checkpoint flush
    pod["volumes"].push_back(
        {{"name", "state"}, {"persistentVolumeClaim", {{"claimName", name + "-state"}}}});
  } else if (model_worker) {
    pod["affinity"] = WithItsTrainer(job, in);
  } else if (in.role == Role::kTrainer) {
    pod["topologySpreadConstraints"] = Spread(job, role);
  } else if (job.roles.data_server.replicas > 1) {
    // Data-server replicas are there to outlive a machine: apart where the cluster allows.
    pod["affinity"] = AntiAffinity(job, role, false);
    pod["topologySpreadConstraints"] = Spread(job, role);
  }
  // The user's volumes: the data set read-only in the data server only, the output volume
  // writable in trainer 0 only (the one that writes the model).
  if (in.role == Role::kDataServer && !job.dataset.volume.source.empty())
    AddVolume(&pod, "dataset", job.dataset.volume, true);
  if (in.role == Role::kTrainer && in.index == 0 && !model_worker &&
      !job.output.volume.source.empty())
    AddVolume(&pod, "output", job.output.volume, false);
  ApplyTemplate(TemplateOf(job, in.role), &md, &pod);
  if (job.run_policy.scheduling.coscheduling) md["labels"][kPodGroupLabel] = job.name;
  if (job.run_policy.scheduling.gang) pod["schedulingGroup"] = {{"podGroupName", job.name}};
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", md}, {"spec", pod}};
}

}  // namespace

std::vector<Json> Render(const spec::AdamJob& job, const RenderOptions& o) {
  spec::PlanOptions po;
  po.local = false;
  po.grpc_port = kGrpcPort;
  po.metrics_port = kMetricsPort;
  po.replication_port = kReplicationPort;
  const spec::Plan plan = spec::MakePlan(job, po);
  const bool has_controllers = spec::ControllerOwnsShards(job);
  const spec::Endpoints endpoints = EndpointsOf(plan, has_controllers);

  std::vector<Json> out;
  AddJobObjects(job, o, &out);
  AddDisruptionBudgets(job, o, &out);
  if (job.run_policy.scheduling.coscheduling) out.push_back(PodGroup(job, o));
  if (job.run_policy.scheduling.gang) out.push_back(GangPodGroup(job, o));
  if (has_controllers) {
    const auto first =
        std::find_if(plan.instances.begin(), plan.instances.end(),
                     [](const RoleInstance& in) { return in.role == Role::kController; });
    out.push_back(ControllerSet(job, *first, endpoints, o));
  }
  for (const auto& in : plan.instances) {
    if (in.role == Role::kController) continue;
    if (in.role == Role::kParamServer) {
      out.push_back(StateClaim(job, in, job.name + "-" + in.name,
                               KubeStage(job, in.role, has_controllers), o));
    }
    out.push_back(RolePod(job, in, endpoints, has_controllers, o));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Json& a, const Json& b) { return StageOf(a) < StageOf(b); });
  return out;
}

std::string ModelPath(const spec::AdamJob& job) {
  return job.output.volume.mount_path + "/" + job.name + ".onnx";
}

std::string CertificatesSecretName(const spec::AdamJob& job) { return job.name + "-certs"; }
std::string CaSecretName(const spec::AdamJob& job) { return job.name + "-ca"; }

int PodCount(const spec::AdamJob& job) {
  const auto& r = job.roles;
  return (spec::ControllerOwnsShards(job) ? r.controller.replicas : 0) +
         r.parameter_server.replicas + r.data_server.replicas +
         r.trainer.replicas * r.trainer.model_workers;
}

int StageOf(const Json& object) {
  const auto& md = object.value("metadata", Json::object());
  const auto& ann = md.value("annotations", Json::object());
  const std::string s = ann.value(kStageAnnotation, "0");
  return std::atoi(s.c_str());
}

namespace {

// Would YAML read this plain scalar as something other than a string?
bool NeedsQuotes(const std::string& s) {
  static const std::regex other(
      "^([-+]?[0-9][0-9_]*(\\.[0-9_]*)?([eE][-+]?[0-9]+)?|[-+]?\\.[0-9]+([eE][-+]?[0-9]+)?|"
      "0x[0-9a-fA-F]+|0o[0-7]+|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)|"
      "y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|"
      "null|Null|NULL|~|)$");
  return std::regex_match(s, other);
}

void Emit(YAML::Emitter& e, const Json& v) {
  switch (v.type()) {
    case Json::value_t::object:
      if (v.empty()) {
        e << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        return;
      }
      e << YAML::BeginMap;
      for (auto it = v.begin(); it != v.end(); ++it) {
        e << YAML::Key;
        if (NeedsQuotes(it.key())) e << YAML::DoubleQuoted;
        e << it.key() << YAML::Value;
        Emit(e, it.value());
      }
      e << YAML::EndMap;
      return;
    case Json::value_t::array:
      if (v.empty()) {
        e << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        return;
      }
      e << YAML::BeginSeq;
      for (const auto& x : v) Emit(e, x);
      e << YAML::EndSeq;
      return;
    case Json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();
      if (s.find('\n') != std::string::npos) {
        e << YAML::Literal << s;
      } else {
        if (NeedsQuotes(s)) e << YAML::DoubleQuoted;
        e << s;
      }
      return;
    }
    case Json::value_t::boolean:
      e << (v.get<bool>() ? "true" : "false");
      return;
    case Json::value_t::number_integer:
      e << v.get<int64_t>();
      return;
    case Json::value_t::number_unsigned:
      e << v.get<uint64_t>();
      return;
    case Json::value_t::number_float:
      e << v.get<double>();
      return;
    default:
      e << YAML::Null;
      return;
  }
}

}  // namespace

std::string ToYaml(const Json& value) {
  YAML::Emitter e;
  e.SetIndent(2);
  Emit(e, value);
  return std::string(e.c_str()) + "\n";
}

std::string ToYaml(const std::vector<Json>& objects) {
  std::string out;
  for (const auto& o : objects) out += "---\n" + ToYaml(o);
  return out;
}

}  // namespace adam::op
