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

namespace {

// Walks a YAML tree and collects errors with their field paths.
class Reader {
 public:
  void Error(const std::string& path, const std::string& msg) {
    errors_.push_back(path + ": " + msg);
  }
  // An error already in "path: message" form.
  void Add(const std::string& error) { errors_.push_back(error); }
  const std::vector<std::string>& errors() const { return errors_; }

  // Requires `n` to be a map (or absent); reports keys not in `allowed`. Returns false if `n`
  // is present but not a map.
  bool Map(const YAML::Node& n, const std::string& path,
           std::initializer_list<const char*> allowed) {
    if (!n || n.IsNull()) return true;
    if (!n.IsMap()) {
      Error(path, "must be a mapping");
      return false;
    }
    std::set<std::string> ok(allowed.begin(), allowed.end());
    for (const auto& kv : n) {
      std::string key = kv.first.Scalar();
      if (!ok.count(key)) Error(path + "." + key, "unknown field");
    }
    return true;
  }

  // Reads n[key] as T into *out when present; reports a type error; reports absence when
  // `required`. Returns true when a value was read.
  template <typename T>
  bool Get(const YAML::Node& n, const char* key, const std::string& path, T* out,
           bool required = false) {
    std::string p = path + "." + key;
    if (!n || !n.IsMap() || !n[key] || n[key].IsNull()) {
      if (required) Error(p, "required");
      return false;
    }
    const YAML::Node v = n[key];
    if (!v.IsScalar()) {
      Error(p, std::string("must be ") + TypeName<T>());
      return false;
    }
    try {
      *out = v.as<T>();
      return true;
    } catch (const YAML::Exception&) {
      Error(p, std::string("must be ") + TypeName<T>() + ", got '" + v.Scalar() + "'");
      return false;
    }
  }

  // Like Get<int64_t> but also checks lo <= value <= hi.
  bool Int(const YAML::Node& n, const char* key, const std::string& path, int64_t lo, int64_t hi,
           int64_t* out, bool required = false) {
    int64_t v = 0;
    if (!Get(n, key, path, &v, required)) return false;
    if (v < lo) {
      Error(path + "." + key,
            (lo == 1 ? std::string("must be > 0") : "must be >= " + std::to_string(lo)) + ", got " +
                std::to_string(v));
      return false;
    }
    if (v > hi) {
      Error(path + "." + key, "must be <= " + std::to_string(hi) + ", got " + std::to_string(v));
      return false;
    }
    *out = v;
    return true;
  }
  bool Int(const YAML::Node& n, const char* key, const std::string& path, int64_t lo, int64_t hi,
           int* out, bool required = false) {
    int64_t v = *out;
    if (!Int(n, key, path, lo, hi, &v, required)) return false;
    *out = static_cast<int>(v);
    return true;
  }

 private:
  template <typename T>
  static const char* TypeName() {
    if constexpr (std::is_same_v<T, bool>)
      return "true or false";
    else if constexpr (std::is_integral_v<T>)
      return "an integer";
    else if constexpr (std::is_floating_point_v<T>)
      return "a number";
    else
      return "a string";
  }

  std::vector<std::string> errors_;
};

constexpr int64_t kMaxInt = INT32_MAX;

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

void ReadFilePair(Reader& r, const YAML::Node& n, const std::string& path, bool folder,
                  FilePair* out) {
  if (!n) {
    r.Error(path, "required");
    return;
  }
  if (folder) {
    if (!r.Map(n, path, {"folder"})) return;
    r.Get(n, "folder", path, &out->folder, true);
    return;
  }
  if (!r.Map(n, path, {"images", "labels"})) return;
  r.Get(n, "images", path, &out->images, true);
  r.Get(n, "labels", path, &out->labels, true);
}

// A part of the manifest passed through to Kubernetes, as JSON text. The text was checked to be
// UTF-8, but a YAML escape (\x, \u) can still spell a byte or surrogate that is not: it becomes
// U+FFFD, as the API server would refuse it anyway, instead of a throw from the serialiser.
std::string JsonText(const YAML::Node& n) {
  return YamlNodeToJson(n).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The volume source types of a Kubernetes pod's spec.volumes[] (core/v1 VolumeSource).
bool IsVolumeSource(const std::string& key) {
  static const std::set<std::string> kinds = {"awsElasticBlockStore",
                                              "azureDisk",
                                              "azureFile",
                                              "cephfs",
                                              "cinder",
                                              "configMap",
                                              "csi",
                                              "downwardAPI",
                                              "emptyDir",
                                              "ephemeral",
                                              "fc",
                                              "flexVolume",
                                              "flocker",
                                              "gcePersistentDisk",
                                              "gitRepo",
                                              "glusterfs",
                                              "hostPath",
                                              "image",
                                              "iscsi",
                                              "nfs",
                                              "persistentVolumeClaim",
                                              "photonPersistentDisk",
                                              "portworxVolume",
                                              "projected",
                                              "quobyte",
                                              "rbd",
                                              "scaleIO",
                                              "secret",
                                              "storageos",
                                              "vsphereVolume"};
  return kinds.count(key) > 0;
}

// n[volume] and n[mountPath] of spec.dataset or spec.output.
void ReadVolume(Reader& r, const YAML::Node& n, const std::string& path, VolumeSpec* v) {
  const YAML::Node src = n["volume"];
  const std::string vp = path + ".volume";
  if (src && !src.IsNull()) {
    if (!src.IsMap() || src.size() != 1) {
      r.Error(vp,
              "must be one volume source, as in a pod's spec.volumes[] without its name "
              "(e.g. {persistentVolumeClaim: {claimName: NAME}})");
    } else {
      const std::string kind = src.begin()->first.Scalar();
      if (!IsVolumeSource(kind))
        r.Error(vp + "." + kind,
                "is not a Kubernetes volume source (persistentVolumeClaim, nfs, "
                "hostPath, configMap, csi, ...)");
      else if (!src[kind].IsMap() && !src[kind].IsNull())
        r.Error(vp + "." + kind, "must be a mapping");
      else
        v->source = JsonText(src);
    }
  }
  if (!r.Get(n, "mountPath", path, &v->mount_path)) return;
  const std::string& m = v->mount_path;
  const std::string field = path + ".mountPath";
  static const std::regex clean("^(/[A-Za-z0-9._-]+)+$");
  auto ends = [&m](const std::string& tail) {
    return m.size() >= tail.size() && m.compare(m.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (!std::regex_match(m, clean) || m.find("/../") != std::string::npos ||
      m.find("/./") != std::string::npos || ends("/..") || ends("/.")) {
    r.Error(field,
            "must be an absolute path of plain names (letters, digits, . _ -; no . or .. "
            "component, no trailing /), got '" +
                m + "'");
    return;
  }
  // Inside or above one of Adam's own mounts would hide it or be hidden by it.
  for (const char* own : {kJobMountPath, kPodInfoPath, kStatePath, kTlsPath}) {
    const std::string o = own;
    if (m == o || m.rfind(o + "/", 0) == 0 || o.rfind(m + "/", 0) == 0) {
      r.Error(field, "'" + m + "' would overlap " + o + ", where Adam mounts its own files");
      return;
    }
  }
  static const std::set<std::string> system = {"/bin",  "/boot", "/dev", "/home", "/lib", "/lib64",
                                               "/proc", "/root", "/run", "/sbin", "/sys", "/usr"};
  if (system.count(m))
    r.Error(field, "'" + m + "' would hide the image's " + m + "; mount the volume elsewhere");
}

// spec.dataset.classNames: distinct, non-empty names of at most 128 bytes (counted against the
// softmax's classes once the model is read).
void ReadClassNames(Reader& r, const YAML::Node& n, const std::string& path, bool folder,
                    std::vector<std::string>* names) {
  const YAML::Node list = n["classNames"];
  const std::string p = path + ".classNames";
  if (!list || list.IsNull()) return;
  if (folder) {
    r.Error(p, "only with format: idx (an image folder's class folders name its classes)");
    return;
  }
  if (!list.IsSequence()) {
    r.Error(p, "must be a list of names");
    return;
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = p + "[" + std::to_string(i) + "]";
    if (!list[i].IsScalar() || list[i].Scalar().empty() || list[i].Scalar().size() > 128) {
      r.Error(at, "must be a name of 1 to 128 characters");
      continue;
    }
    const std::string& name = list[i].Scalar();
    if (std::find(names->begin(), names->end(), name) != names->end())
      r.Error(at, "'" + name + "' is named twice");
    names->push_back(name);
  }
}

void ReadDataset(Reader& r, const YAML::Node& n, DatasetSpec* d) {
  const std::string path = "spec.dataset";
  if (!n) {
    r.Error(path, "required");
    return;
  }
  if (!r.Map(n, path,
             {"format", "train", "test", "heldOut", "fit", "maxCorrupt", "augment", "volume",
              "mountPath", "classNames"}))
    return;
  if (r.Get(n, "format", path, &d->format) && d->format != "idx" && d->format != "folder")
    r.Error(path + ".format", "must be 'idx' or 'folder', got '" + d->format + "'");
  const bool folder = d->format == "folder";
  ReadFilePair(r, n["train"], path + ".train", folder, &d->train);
  if (r.Get(n, "heldOut", path, &d->held_out)) {
    if (!folder)
      r.Error(path + ".heldOut", "only with format: folder (an IDX data set has its test files)");
    else if (!(d->held_out > 0 && d->held_out < 1))
      r.Error(path + ".heldOut",
              "must be a fraction between 0 and 1 (exclusive), got " + std::to_string(d->held_out));
    else if (n["test"])
      r.Error(path + ".heldOut", "replaces spec.dataset.test; give one of them");
  }
  if (d->held_out == 0 || !folder) ReadFilePair(r, n["test"], path + ".test", folder, &d->test);
  for (const char* key : {"fit", "maxCorrupt"})
    if (n[key] && !folder) r.Error(path + "." + key, "only with format: folder");
  if (r.Get(n, "fit", path, &d->fit) && d->fit != "crop" && d->fit != "stretch")
    r.Error(path + ".fit", "must be 'crop' or 'stretch', got '" + d->fit + "'");
  r.Int(n, "maxCorrupt", path, 0, kMaxInt, &d->max_corrupt);
  ReadClassNames(r, n, path, folder, &d->class_names);
  const YAML::Node a = n["augment"];
  const std::string ap = path + ".augment";
  if (r.Map(a, ap, {"shift", "hflip", "variants", "crop"}) && a) {
    r.Int(a, "shift", ap, 0, 8, &d->augment.shift);
    r.Get(a, "hflip", ap, &d->augment.hflip);
    r.Int(a, "variants", ap, 1, 16, &d->augment.variants);
    if (r.Int(a, "crop", ap, 0, 32, &d->augment.crop) && !folder && d->augment.crop > 0)
      r.Error(ap + ".crop", "only with format: folder (IDX images come at the model's size)");
  }
  ReadVolume(r, n, path, &d->volume);
  if (!d->volume.source.empty()) {
    // The data server sees only its image and this volume: the files must lie under it.
    const std::string root = d->volume.mount_path + "/";
    for (const auto& [field, file] :
         {std::pair<const char*, const std::string*>{"train.images", &d->train.images},
          {"train.labels", &d->train.labels},
          {"train.folder", &d->train.folder},
          {"test.images", &d->test.images},
          {"test.labels", &d->test.labels},
          {"test.folder", &d->test.folder}})
      if (!file->empty() && file->rfind(root, 0) != 0)
        r.Error(path + "." + field, "'" + *file + "' is not under spec.dataset.mountPath " +
                                        d->volume.mount_path +
                                        ", where spec.dataset.volume is mounted");
  }
}

void ReadOutput(Reader& r, const YAML::Node& n, int epochs, OutputSpec* o) {
  const std::string path = "spec.output";
  if (!r.Map(n, path, {"volume", "mountPath", "everyEpochs"}) || !n) return;
  ReadVolume(r, n, path, &o->volume);
  r.Int(n, "everyEpochs", path, 0, std::max(epochs, 1), &o->every_epochs);
}

Activation ReadActivation(Reader& r, const YAML::Node& n, const std::string& path) {
  std::string s = "tanh";
  r.Get(n, "activation", path, &s);
  if (s == "tanh") return Activation::kTanh;
  if (s == "relu") return Activation::kRelu;
  if (s == "sigmoid") return Activation::kSigmoid;
  if (s == "leakyRelu") return Activation::kLeakyRelu;
  if (s == "none") return Activation::kNone;
  r.Error(path + ".activation",
          "must be one of tanh, relu, leakyRelu, sigmoid, none; got '" + s + "'");
  return Activation::kTanh;
}

void ReadModel(Reader& r, const YAML::Node& n, ModelSpec* m) {
  const std::string path = "spec.model";
  if (!n) {
    r.Error(path, "required");
    return;
  }
  if (!r.Map(n, path, {"input", "layers"})) return;
  const YAML::Node in = n["input"];
  const std::string ip = path + ".input";
  if (!in) {
    r.Error(ip, "required");
  } else if (r.Map(in, ip, {"channels", "height", "width"})) {
    r.Int(in, "channels", ip, 1, 4096, &m->input.channels, true);
    r.Int(in, "height", ip, 1, 4096, &m->input.height, true);
    r.Int(in, "width", ip, 1, 4096, &m->input.width, true);
  }
  const YAML::Node layers = n["layers"];
  const std::string lp = path + ".layers";
  if (!layers || !layers.IsSequence() || layers.size() == 0) {
    r.Error(lp, "must be a non-empty list of layers");
    return;
  }
  if (layers.size() > size_t(kMaxLayers)) {
    r.Error(lp, "has " + std::to_string(layers.size()) + " layers; at most " +
                    std::to_string(kMaxLayers));
    return;
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const YAML::Node l = layers[i];
    const std::string p = lp + "[" + std::to_string(i) + "]";
    LayerSpec spec;
    std::string type;
    if (!l.IsMap()) {
      r.Error(p, "must be a mapping");
      continue;
    }
    if (!r.Get(l, "type", p, &type, true)) continue;
    if (type == "conv") {
      spec.type = LayerType::kConv;
      r.Map(l, p, {"type", "maps", "kernel", "stride", "padding", "activation"});
      r.Int(l, "maps", p, 1, 65536, &spec.maps, true);
      r.Int(l, "kernel", p, 1, 1024, &spec.kernel, true);
      r.Int(l, "stride", p, 1, 1024, &spec.stride);
      r.Int(l, "padding", p, 0, 1024, &spec.padding);
      spec.activation = ReadActivation(r, l, p);
    } else if (type == "maxpool" || type == "avgpool") {
      spec.type = type == "maxpool" ? LayerType::kMaxPool : LayerType::kAvgPool;
      r.Map(l, p, {"type", "size"});
      r.Int(l, "size", p, 1, 1024, &spec.size, true);
    } else if (type == "dropout") {
      spec.type = LayerType::kDropout;
      r.Map(l, p, {"type", "rate"});
      if (r.Get(l, "rate", p, &spec.rate) && !(spec.rate >= 0 && spec.rate < 1))
        r.Error(p + ".rate", "must be in [0, 1), got " + std::to_string(spec.rate));
    } else if (type == "dense") {
      spec.type = LayerType::kDense;
      r.Map(l, p, {"type", "units", "activation"});
      r.Int(l, "units", p, 1, 1 << 20, &spec.units, true);
      spec.activation = ReadActivation(r, l, p);
    } else if (type == "softmax") {
      spec.type = LayerType::kSoftmax;
      r.Map(l, p, {"type", "classes"});
      r.Int(l, "classes", p, 2, 65536, &spec.classes, true);
      spec.activation = Activation::kNone;
      if (i + 1 != layers.size()) r.Error(p + ".type", "softmax must be the last layer");
    } else {
      r.Error(p + ".type",
              "must be one of conv, maxpool, avgpool, dense, dropout, softmax; got '" + type + "'");
      continue;
    }
    m->layers.push_back(spec);
  }
  if (!m->layers.empty() && m->layers.back().type != LayerType::kSoftmax)
    r.Error(lp, "the last layer must be softmax");
}

// The field a momentum or weight-decay conflict is reported under.
const char* Stepper(const TrainingSpec& t) { return t.momentum > 0 ? "momentum" : "weightDecay"; }

// spec.training.learningRateSchedule: step or cosine, in place of learningRateDecay.
void ReadSchedule(Reader& r, const YAML::Node& n, const std::string& p, TrainingSpec* t) {
  if (const YAML::Node s = n["learningRateSchedule"]; s && !s.IsNull()) {
    const std::string sp = p + ".learningRateSchedule";
    if (n["learningRateDecay"]) r.Error(sp, "replaces learningRateDecay; give one of them");
    std::string type;
    if (r.Map(s, sp, {"type", "everyEpochs", "factor", "final"}) &&
        r.Get(s, "type", sp, &type, true)) {
      const auto only = [&](const char* field, const char* with) {
        if (s[field]) r.Error(sp + "." + field, std::string("applies only to type: ") + with);
      };
      if (type == "step") {
        t->schedule.type = LearningRateSchedule::Type::kStep;
        r.Int(s, "everyEpochs", sp, 1, 100000, &t->schedule.every_epochs, true);
        if (r.Get(s, "factor", sp, &t->schedule.factor) &&
            !(t->schedule.factor > 0 && t->schedule.factor <= 1))
          r.Error(sp + ".factor", "must be in (0, 1], got " + std::to_string(t->schedule.factor));
        only("final", "cosine");
      } else if (type == "cosine") {
        t->schedule.type = LearningRateSchedule::Type::kCosine;
        if (r.Get(s, "final", sp, &t->schedule.final) &&
            !(t->schedule.final >= 0 && t->schedule.final <= 1))
          r.Error(sp + ".final", "must be in [0, 1], got " + std::to_string(t->schedule.final));
        only("everyEpochs", "step");
        only("factor", "step");
      } else {
        r.Error(sp + ".type", "must be one of step, cosine; got '" + type + "'");
      }
    }
  }
}

// How each step is applied: momentum, weightDecay, pushEvery, batchSize, applyEvery and
// threadWeights, and which of them go together.
void ReadStepping(Reader& r, const YAML::Node& n, const std::string& p, TrainingSpec* t) {
  if (r.Get(n, "momentum", p, &t->momentum) && !(t->momentum >= 0 && t->momentum < 1))
    r.Error(p + ".momentum", "must be in [0, 1), got " + std::to_string(t->momentum));
  if (r.Get(n, "weightDecay", p, &t->weight_decay) &&
      !(t->weight_decay >= 0 && t->weight_decay <= 0.1))
    r.Error(p + ".weightDecay", "must be in [0, 0.1], got " + std::to_string(t->weight_decay));
  r.Int(n, "pushEvery", p, 1, kMaxInt, &t->push_every);
  r.Int(n, "batchSize", p, 1, 4096, &t->batch_size);
  r.Int(n, "applyEvery", p, 1, 1024, &t->apply_every);
  // The velocity and the decay live where each step is applied: a held or private step is
  // applied later, or by other threads, as rows without either.
  const char* stepper = Stepper(*t);
  if ((t->momentum > 0 || t->weight_decay > 0) && t->apply_every > 1)
    r.Error(p + "." + stepper, "needs each step applied at once: applyEvery: 1");
  std::string tw;
  if (r.Get(n, "threadWeights", p, &tw)) {
    if (tw == "shared") {
      t->thread_weights = ThreadWeights::kShared;
    } else if (tw == "private") {
      t->thread_weights = ThreadWeights::kPrivate;
      if (t->apply_every > 1)
        r.Error(p + ".threadWeights",
                "private applies each update at once; it needs applyEvery: 1");
      if (t->momentum > 0 || t->weight_decay > 0)
        r.Error(
            p + "." + stepper,
            "needs threadWeights: shared (private copies pass steps as rows, without a velocity "
            "or a decay)");
    } else {
      r.Error(p + ".threadWeights", "must be one of shared, private; got '" + tw + "'");
    }
  }
}

// How updates travel and meet: consistency, maxStaleness and denseUpdates.
void ReadUpdates(Reader& r, const YAML::Node& n, const std::string& p, TrainingSpec* t) {
  const char* stepper = Stepper(*t);
  std::string c;
  if (r.Get(n, "consistency", p, &c)) {
    if (c == "async") {
      t->consistency = Consistency::kAsync;
    } else if (c == "sync") {
      t->consistency = Consistency::kSync;
    } else if (c == "bounded") {
      t->consistency = Consistency::kBounded;
    } else {
      r.Error(p + ".consistency", "must be one of async, sync, bounded; got '" + c + "'");
    }
  }
  const bool has_staleness = r.Int(n, "maxStaleness", p, 0, 1000000, &t->max_staleness);
  if (has_staleness && t->consistency != Consistency::kBounded)
    r.Error(p + ".maxStaleness", "applies only to consistency: bounded");
  std::string d;
  if (r.Get(n, "denseUpdates", p, &d)) {
    if (d == "auto") {
      t->dense_updates = DenseUpdates::kAuto;
    } else if (d == "weights") {
      t->dense_updates = DenseUpdates::kWeights;
    } else if (d == "activations") {
      t->dense_updates = DenseUpdates::kActivations;
      if (t->momentum > 0 || t->weight_decay > 0)
        r.Error(p + ".denseUpdates",
                std::string("activations carry plain SGD steps (rows of inputs and errors), not ") +
                    stepper + "'s; use weights or auto (auto means weights there)");
    } else {
      r.Error(p + ".denseUpdates", "must be one of auto, weights, activations; got '" + d + "'");
    }
  }
}

// n.communication: filter, values and compress.
void ReadCommunication(Reader& r, const YAML::Node& n, const std::string& p, CommunicationSpec* c) {
  if (!r.Map(n, p, {"filter", "values", "compress"}) || !n) return;
  if (r.Get(n, "filter", p, &c->filter) && !(c->filter >= 0 && c->filter <= 1))
    r.Error(p + ".filter", "must be in [0, 1], got " + std::to_string(c->filter));
  if (std::string v; r.Get(n, "values", p, &v)) {
    if (v == "float16" || v == "float32")
      c->float16 = v == "float16";
    else
      r.Error(p + ".values", "must be one of float32, float16; got '" + v + "'");
  }
  if (std::string z; r.Get(n, "compress", p, &z)) {
    if (z == "zstd" || z == "none")
      c->zstd = z == "zstd";
    else
      r.Error(p + ".compress", "must be one of none, zstd; got '" + z + "'");
  }
}

void ReadTraining(Reader& r, const YAML::Node& n, TrainingSpec* t) {
  const std::string p = "spec.training";
  if (!r.Map(n, p,
             {"epochs", "learningRate", "learningRateDecay", "learningRateSchedule", "warmupEpochs",
              "momentum", "weightDecay", "labelSmoothing", "pushEvery", "batchSize", "applyEvery",
              "threadWeights", "consistency", "maxStaleness", "denseUpdates", "communication",
              "epochQuorum", "targetAccuracy", "seed"}) ||
      !n)
    return;
  r.Int(n, "epochs", p, 1, 100000, &t->epochs);
  if (r.Get(n, "learningRate", p, &t->learning_rate) &&
      !(t->learning_rate > 0 && t->learning_rate <= 10))
    r.Error(p + ".learningRate", "must be in (0, 10], got " + std::to_string(t->learning_rate));
  if (r.Get(n, "learningRateDecay", p, &t->learning_rate_decay) &&
      !(t->learning_rate_decay > 0 && t->learning_rate_decay <= 1))
    r.Error(p + ".learningRateDecay",
            "must be in (0, 1], got " + std::to_string(t->learning_rate_decay));
  ReadSchedule(r, n, p, t);
  if (r.Int(n, "warmupEpochs", p, 0, 100000, &t->warmup_epochs) && t->warmup_epochs >= t->epochs)
    r.Error(p + ".warmupEpochs", "must be less than epochs (" + std::to_string(t->epochs) + ")");
  ReadStepping(r, n, p, t);
  if (r.Get(n, "labelSmoothing", p, &t->label_smoothing) &&
      !(t->label_smoothing >= 0 && t->label_smoothing < 1))
    r.Error(p + ".labelSmoothing", "must be in [0, 1), got " + std::to_string(t->label_smoothing));
  ReadUpdates(r, n, p, t);
  ReadCommunication(r, n["communication"], p + ".communication", &t->communication);
  if (r.Get(n, "epochQuorum", p, &t->epoch_quorum) &&
      !(t->epoch_quorum > 0 && t->epoch_quorum <= 1))
    r.Error(p + ".epochQuorum", "must be in (0, 1], got " + std::to_string(t->epoch_quorum));
  double target = 0;
  if (r.Get(n, "targetAccuracy", p, &target)) {
    if (!(target > 0 && target <= 1))
      r.Error(p + ".targetAccuracy", "must be in (0, 1], got " + std::to_string(target));
    t->target_accuracy = target;
  }
  int64_t seed = 1;
  if (r.Int(n, "seed", p, 0, INT64_MAX, &seed)) t->seed = static_cast<uint64_t>(seed);
  // A delta holds the velocity's and the decay's effect; a row only the plain gradient.
  if (t->momentum > 0 || t->weight_decay > 0) t->dense_updates = DenseUpdates::kWeights;
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
  if (codes && r.Map(codes, at + ".onExitCodes", {"operator", "values"})) {
    const std::string cp = at + ".onExitCodes";
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
  if (conds) {
    const std::string cp = at + ".onPodConditions";
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
      s) {
    const std::string sp = p + ".parameterServer";
    auto& ps = roles->parameter_server;
    r.Int(s, "replicas", sp, 1, 1024, &ps.replicas);
    if (r.Int(s, "shardBytes", sp, 4, int64_t{1} << 30, &ps.shard_bytes) && ps.shard_bytes % 4 != 0)
      r.Error(sp + ".shardBytes",
              "must be a multiple of 4 (whole floats), got " + std::to_string(ps.shard_bytes));
    r.Int(s, "copies", sp, 1, 5, &ps.copies);
    if (std::string a; r.Get(s, "acknowledge", sp, &a)) {
      if (a == "quorum") {
        ps.acknowledge = Acknowledge::kQuorum;
      } else if (a == "applied") {
        ps.acknowledge = Acknowledge::kApplied;
      } else {
        r.Error(sp + ".acknowledge", "must be one of quorum, applied; got '" + a + "'");
      }
    }
    ReadResources(r, s["resources"], sp + ".resources", &ps.resources);
    ReadPodTemplate(s, &ps.pod_template);
    ReadFailureRules(r, s, sp, &ps.failure_rules);
    const YAML::Node per = s["persistence"];
    if (r.Map(per, sp + ".persistence", {"interval", "size"}) && per) {
      std::string iv;
      if (r.Get(per, "interval", sp + ".persistence", &iv)) {
        ps.persistence.interval_ms = ParseDurationMs(iv);
        if (ps.persistence.interval_ms <= 0)
          r.Error(sp + ".persistence.interval",
                  "must be a positive duration like 30s or 500ms, got '" + iv + "'");
      }
      if (r.Get(per, "size", sp + ".persistence", &ps.persistence.size) &&
          !IsQuantity(ps.persistence.size))
        r.Error(sp + ".persistence.size",
                "must be a Kubernetes quantity like 10Gi, got '" + ps.persistence.size + "'");
    }
  }
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
  // A domain-prefixed path, as Job's managedBy: "example.com/name".
  static const std::regex managed_re(
      "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$");
  const auto check_manager = [&](const std::string& field, const std::string& v) {
    if (v.size() > 63 || !std::regex_match(v, managed_re))
      r.Error(field,
              "must be a domain-prefixed path of at most 63 characters like adam.dev/operator, "
              "got '" +
                  v + "'");
  };
  const YAML::Node rp = spec["runPolicy"];
  const std::string p = "spec.runPolicy";
  if (r.Map(rp, p,
            {"backoffLimit", "activeDeadlineSeconds", "startupDeadlineSeconds",
             "ttlSecondsAfterFinished", "cleanPodPolicy", "suspend", "flushTimeoutSeconds",
             "managedBy", "schedulingPolicy"}) &&
      rp) {
    auto& pol = job->run_policy;
    r.Int(rp, "backoffLimit", p, 0, 1000, &pol.backoff_limit);
    int64_t v = 0;
    if (r.Int(rp, "activeDeadlineSeconds", p, 1, INT64_MAX, &v)) pol.active_deadline_seconds = v;
    if (r.Int(rp, "startupDeadlineSeconds", p, 1, INT64_MAX, &v)) pol.startup_deadline_seconds = v;
    if (r.Int(rp, "ttlSecondsAfterFinished", p, 0, INT64_MAX, &v))
      pol.ttl_seconds_after_finished = v;
    if (r.Get(rp, "cleanPodPolicy", p, &pol.clean_pod_policy) &&
        pol.clean_pod_policy != "Running" && pol.clean_pod_policy != "All" &&
        pol.clean_pod_policy != "None")
      r.Error(p + ".cleanPodPolicy",
              "must be one of Running, All, None; got '" + pol.clean_pod_policy + "'");
    r.Get(rp, "suspend", p, &pol.suspend);
    r.Int(rp, "flushTimeoutSeconds", p, 1, 86400, &pol.flush_timeout_seconds);
    if (r.Get(rp, "managedBy", p, &pol.managed_by)) check_manager(p + ".managedBy", pol.managed_by);
    const YAML::Node sp = rp["schedulingPolicy"];
    const std::string spp = p + ".schedulingPolicy";
    if (r.Map(sp, spp, {"coscheduling", "gang", "scheduleTimeoutSeconds"}) && sp) {
      r.Get(sp, "coscheduling", spp, &pol.scheduling.coscheduling);
      r.Get(sp, "gang", spp, &pol.scheduling.gang);
      r.Int(sp, "scheduleTimeoutSeconds", spp, 1, 86400, &pol.scheduling.schedule_timeout_seconds);
      if (pol.scheduling.coscheduling && pol.scheduling.gang)
        r.Error(spp + ".gang",
                "and coscheduling are two gang schedulers; give one of them (gang: Kubernetes' "
                "own, coscheduling: the scheduler-plugins plugin)");
    }
  }
  // spec.managedBy, where Job and JobSet keep it (and MultiKueue looks): the same as
  // spec.runPolicy.managedBy; where both are given they must agree.
  std::string manager;
  if (r.Get(spec, "managedBy", "spec", &manager)) {
    check_manager("spec.managedBy", manager);
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

void CheckShapes(Reader& r, const ModelSpec& m) {
  if (m.input.size() <= 0 || m.layers.empty()) return;
  auto shapes = InferShapes(m);
  if (!shapes.ok()) {
    r.Error("spec.model", shapes.status().message());
    return;
  }
  int64_t params = 0;
  for (const auto& l : *shapes) params += l.weights + l.biases;
  if (params > kMaxParameters)
    r.Error("spec.model", "has " + std::to_string(params) + " parameters; at most " +
                              std::to_string(kMaxParameters) + " (4 GB of floats in every copy)");
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

double LearningRateAt(const TrainingSpec& t, int epoch) {
  double lr = t.learning_rate;
  switch (t.schedule.type) {
    case LearningRateSchedule::Type::kExponential:
      lr *= std::pow(t.learning_rate_decay, epoch);
      break;
    case LearningRateSchedule::Type::kStep:
      lr *= std::pow(t.schedule.factor, epoch / std::max(1, t.schedule.every_epochs));
      break;
    case LearningRateSchedule::Type::kCosine: {
      // Half a cosine from learning_rate at epoch 0 towards final x learning_rate after the
      // last epoch, which still trains at a rate above the final one.
      const double done = double(epoch) / std::max(1, t.epochs);
      lr *= t.schedule.final + (1 - t.schedule.final) * 0.5 * (1 + std::cos(M_PI * done));
      break;
    }
  }
  if (epoch < t.warmup_epochs) lr *= double(epoch + 1) / double(t.warmup_epochs + 1);
  return lr;
}

const char* LayerTypeName(LayerType t) {
  switch (t) {
    case LayerType::kConv:
      return "conv";
    case LayerType::kMaxPool:
      return "maxpool";
    case LayerType::kAvgPool:
      return "avgpool";
    case LayerType::kDense:
      return "dense";
    case LayerType::kSoftmax:
      return "softmax";
    case LayerType::kDropout:
      return "dropout";
  }
  return "?";
}

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kNone:
      return "none";
    case Activation::kTanh:
      return "tanh";
    case Activation::kRelu:
      return "relu";
    case Activation::kSigmoid:
      return "sigmoid";
    case Activation::kLeakyRelu:
      return "leakyRelu";
  }
  return "?";
}

StatusOr<std::vector<LayerShape>> InferShapes(const ModelSpec& model) {
  std::vector<LayerShape> out;
  Shape cur = model.input;
  if (cur.channels < 1 || cur.height < 1 || cur.width < 1)
    return InvalidArgumentError("input: every dimension must be > 0");
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const LayerSpec& l = model.layers[i];
    const std::string p = "layers[" + std::to_string(i) + "]";
    const bool bad =
        (l.type == LayerType::kConv &&
         (l.maps < 1 || l.kernel < 1 || l.stride < 1 || l.padding < 0)) ||
        ((l.type == LayerType::kMaxPool || l.type == LayerType::kAvgPool) && l.size < 1) ||
        (l.type == LayerType::kDense && l.units < 1) ||
        (l.type == LayerType::kSoftmax && l.classes < 1);
    if (bad) return InvalidArgumentError(p + ": sizes must be positive");
    LayerShape s;
    s.in = cur;
    switch (l.type) {
      case LayerType::kConv: {
        int h = (cur.height + 2 * l.padding - l.kernel) / l.stride + 1;
        int w = (cur.width + 2 * l.padding - l.kernel) / l.stride + 1;
        if (cur.height + 2 * l.padding < l.kernel || cur.width + 2 * l.padding < l.kernel)
          return InvalidArgumentError(p + ".kernel: " + std::to_string(l.kernel) +
                                      " is larger than its input " + std::to_string(cur.height) +
                                      "x" + std::to_string(cur.width));
        s.out = {l.maps, h, w};
        s.weights = int64_t{l.maps} * cur.channels * l.kernel * l.kernel;
        s.biases = l.maps;
        break;
      }
      case LayerType::kMaxPool:
      case LayerType::kAvgPool: {
        if (cur.height < l.size || cur.width < l.size)
          return InvalidArgumentError(p + ".size: " + std::to_string(l.size) +
                                      " is larger than its input " + std::to_string(cur.height) +
                                      "x" + std::to_string(cur.width));
        s.out = {cur.channels, cur.height / l.size, cur.width / l.size};
        break;
      }
      case LayerType::kDropout:
        if (!(l.rate >= 0 && l.rate < 1))
          return InvalidArgumentError(p + ".rate: must be in [0, 1)");
        s.out = cur;
        break;
      case LayerType::kDense:
        s.out = {l.units, 1, 1};
        s.weights = int64_t{l.units} * cur.size();
        s.biases = l.units;
        break;
      case LayerType::kSoftmax:
        s.out = {l.classes, 1, 1};
        s.weights = int64_t{l.classes} * cur.size();
        s.biases = l.classes;
        break;
    }
    if (s.weights > (int64_t{1} << 31))
      return InvalidArgumentError(p + ": " + std::to_string(s.weights) +
                                  " weights is more than this version supports (2^31)");
    out.push_back(s);
    cur = s.out;
  }
  return out;
}

int NumClasses(const ModelSpec& model) {
  return model.layers.empty() ? 0 : model.layers.back().classes;
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
    if (job->roles.parameter_server.copies > 1) {
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

}  // namespace adam::spec
