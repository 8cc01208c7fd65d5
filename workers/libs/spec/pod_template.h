// Pod settings a cluster demands of a job's pods (spec.podTemplate for every role,
// spec.roles.<role>.podTemplate for one): scheduling (nodeSelector, tolerations, affinity,
// priorityClassName, schedulerName), identity (serviceAccountName, imagePullSecrets), metadata
// (labels, annotations), the container's env and volumeMounts, the pod's volumes and its
// securityContext. Kubernetes' own spelling, passed through to the pods the operator renders.
//
// Adam's own settings win: a template may add to them, never replace them. What would conflict
// (a label Adam selects on, an env variable a role reads, a volume name or mount path of Adam's,
// a root user) is refused here, naming the field and what of Adam's it would override. `adam run`
// ignores templates (they are the cluster's). Pure and thread-compatible.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace adam::spec {

// The keys a podTemplate may hold.
inline constexpr const char* kPodTemplateFields[] = {"labels",
                                                     "annotations",
                                                     "nodeSelector",
                                                     "tolerations",
                                                     "affinity",
                                                     "priorityClassName",
                                                     "schedulerName",
                                                     "serviceAccountName",
                                                     "env",
                                                     "imagePullSecrets",
                                                     "volumes",
                                                     "volumeMounts",
                                                     "securityContext"};

// Names and paths of Adam's that a template may not take.
inline constexpr const char* kAdamVolumes[] = {"job",   "tls",     "podinfo", "tmp",
                                               "state", "dataset", "output"};
inline constexpr const char* kAdamEnvPrefix = "ADAM_";
inline constexpr const char* kAdamLabelPrefix = "adam.dev/";

// What a template is checked against beyond its own shape.
struct PodTemplateContext {
  bool parameter_servers = false;        // the template applies to parameter-server pods
  std::string replication_network;       // spec.networks.replication ("" = none)
  std::vector<std::string> mount_paths;  // the job's dataset/output mount paths, where set
  // Volumes a template's mounts may name beside its own (a role's: the job-wide template's).
  std::vector<std::string> inherited_volumes;
};

// Checks one template (a JSON object, as read from the manifest) and returns one error per
// problem, each starting with `path` and the field's place in it.
std::vector<std::string> CheckPodTemplate(const nlohmann::json& t, const std::string& path,
                                          const PodTemplateContext& context);

// The names of the template's volumes (for PodTemplateContext::inherited_volumes).
std::vector<std::string> VolumeNames(const nlohmann::json& t);

// A role's template over the job-wide one: maps (labels, annotations, nodeSelector,
// securityContext) merged key by key and lists (tolerations, imagePullSecrets, volumeMounts)
// appended, the role's entry winning; env and volumes appended with a name of the role's
// replacing the job's; strings and each kind of affinity replaced.
nlohmann::json MergePodTemplates(const nlohmann::json& job_wide, const nlohmann::json& role);

}  // namespace adam::spec
