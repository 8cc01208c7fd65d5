// Pod templates: their shape, the rules that keep Adam's own settings, and the merge.
#include "spec/pod_template.h"

#include <algorithm>
#include <regex>
#include <set>

#include "spec/adamjob.h"

namespace adam::spec {
namespace {

using nlohmann::json;

bool IsDnsSubdomain(const std::string& s) {
  static const std::regex re("^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$");
  return !s.empty() && s.size() <= 253 && std::regex_match(s, re);
}

// A label or annotation key: an optional DNS-subdomain prefix and "/", then a name of at most
// 63 characters.
bool IsQualifiedName(const std::string& key) {
  static const std::regex name("^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$");
  const size_t slash = key.find('/');
  const std::string n = slash == std::string::npos ? key : key.substr(slash + 1);
  if (slash != std::string::npos && !IsDnsSubdomain(key.substr(0, slash))) return false;
  return !n.empty() && n.size() <= 63 && std::regex_match(n, name);
}

bool IsLabelValue(const std::string& v) {
  static const std::regex re("^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$");
  return v.size() <= 63 && std::regex_match(v, re);
}

bool IsAdamLabel(const std::string& key) {
  static const std::set<std::string> recommended = {
      "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component",
      "app.kubernetes.io/managed-by"};
  return key.rfind(kAdamLabelPrefix, 0) == 0 || recommended.count(key) > 0;
}

// Where Adam mounts its own files in every pod (render.cc), /tmp included (an emptyDir: the
// root file system is read-only).
bool Overlaps(const std::string& a, const std::string& b) {
  return a == b || a.rfind(b + "/", 0) == 0 || b.rfind(a + "/", 0) == 0;
}

class Checker {
 public:
  Checker(const std::string& path, const PodTemplateContext& context)
      : path_(path), context_(context) {}

  std::vector<std::string> Check(const json& t) {
    if (!t.is_object()) {
      Error("", "must be a mapping");
      return errors_;
    }
    const std::set<std::string> known(std::begin(kPodTemplateFields), std::end(kPodTemplateFields));
    for (const auto& [key, value] : t.items())
      if (!known.count(key)) Error("." + key, "unknown field");
    Labels(t);
    Annotations(t);
    StringMap(t, "nodeSelector");
    ListOfObjects(t, "tolerations");
    Affinity(t);
    for (const char* f : {"priorityClassName", "schedulerName", "serviceAccountName"})
      if (t.contains(f) && !(t[f].is_string() && IsDnsSubdomain(t[f].get<std::string>())))
        Error(std::string(".") + f,
              "must be a DNS subdomain name (lower-case letters, digits, "
              "'-' and '.'), as Kubernetes names objects");
    Named(t, "imagePullSecrets");
    Env(t);
    Volumes(t);
    Mounts(t);
    SecurityContext(t);
    return errors_;
  }

 private:
  void Error(const std::string& where, const std::string& msg) {
    errors_.push_back(path_ + where + ": " + msg);
  }

  // t[field] as an object of strings; false when absent or malformed (reported).
  bool StringMap(const json& t, const char* field) {
    if (!t.contains(field)) return false;
    const json& m = t[field];
    if (!m.is_object()) {
      Error(std::string(".") + field, "must be a mapping of strings");
      return false;
    }
    bool ok = true;
    for (const auto& [k, v] : m.items()) {
      if (!v.is_string()) {
        Error(std::string(".") + field + "." + k, "must be a string (quote numbers and booleans)");
        ok = false;
      }
    }
    return ok;
  }

  void Labels(const json& t) {
    if (!StringMap(t, "labels")) return;
    for (const auto& [k, v] : t["labels"].items()) {
      const std::string at = ".labels." + k;
      if (!IsQualifiedName(k))
        Error(at,
              "is not a label key (an optional DNS-subdomain prefix and '/', then at most 63 "
              "letters, digits, '-', '_' or '.')");
      else if (IsAdamLabel(k))
        Error(at,
              "is Adam's own label (adam.dev/* and app.kubernetes.io/name, instance, "
              "component, managed-by name the job, role and index it selects its pods by); "
              "choose another key");
      else if (k == "kueue.x-k8s.io/podset")
        Error(at, "is written by the operator (the role of a pod Kueue places by topology)");
      else if (!IsLabelValue(v.get<std::string>()))
        Error(at, "is not a label value (at most 63 letters, digits, '-', '_' or '.')");
    }
  }

  void Annotations(const json& t) {
    if (!StringMap(t, "annotations")) return;
    for (const auto& [k, v] : t["annotations"].items()) {
      const std::string at = ".annotations." + k;
      if (!IsQualifiedName(k))
        Error(at,
              "is not an annotation key (an optional DNS-subdomain prefix and '/', then at "
              "most 63 letters, digits, '-', '_' or '.')");
      else if (k.rfind(kAdamLabelPrefix, 0) == 0)
        Error(at,
              "is Adam's own annotation (adam.dev/*: the start stage and generation the "
              "operator records); choose another key");
      else if (k == "k8s.v1.cni.cncf.io/networks" && context_.parameter_servers &&
               !context_.replication_network.empty())
        Error(at, "conflicts with spec.networks.replication ('" + context_.replication_network +
                      "'), which Adam writes to this annotation of every parameter server; "
                      "name the network there only");
    }
    TopologyAnnotations(t["annotations"]);
  }

  // Kueue's topology-aware scheduling annotations, checked as Kueue reads them: a level is a node
  // label key, "unconstrained" a boolean, a slice needs its level and a size of at least 1.
  void TopologyAnnotations(const json& a) {
    const std::string at = ".annotations.kueue.x-k8s.io/";
    auto value = [&a](const std::string& name) -> const json* {
      auto it = a.find("kueue.x-k8s.io/" + name);
      return it == a.end() || !it->is_string() ? nullptr : &*it;
    };
    for (const char* level : {"podset-required-topology", "podset-preferred-topology",
                              "podset-slice-required-topology"})
      if (const json* v = value(level); v && !IsQualifiedName(v->get<std::string>()))
        Error(at + level,
              "is not a topology level (a node label key, such as "
              "topology.kubernetes.io/zone)");
    if (const json* u = value("podset-unconstrained-topology"); u && *u != "true" && *u != "false")
      Error(at + "podset-unconstrained-topology", "must be \"true\" or \"false\"");
    const json* slice = value("podset-slice-required-topology");
    const json* size = value("podset-slice-size");
    if (slice && !size)
      Error(at + "podset-slice-required-topology",
            "needs kueue.x-k8s.io/podset-slice-size (the pods of each slice)");
    if (size) {
      const std::string n = size->get<std::string>();
      const bool number =
          !n.empty() && n.size() < 10 &&
          std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!number || std::stol(n) < 1)
        Error(at + "podset-slice-size", "must be a whole number of pods, at least 1");
      else if (!slice)
        Error(at + "podset-slice-size", "needs kueue.x-k8s.io/podset-slice-required-topology");
    }
    if (a.contains("kueue.x-k8s.io/workload"))
      Error(at + "workload",
            "is written by the operator (the Workload a pod placed by topology belongs to)");
  }

  bool ListOfObjects(const json& t, const char* field) {
    if (!t.contains(field)) return false;
    const json& l = t[field];
    if (!l.is_array()) {
      Error(std::string(".") + field, "must be a list");
      return false;
    }
    bool ok = true;
    for (size_t i = 0; i < l.size(); ++i) {
      if (!l[i].is_object()) {
        Error(std::string(".") + field + "[" + std::to_string(i) + "]", "must be a mapping");
        ok = false;
      }
    }
    return ok;
  }

  // A list of mappings, each with a non-empty string `name` given once; false if malformed.
  bool Named(const json& t, const char* field) {
    if (!ListOfObjects(t, field)) return false;
    bool ok = true;
    std::set<std::string> seen;
    const json& l = t[field];
    for (size_t i = 0; i < l.size(); ++i) {
      const std::string at = std::string(".") + field + "[" + std::to_string(i) + "].name";
      if (!l[i].contains("name") || !l[i]["name"].is_string() ||
          l[i]["name"].get<std::string>().empty()) {
        Error(at, "required (a non-empty string)");
        ok = false;
      } else if (!seen.insert(l[i]["name"].get<std::string>()).second) {
        Error(at, "'" + l[i]["name"].get<std::string>() + "' is given twice");
        ok = false;
      }
    }
    return ok;
  }

  void Affinity(const json& t) {
    if (!t.contains("affinity")) return;
    const json& a = t["affinity"];
    if (!a.is_object()) {
      Error(".affinity", "must be a mapping");
      return;
    }
    for (const auto& [k, v] : a.items()) {
      if (k != "nodeAffinity" && k != "podAffinity" && k != "podAntiAffinity")
        Error(".affinity." + k, "unknown field (nodeAffinity, podAffinity, podAntiAffinity)");
      else if (!v.is_object())
        Error(".affinity." + k, "must be a mapping");
    }
  }

  void Env(const json& t) {
    if (!Named(t, "env")) return;
    const json& l = t["env"];
    for (size_t i = 0; i < l.size(); ++i) {
      const std::string name = l[i]["name"];
      if (name.rfind(kAdamEnvPrefix, 0) == 0)
        Error(".env[" + std::to_string(i) + "].name",
              "'" + name +
                  "': ADAM_* variables are Adam's own (the pod's name, its node and "
                  "its CPU limit, which the roles read); choose another name");
    }
  }

  void Volumes(const json& t) {
    if (!Named(t, "volumes")) return;
    const json& l = t["volumes"];
    for (size_t i = 0; i < l.size(); ++i) {
      const std::string at = ".volumes[" + std::to_string(i) + "]";
      const std::string name = l[i]["name"];
      if (std::find(std::begin(kAdamVolumes), std::end(kAdamVolumes), name) !=
          std::end(kAdamVolumes))
        Error(at + ".name", "'" + name +
                                "' is the name of one of Adam's own volumes (job, tls, podinfo, "
                                "tmp, state, dataset, output); choose another name");
      if (l[i].size() < 2) Error(at, "needs a volume source beside its name");
    }
  }

  void Mounts(const json& t) {
    if (!ListOfObjects(t, "volumeMounts")) return;
    std::set<std::string> volumes(context_.inherited_volumes.begin(),
                                  context_.inherited_volumes.end());
    for (const std::string& v : VolumeNames(t)) volumes.insert(v);
    std::vector<std::string> adam = {kJobMountPath, kTlsPath, kPodInfoPath, kStatePath, "/tmp"};
    static const std::regex clean("^(/[A-Za-z0-9._-]+)+$");
    const json& l = t["volumeMounts"];
    for (size_t i = 0; i < l.size(); ++i) {
      const std::string at = ".volumeMounts[" + std::to_string(i) + "]";
      const json& m = l[i];
      if (!m.contains("name") || !m["name"].is_string())
        Error(at + ".name", "required (a volume of the template's volumes)");
      else if (!volumes.count(m["name"].get<std::string>()))
        Error(at + ".name", "'" + m["name"].get<std::string>() +
                                "' is not a volume of this podTemplate (or of spec.podTemplate)");
      if (!m.contains("mountPath") || !m["mountPath"].is_string()) {
        Error(at + ".mountPath", "required (an absolute path)");
        continue;
      }
      const std::string p = m["mountPath"];
      if (!std::regex_match(p, clean) || p.find("/../") != std::string::npos ||
          p.find("/./") != std::string::npos || p.ends_with("/..") || p.ends_with("/.")) {
        Error(at + ".mountPath", "must be an absolute path of plain names, got '" + p + "'");
        continue;
      }
      for (const std::string& own : adam)
        if (Overlaps(p, own))
          Error(at + ".mountPath",
                "'" + p + "' would overlap " + own + ", where Adam mounts its own files");
      for (const std::string& own : context_.mount_paths)
        if (Overlaps(p, own))
          Error(at + ".mountPath", "'" + p + "' would overlap " + own +
                                       ", where the job's dataset or output volume is mounted");
    }
  }

  void SecurityContext(const json& t) {
    if (!t.contains("securityContext")) return;
    const json& s = t["securityContext"];
    if (!s.is_object()) {
      Error(".securityContext", "must be a mapping");
      return;
    }
    if (s.contains("runAsNonRoot") && s["runAsNonRoot"] == false)
      Error(".securityContext.runAsNonRoot",
            "Adam's pods run as a non-root user (runAsNonRoot: true); it cannot be turned off");
    if (s.contains("runAsUser") && s["runAsUser"] == 0)
      Error(".securityContext.runAsUser",
            "0 is root; Adam's pods run as a non-root user (runAsNonRoot: true, user 10001 "
            "unless set here)");
    for (const char* f : {"runAsUser", "runAsGroup", "fsGroup"})
      if (s.contains(f) && !(s[f].is_number_integer() && s[f].get<int64_t>() >= 0))
        Error(std::string(".securityContext.") + f, "must be a user or group id (an integer >= 0)");
  }

  const std::string path_;
  const PodTemplateContext& context_;
  std::vector<std::string> errors_;
};

// `base` with `over`'s named entries appended, an entry of `over` replacing `base`'s of the same
// name in place.
json MergeNamed(json base, const json& over) {
  for (const json& e : over) {
    auto same = std::find_if(base.begin(), base.end(), [&](const json& b) {
      return b.value("name", "") == e.value("name", "");
    });
    if (same != base.end())
      *same = e;
    else
      base.push_back(e);
  }
  return base;
}

}  // namespace

std::vector<std::string> CheckPodTemplate(const json& t, const std::string& path,
                                          const PodTemplateContext& context) {
  return Checker(path, context).Check(t);
}

std::vector<std::string> VolumeNames(const json& t) {
  std::vector<std::string> out;
  if (!t.is_object() || !t.contains("volumes") || !t["volumes"].is_array()) return out;
  for (const json& v : t["volumes"])
    if (v.is_object() && v.contains("name") && v["name"].is_string()) out.push_back(v["name"]);
  return out;
}

json MergePodTemplates(const json& job_wide, const json& role) {
  json out = job_wide.is_object() ? job_wide : json::object();
  if (!role.is_object()) return out;
  for (const auto& [key, value] : role.items()) {
    const bool both = out.contains(key);
    if (both && (key == "env" || key == "volumes")) {
      out[key] = MergeNamed(out[key], value);
    } else if (both &&
               (key == "tolerations" || key == "imagePullSecrets" || key == "volumeMounts")) {
      for (const json& e : value) out[key].push_back(e);
    } else if (both && value.is_object()) {  // maps and affinity: key by key
      for (const auto& [k, v] : value.items()) out[key][k] = v;
    } else {  // the role's alone, or a string
      out[key] = value;
    }
  }
  return out;
}

}  // namespace adam::spec
