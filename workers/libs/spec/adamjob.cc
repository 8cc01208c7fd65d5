// YAML -> AdamJob, with defaults and every validation rule of the manifest.
#include "spec/adamjob.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <regex>
#include <set>

#include "core/file.h"
#include "spec/manifest_reader.h"
#include "spec/pod_template.h"
#include "spec/yaml_json.h"

namespace adam::spec {

int64_t ParseDurationMs(const std::string& s) {
  static const std::regex re("^([0-9]+)(ms|s|m|h)$");
  std::smatch m;
  if (!std::regex_match(s, m, re)) return -1;
  int64_t v = std::stoll(m[1]);
  std::string unit = m[2];
  if (unit == "ms") return v;
  if (unit == "s") return v * 1000;
  if (unit == "m") return v * 60000;
  return v * 3600000;
}

using manifest::Reader;

namespace {

using manifest::CheckShapes;
using manifest::JsonText;
using manifest::ReadDataset;
using manifest::ReadModel;
using manifest::ReadOutput;
using manifest::ReadTraining;

bool IsDnsLabel(const std::string& s) {
  static const std::regex re("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
  return s.size() <= 63 && std::regex_match(s, re);
}

bool IsQuantity(const std::string& s) {
  static const std::regex re("^[0-9]+(\\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$");
  return std::regex_match(s, re);
}

void ReadResources(Reader& r, const YAML::Node& n, const std::string& path, Resources* out) {
  if (!r.Map(n, path, {"cpu", "memory"})) return;
  if (!n) return;
  if (r.Get(n, "cpu", path, &out->cpu) && !IsQuantity(out->cpu))
    r.Error(path + ".cpu", "must be a Kubernetes quantity like 4 or 500m, got '" + out->cpu + "'");
  if (r.Get(n, "memory", path, &out->memory) && !IsQuantity(out->memory))
    r.Error(path + ".memory", "must be a Kubernetes quantity like 8Gi, got '" + out->memory + "'");
}

// A failure rule's onExitCodes (`codes`, at `cp`): an operator and 1 to 255 distinct exit codes.
void ReadExitCodes(Reader& r, const YAML::Node& codes, const std::string& cp, FailureRule* rule) {
  rule->on_exit_codes = true;
  if (std::string op; r.Get(codes, "operator", cp, &op, true)) {
    if (op != "In" && op != "NotIn")
      r.Error(cp + ".operator", "must be one of In, NotIn; got '" + op + "'");
    rule->exit_codes_in = op == "In";
  }
  const YAML::Node v = codes["values"];
  if (!v || !v.IsSequence() || v.size() == 0 || v.size() > 255) {
    r.Error(cp + ".values", "required: a list of 1 to 255 exit codes");
    return;
  }
  std::set<int> seen;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string vp = cp + ".values[" + std::to_string(i) + "]";
    int code = -1;
    try {
      code = v[i].as<int>();
    } catch (const YAML::Exception&) {
      r.Error(vp, "must be an integer");
      continue;
    }
    if (code < 1 || code > 255)
      r.Error(vp,
              "must be in 1..255 (a failed container's exit code), got " + std::to_string(code));
    else if (!seen.insert(code).second)
      r.Error(vp, std::to_string(code) + " is given twice");
    else
      rule->exit_codes.push_back(code);
  }
}

// A failure rule's onPodConditions (`conds`, at `cp`): 1 to 20 {type, status}.
void ReadPodConditions(Reader& r, const YAML::Node& conds, const std::string& cp,
                       FailureRule* rule) {
  if (!conds.IsSequence() || conds.size() == 0 || conds.size() > 20) {
    r.Error(cp, "must be a list of 1 to 20 pod conditions ({type, status})");
    return;
  }
  for (size_t i = 0; i < conds.size(); ++i) {
    const std::string ip = cp + "[" + std::to_string(i) + "]";
    if (!r.Map(conds[i], ip, {"type", "status"})) continue;
    std::string type, status = "True";
    r.Get(conds[i], "type", ip, &type, true);
    if (r.Get(conds[i], "status", ip, &status) && status != "True" && status != "False" &&
        status != "Unknown")
      r.Error(ip + ".status", "must be one of True, False, Unknown; got '" + status + "'");
    if (!type.empty()) rule->pod_conditions.emplace_back(type, status);
  }
}

// n.failureRules: a list of rules, each an action and exactly one of onExitCodes and
// onPodConditions.
void ReadFailureRule(Reader& r, const YAML::Node& n, const std::string& at, FailureRule* rule) {
  if (!r.Map(n, at, {"action", "onExitCodes", "onPodConditions"})) return;
  if (std::string a; r.Get(n, "action", at, &a, true)) {
    if (a == "Restart") {
      rule->action = FailureRule::Action::kRestart;
    } else if (a == "Ignore") {
      rule->action = FailureRule::Action::kIgnore;
    } else if (a == "FailJob") {
      rule->action = FailureRule::Action::kFailJob;
    } else {
      r.Error(at + ".action", "must be one of Restart, Ignore, FailJob; got '" + a + "'");
    }
  }
  const YAML::Node codes = n["onExitCodes"];
  const YAML::Node conds = n["onPodConditions"];
  if (bool(codes) == bool(conds)) {
    r.Error(at, "give exactly one of onExitCodes and onPodConditions");
    return;
  }
  if (codes && r.Map(codes, at + ".onExitCodes", {"operator", "values"}))
    ReadExitCodes(r, codes, at + ".onExitCodes", rule);
  if (conds) ReadPodConditions(r, conds, at + ".onPodConditions", rule);
}

void ReadFailureRules(Reader& r, const YAML::Node& role, const std::string& path,
                      std::vector<FailureRule>* out) {
  const YAML::Node n = role["failureRules"];
  if (!n || n.IsNull()) return;
  const std::string p = path + ".failureRules";
  if (!n.IsSequence() || n.size() > 20) {
    r.Error(p, "must be a list of at most 20 rules");
    return;
  }
  for (size_t i = 0; i < n.size(); ++i) {
    FailureRule rule;
    ReadFailureRule(r, n[i], p + "[" + std::to_string(i) + "]", &rule);
    out->push_back(rule);
  }
}

// n.podTemplate as JSON text, checked later (CheckPodTemplates) against the whole spec.
void ReadPodTemplate(const YAML::Node& n, std::string* out) {
  if (const YAML::Node t = n["podTemplate"]; t && !t.IsNull()) *out = JsonText(t);
}

// Every podTemplate: its shape, and nothing of Adam's own overridden (spec/pod_template.h).
void CheckPodTemplates(Reader& r, const AdamJob& job) {
  PodTemplateContext all;
  all.parameter_servers = true;
  all.replication_network = job.networks.replication;
  if (!job.dataset.volume.source.empty()) all.mount_paths.push_back(job.dataset.volume.mount_path);
  if (!job.output.volume.source.empty()) all.mount_paths.push_back(job.output.volume.mount_path);
  const nlohmann::json job_wide =
      job.pod_template.empty() ? nlohmann::json() : nlohmann::json::parse(job.pod_template);
  if (!job.pod_template.empty())
    for (const auto& e : CheckPodTemplate(job_wide, "spec.podTemplate", all)) r.Add(e);
  const std::pair<const char*, const std::string*> roles[] = {
      {"controller", &job.roles.controller.pod_template},
      {"parameterServer", &job.roles.parameter_server.pod_template},
      {"dataServer", &job.roles.data_server.pod_template},
      {"trainer", &job.roles.trainer.pod_template}};
  for (const auto& [role, text] : roles) {
    if (text->empty()) continue;
    PodTemplateContext c = all;
    c.parameter_servers = std::string(role) == "parameterServer";
    c.inherited_volumes = VolumeNames(job_wide);
    for (const auto& e : CheckPodTemplate(nlohmann::json::parse(*text),
                                          std::string("spec.roles.") + role + ".podTemplate", c))
      r.Add(e);
  }
}

// spec.roles.parameterServer (`s`, at `sp`).
void ReadParamServerRole(Reader& r, const YAML::Node& s, const std::string& sp,
                         ParameterServerRole* ps) {
  r.Int(s, "replicas", sp, 1, 1024, &ps->replicas);
  if (r.Int(s, "shardBytes", sp, 4, int64_t{1} << 30, &ps->shard_bytes) && ps->shard_bytes % 4 != 0)
    r.Error(sp + ".shardBytes",
            "must be a multiple of 4 (whole floats), got " + std::to_string(ps->shard_bytes));
  r.Int(s, "copies", sp, 1, 5, &ps->copies);
  if (std::string a; r.Get(s, "acknowledge", sp, &a)) {
    if (a == "quorum") {
      ps->acknowledge = Acknowledge::kQuorum;
    } else if (a == "applied") {
      ps->acknowledge = Acknowledge::kApplied;
    } else {
      r.Error(sp + ".acknowledge", "must be one of quorum, applied; got '" + a + "'");
    }
  }
  ReadResources(r, s["resources"], sp + ".resources", &ps->resources);
  ReadPodTemplate(s, &ps->pod_template);
  ReadFailureRules(r, s, sp, &ps->failure_rules);
  const YAML::Node per = s["persistence"];
  if (!r.Map(per, sp + ".persistence", {"interval", "size"}) || !per) return;
  std::string iv;
  if (r.Get(per, "interval", sp + ".persistence", &iv)) {
    ps->persistence.interval_ms = ParseDurationMs(iv);
    if (ps->persistence.interval_ms <= 0)
      r.Error(sp + ".persistence.interval",
              "must be a positive duration like 30s or 500ms, got '" + iv + "'");
  }
  if (r.Get(per, "size", sp + ".persistence", &ps->persistence.size) &&
      !IsQuantity(ps->persistence.size))
    r.Error(sp + ".persistence.size",
            "must be a Kubernetes quantity like 10Gi, got '" + ps->persistence.size + "'");
}

void ReadRoles(Reader& r, const YAML::Node& n, Roles* roles) {
  const std::string p = "spec.roles";
  if (!r.Map(n, p, {"controller", "parameterServer", "dataServer", "trainer"}) || !n) return;
  if (const YAML::Node c = n["controller"];
      r.Map(c, p + ".controller", {"replicas", "resources", "podTemplate"}) && c) {
    const std::string cp = p + ".controller";
    if (r.Int(c, "replicas", cp, 1, 7, &roles->controller.replicas) &&
        roles->controller.replicas % 2 == 0)
      r.Error(cp + ".replicas",
              "must be odd (1, 3, 5 or 7), got " + std::to_string(roles->controller.replicas));
    ReadResources(r, c["resources"], cp + ".resources", &roles->controller.resources);
    ReadPodTemplate(c, &roles->controller.pod_template);
  }
  if (const YAML::Node s = n["parameterServer"];
      r.Map(s, p + ".parameterServer",
            {"replicas", "shardBytes", "copies", "acknowledge", "resources", "persistence",
             "podTemplate", "failureRules"}) &&
      s)
    ReadParamServerRole(r, s, p + ".parameterServer", &roles->parameter_server);
  if (const YAML::Node d = n["dataServer"];
      r.Map(d, p + ".dataServer", {"replicas", "resources", "podTemplate", "failureRules"}) && d) {
    const std::string dp = p + ".dataServer";
    // Replicas of the whole data set, each serving the same seeded batches: a trainer moves to
    // another when the one it uses is lost.
    r.Int(d, "replicas", dp, 1, 16, &roles->data_server.replicas);
    ReadResources(r, d["resources"], dp + ".resources", &roles->data_server.resources);
    ReadPodTemplate(d, &roles->data_server.pod_template);
    ReadFailureRules(r, d, dp, &roles->data_server.failure_rules);
  }
  if (const YAML::Node t = n["trainer"];
      r.Map(t, p + ".trainer",
            {"replicas", "threads", "modelWorkers", "resources", "podTemplate", "failureRules"}) &&
      t) {
    const std::string tp = p + ".trainer";
    r.Int(t, "replicas", tp, 1, 4096, &roles->trainer.replicas);
    r.Int(t, "threads", tp, 1, 1024, &roles->trainer.threads);
    r.Int(t, "modelWorkers", tp, 1, 64, &roles->trainer.model_workers);
    ReadResources(r, t["resources"], tp + ".resources", &roles->trainer.resources);
    ReadPodTemplate(t, &roles->trainer.pod_template);
    ReadFailureRules(r, t, tp, &roles->trainer.failure_rules);
  }
}

// A domain-prefixed path of at most 63 characters, as Job's managedBy: "example.com/name".
void CheckManager(Reader& r, const std::string& field, const std::string& v) {
  static const std::regex managed_re(
      "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$");
  if (v.size() > 63 || !std::regex_match(v, managed_re))
    r.Error(field,
            "must be a domain-prefixed path of at most 63 characters like adam.dev/operator, "
            "got '" +
                v + "'");
}

// spec.runPolicy.schedulingPolicy (`sp`, at `spp`).
void ReadSchedulingPolicy(Reader& r, const YAML::Node& sp, const std::string& spp,
                          SchedulingPolicy* pol) {
  if (!r.Map(sp, spp, {"coscheduling", "gang", "scheduleTimeoutSeconds"}) || !sp) return;
  r.Get(sp, "coscheduling", spp, &pol->coscheduling);
  r.Get(sp, "gang", spp, &pol->gang);
  r.Int(sp, "scheduleTimeoutSeconds", spp, 1, 86400, &pol->schedule_timeout_seconds);
  if (pol->coscheduling && pol->gang)
    r.Error(spp + ".gang",
            "and coscheduling are two gang schedulers; give one of them (gang: Kubernetes' "
            "own, coscheduling: the scheduler-plugins plugin)");
}

// spec.runPolicy (`rp`).
void ReadRunPolicy(Reader& r, const YAML::Node& rp, RunPolicy* pol) {
  const std::string p = "spec.runPolicy";
  if (!r.Map(rp, p,
             {"backoffLimit", "activeDeadlineSeconds", "startupDeadlineSeconds",
              "ttlSecondsAfterFinished", "cleanPodPolicy", "suspend", "flushTimeoutSeconds",
              "managedBy", "schedulingPolicy"}) ||
      !rp)
    return;
  r.Int(rp, "backoffLimit", p, 0, 1000, &pol->backoff_limit);
  int64_t v = 0;
  if (r.Int(rp, "activeDeadlineSeconds", p, 1, INT64_MAX, &v)) pol->active_deadline_seconds = v;
  if (r.Int(rp, "startupDeadlineSeconds", p, 1, INT64_MAX, &v)) pol->startup_deadline_seconds = v;
  if (r.Int(rp, "ttlSecondsAfterFinished", p, 0, INT64_MAX, &v))
    pol->ttl_seconds_after_finished = v;
  if (r.Get(rp, "cleanPodPolicy", p, &pol->clean_pod_policy) &&
      pol->clean_pod_policy != "Running" && pol->clean_pod_policy != "All" &&
      pol->clean_pod_policy != "None")
    r.Error(p + ".cleanPodPolicy",
            "must be one of Running, All, None; got '" + pol->clean_pod_policy + "'");
  r.Get(rp, "suspend", p, &pol->suspend);
  r.Int(rp, "flushTimeoutSeconds", p, 1, 86400, &pol->flush_timeout_seconds);
  if (r.Get(rp, "managedBy", p, &pol->managed_by))
    CheckManager(r, p + ".managedBy", pol->managed_by);
  ReadSchedulingPolicy(r, rp["schedulingPolicy"], p + ".schedulingPolicy", &pol->scheduling);
}

void ReadRest(Reader& r, const YAML::Node& spec, AdamJob* job) {
  const YAML::Node pl = spec["placement"];
  if (r.Map(pl, "spec.placement",
            {"numaPinning", "replicaTopologyKey", "spreadTopologyKey", "modelWorkerTopologyKey"}) &&
      pl) {
    r.Get(pl, "modelWorkerTopologyKey", "spec.placement",
          &job->placement.model_worker_topology_key);
    r.Get(pl, "numaPinning", "spec.placement", &job->placement.numa_pinning);
    r.Get(pl, "replicaTopologyKey", "spec.placement", &job->placement.replica_topology_key);
    r.Get(pl, "spreadTopologyKey", "spec.placement", &job->placement.spread_topology_key);
  }
  const YAML::Node nw = spec["networks"];
  if (r.Map(nw, "spec.networks", {"replication"}) && nw) {
    if (r.Get(nw, "replication", "spec.networks", &job->networks.replication) &&
        !IsDnsLabel(job->networks.replication))
      r.Error("spec.networks.replication",
              "must be a DNS label (a NetworkAttachmentDefinition name), got '" +
                  job->networks.replication + "'");
  }
  const YAML::Node rp = spec["runPolicy"];
  ReadRunPolicy(r, rp, &job->run_policy);
  // spec.managedBy, where Job and JobSet keep it (and MultiKueue looks): the same as
  // spec.runPolicy.managedBy; where both are given they must agree.
  std::string manager;
  if (r.Get(spec, "managedBy", "spec", &manager)) {
    CheckManager(r, "spec.managedBy", manager);
    if (rp && rp["managedBy"] && job->run_policy.managed_by != manager)
      r.Error("spec.managedBy", "is '" + manager + "' but spec.runPolicy.managedBy is '" +
                                    job->run_policy.managed_by +
                                    "'; give one, or the same in both");
    job->run_policy.managed_by = manager;
  }
}

// "2", "2000m", "1k" and the like: a quantity of whole units (the static CPU manager gives a
// container exclusive cores only for an integer CPU count).
bool IsWholeQuantity(const std::string& q) {
  static const std::regex re("^([0-9]+)(\\.([0-9]+))?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$");
  std::smatch m;
  if (!std::regex_match(q, m, re)) return false;
  const std::string frac = m[3];
  const std::string unit = m[4];
  if (unit == "m") return frac.empty() && std::stoll(m[1].str().substr(0, 15)) % 1000 == 0;
  return unit.empty() ? frac.find_first_not_of('0') == std::string::npos : true;
}

// numaPinning pins threads to the cores the kubelet gives a Guaranteed pod, which it does only
// for whole CPUs; a fractional CPU is refused rather than silently shared.
// A split replica (modelWorkers > 1): every layer with parameters splits by its outputs, the
// workers share one weight vector per process (no private copies or held steps), and dense layers
// travel as weight deltas (a worker holds only its slice's activations and errors).
void CheckModelWorkers(Reader& r, AdamJob* job) {
  const int k = job->roles.trainer.model_workers;
  if (k < 2) return;
  const std::string at = "spec.roles.trainer.modelWorkers";
  for (size_t i = 0; i < job->model.layers.size(); ++i) {
    const LayerSpec& l = job->model.layers[i];
    const int outputs = l.type == LayerType::kConv      ? l.maps
                        : l.type == LayerType::kDense   ? l.units
                        : l.type == LayerType::kSoftmax ? l.classes
                                                        : k;
    if (outputs < k)
      r.Error("spec.model.layers[" + std::to_string(i) + "]",
              "has " + std::to_string(outputs) + " outputs, fewer than " + at + " (" +
                  std::to_string(k) + "): each worker holds a share of every layer's outputs");
  }
  if (job->training.thread_weights == ThreadWeights::kPrivate)
    r.Error("spec.training.threadWeights", "private is not supported with " + at + " > 1");
  if (job->training.apply_every > 1)
    r.Error("spec.training.applyEvery", "must be 1 with " + at + " > 1");
  if (job->training.dense_updates == DenseUpdates::kActivations)
    r.Error("spec.training.denseUpdates",
            "activations need a layer's whole input and error in one process; with " + at +
                " > 1 use weights or auto (auto means weights there)");
  job->training.dense_updates = DenseUpdates::kWeights;
}

void CheckPinning(Reader& r, const AdamJob& job) {
  if (!job.placement.numa_pinning) return;
  const std::pair<const char*, const Resources*> roles[] = {
      {"controller", &job.roles.controller.resources},
      {"parameterServer", &job.roles.parameter_server.resources},
      {"dataServer", &job.roles.data_server.resources},
      {"trainer", &job.roles.trainer.resources}};
  for (const auto& [role, res] : roles)
    if (!res->cpu.empty() && IsQuantity(res->cpu) && !IsWholeQuantity(res->cpu))
      r.Error(std::string("spec.roles.") + role + ".resources.cpu",
              "must be a whole number of CPUs with spec.placement.numaPinning (the kubelet pins "
              "only whole CPUs), got '" +
                  res->cpu + "'");
}

// YAML allows no key twice in one mapping, but yaml-cpp keeps both and reads the first: a
// manifest with `epochs: 1` and then `epochs: 2` would run 1 epoch. Each such key is an error
// naming both lines.
void CheckDuplicateKeys(Reader& r, const YAML::Node& n, const std::string& path) {
  if (n.IsMap()) {
    std::map<std::string, int> seen;  // key -> its first line (1-based)
    for (const auto& kv : n) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
      const std::string p = path.empty() ? key : path + "." + key;
      const int line = kv.first.Mark().line + 1;
      if (auto [it, fresh] = seen.emplace(key, line); !fresh)
        r.Error(p, "given twice (lines " + std::to_string(it->second) + " and " +
                       std::to_string(line) + "); give it once");
      CheckDuplicateKeys(r, kv.second, p);
    }
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i)
      CheckDuplicateKeys(r, n[i], path + "[" + std::to_string(i) + "]");
  }
}

}  // namespace

const char* FailureActionName(FailureRule::Action a) {
  switch (a) {
    case FailureRule::Action::kRestart:
      return "Restart";
    case FailureRule::Action::kIgnore:
      return "Ignore";
    case FailureRule::Action::kFailJob:
      return "FailJob";
  }
  return "?";
}

namespace {

// metadata: the job's name (which names its pods and Service) and namespace; Kubernetes owns
// the rest (labels, annotations, ...).
void ReadMetadata(Reader& r, const YAML::Node& md, AdamJob* job) {
  if (!md) {
    r.Error("metadata", "required");
  } else if (md.IsMap()) {
    // At most 40: pod and host names add "-data-server-0" and the like, within DNS's 63.
    // A DNS-1035 label: it names the job's Service, which may not start with a digit.
    static const std::regex dns1035("^[a-z]([-a-z0-9]*[a-z0-9])?$");
    if (r.Get(md, "name", "metadata", &job->name, true) &&
        (!std::regex_match(job->name, dns1035) || job->name.size() > 40))
      r.Error("metadata.name",
              "must be a DNS-1035 label (lower-case letters, digits and '-', starting with a "
              "letter) of at most 40 characters, got '" +
                  job->name + "'");
    r.Get(md, "namespace", "metadata", &job->name_space);
  } else {
    r.Error("metadata", "must be a mapping");
  }
}

// spec: every section, then the rules that tie sections together.
void ReadSpec(Reader& r, const YAML::Node& spec, AdamJob* job) {
  if (!spec) {
    r.Error("spec", "required");
  } else if (r.Map(spec, "spec",
                   {"image", "dataset", "output", "model", "training", "roles", "placement",
                    "networks", "runPolicy", "podTemplate", "managedBy"})) {
    r.Get(spec, "image", "spec", &job->image);
    ReadPodTemplate(spec, &job->pod_template);
    ReadDataset(r, spec["dataset"], &job->dataset);
    const size_t errors_before_model = r.errors().size();
    ReadModel(r, spec["model"], &job->model);
    const bool model_read = r.errors().size() == errors_before_model;
    ReadTraining(r, spec["training"], &job->training);
    ReadOutput(r, spec["output"], job->training.epochs, &job->output);
    ReadRoles(r, spec["roles"], &job->roles);
    ReadRest(r, spec, job);
    if (model_read) CheckShapes(r, job->model);
    if (model_read && !job->dataset.class_names.empty() &&
        int(job->dataset.class_names.size()) != NumClasses(job->model))
      r.Error("spec.dataset.classNames",
              "names " + std::to_string(job->dataset.class_names.size()) +
                  " classes but the model's softmax has " + std::to_string(NumClasses(job->model)));
    if (job->dataset.format == "folder" && job->model.input.channels != 1 &&
        job->model.input.channels != 3)
      r.Error("spec.model.input.channels",
              "must be 1 (grey) or 3 (RGB) with spec.dataset.format: "
              "folder, got " +
                  std::to_string(job->model.input.channels));
    CheckPinning(r, *job);
    CheckModelWorkers(r, job);
    CheckPodTemplates(r, *job);
    if (ControllerOwnsShards(*job)) {
      // Copies move between servers on failover: dense layers must travel as weight deltas,
      // which route per shard (activations and errors go per server).
      if (job->training.dense_updates == DenseUpdates::kActivations)
        r.Error("spec.training.denseUpdates",
                "activations cannot follow a failover; with spec.roles.parameterServer.copies > 1 "
                "use weights or auto (auto means weights there)");
      job->training.dense_updates = DenseUpdates::kWeights;
      if (job->roles.parameter_server.copies > job->roles.parameter_server.replicas)
        r.Error("spec.roles.parameterServer.copies",
                "is " + std::to_string(job->roles.parameter_server.copies) + " but only " +
                    std::to_string(job->roles.parameter_server.replicas) +
                    " parameter servers can hold a copy each");
    }
  }
}

}  // namespace

namespace {

// The offset of the first byte of `s` that is not part of valid UTF-8 (overlong forms,
// surrogates and code points past U+10FFFF included), or npos.
size_t FirstNonUtf8(const std::string& s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = b[i];
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return i;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size() || (b[i + k] & 0xC0) != 0x80) return i;
      cp = cp << 6 | (b[i + k] & 0x3F);
    }
    const uint32_t least[] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n + 1;
  }
  return std::string::npos;
}

}  // namespace

StatusOr<AdamJob> ParseAdamJob(const std::string& yaml_text) {
  if (yaml_text.size() > kMaxManifestBytes)
    return InvalidArgumentError("(root): the manifest is " + std::to_string(yaml_text.size()) +
                                " bytes; at most " + std::to_string(kMaxManifestBytes) +
                                " (Kubernetes keeps an object under 1.5 MiB)");
  // YAML is Unicode text, and every value goes on to Kubernetes as JSON, which is UTF-8.
  if (const size_t bad = FirstNonUtf8(yaml_text); bad != std::string::npos) {
    const size_t line_start = yaml_text.rfind('\n', bad == 0 ? 0 : bad - 1);
    const size_t line = size_t(std::count(yaml_text.begin(), yaml_text.begin() + long(bad), '\n'));
    const size_t column = line_start == std::string::npos || bad == 0 ? bad : bad - line_start - 1;
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", unsigned(static_cast<unsigned char>(yaml_text[bad])));
    return InvalidArgumentError(
        "(root): byte " + std::to_string(bad) + " (" + hex + ", line " + std::to_string(line + 1) +
        ", column " + std::to_string(column + 1) + ") is not UTF-8; a manifest is UTF-8 text");
  }
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    return InvalidArgumentError("YAML syntax error at line " + std::to_string(e.mark.line + 1) +
                                ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("YAML error: ") + e.what());
  }
  if (!root || !root.IsMap()) return InvalidArgumentError("(root): must be a YAML mapping");

  Reader r;
  AdamJob job;
  try {
    CheckDuplicateKeys(r, root, "");
    r.Map(root, "(root)", {"apiVersion", "kind", "metadata", "spec", "status"});
    if (r.Get(root, "apiVersion", "(root)", &job.api_version, true) &&
        job.api_version != "adam.dev/v1alpha1")
      r.Error("apiVersion", "must be adam.dev/v1alpha1, got '" + job.api_version + "'");
    if (r.Get(root, "kind", "(root)", &job.kind, true) && job.kind != "AdamJob")
      r.Error("kind", "must be AdamJob, got '" + job.kind + "'");
    ReadMetadata(r, root["metadata"], &job);
    ReadSpec(r, root["spec"], &job);
  } catch (const YAML::Exception& e) {
    r.Error("(root)", std::string("YAML error: ") + e.what());
  }
  if (!r.errors().empty()) {
    std::string msg;
    for (const auto& e : r.errors()) msg += (msg.empty() ? "" : "\n") + e;
    return InvalidArgumentError(msg);
  }
  return job;
}

StatusOr<AdamJob> LoadAdamJob(const std::string& path) {
  const auto text = ReadWholeFile(path);
  if (!text) return NotFoundError(path + ": cannot open manifest");
  auto job = ParseAdamJob(*text);
  if (!job.ok()) return job.status().Annotate(path);
  return job;
}

namespace manifest {

// A part of the manifest passed through to Kubernetes, as JSON text. The text was checked to be
// UTF-8, but a YAML escape (\x, \u) can still spell a byte or surrogate that is not: it becomes
// U+FFFD, as the API server would refuse it anyway, instead of a throw from the serialiser.
std::string JsonText(const YAML::Node& n) {
  return YamlNodeToJson(n).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace manifest

}  // namespace adam::spec
