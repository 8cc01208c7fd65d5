// The data, model, training and output sections of an AdamJob manifest: read with every rule,
// and what is derived from them (shapes, class count, the learning rate of an epoch).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>

#include "spec/adamjob.h"
#include "spec/manifest_reader.h"
#include "spec/yaml_json.h"

namespace adam::spec {
namespace manifest {
namespace {

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

}  // namespace

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

namespace {

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

// One entry of spec.model.layers (`l`, at `p`) into `spec`; `last`: it is the list's last. False
// when it has no known type (nothing to add).
bool ReadLayer(Reader& r, const YAML::Node& l, const std::string& p, bool last, LayerSpec* spec) {
  std::string type;
  if (!l.IsMap()) {
    r.Error(p, "must be a mapping");
    return false;
  }
  if (!r.Get(l, "type", p, &type, true)) return false;
  if (type == "conv") {
    spec->type = LayerType::kConv;
    r.Map(l, p, {"type", "maps", "kernel", "stride", "padding", "activation"});
    r.Int(l, "maps", p, 1, 65536, &spec->maps, true);
    r.Int(l, "kernel", p, 1, 1024, &spec->kernel, true);
    r.Int(l, "stride", p, 1, 1024, &spec->stride);
    r.Int(l, "padding", p, 0, 1024, &spec->padding);
    spec->activation = ReadActivation(r, l, p);
  } else if (type == "maxpool" || type == "avgpool") {
    spec->type = type == "maxpool" ? LayerType::kMaxPool : LayerType::kAvgPool;
    r.Map(l, p, {"type", "size"});
    r.Int(l, "size", p, 1, 1024, &spec->size, true);
  } else if (type == "dropout") {
    spec->type = LayerType::kDropout;
    r.Map(l, p, {"type", "rate"});
    if (r.Get(l, "rate", p, &spec->rate) && !(spec->rate >= 0 && spec->rate < 1))
      r.Error(p + ".rate", "must be in [0, 1), got " + std::to_string(spec->rate));
  } else if (type == "dense") {
    spec->type = LayerType::kDense;
    r.Map(l, p, {"type", "units", "activation"});
    r.Int(l, "units", p, 1, 1 << 20, &spec->units, true);
    spec->activation = ReadActivation(r, l, p);
  } else if (type == "softmax") {
    spec->type = LayerType::kSoftmax;
    r.Map(l, p, {"type", "classes"});
    r.Int(l, "classes", p, 2, 65536, &spec->classes, true);
    spec->activation = Activation::kNone;
    if (!last) r.Error(p + ".type", "softmax must be the last layer");
  } else {
    r.Error(p + ".type",
            "must be one of conv, maxpool, avgpool, dense, dropout, softmax; got '" + type + "'");
    return false;
  }
  return true;
}

}  // namespace

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
    LayerSpec spec;
    if (ReadLayer(r, layers[i], lp + "[" + std::to_string(i) + "]", i + 1 == layers.size(), &spec))
      m->layers.push_back(spec);
  }
  if (!m->layers.empty() && m->layers.back().type != LayerType::kSoftmax)
    r.Error(lp, "the last layer must be softmax");
}

namespace {

// The field a momentum or weight-decay conflict is reported under.
const char* Stepper(const TrainingSpec& t) { return t.momentum > 0 ? "momentum" : "weightDecay"; }

// spec.training.learningRateSchedule: step or cosine, in place of learningRateDecay.
void ReadSchedule(Reader& r, const YAML::Node& n, const std::string& p, TrainingSpec* t) {
  if (const YAML::Node s = n["learningRateSchedule"]; s && !s.IsNull()) {
    const std::string sp = p + ".learningRateSchedule";
    if (n["learningRateDecay"]) r.Error(sp, "replaces learningRateDecay; give one of them");
    std::string type;
    if (r.Map(s, sp, {"type", "everyEpochs", "factor", "final", "per"}) &&
        r.Get(s, "type", sp, &type, true)) {
      std::string per = "epoch";
      if (r.Get(s, "per", sp, &per) && per != "epoch" && per != "step")
        r.Error(sp + ".per", "must be one of epoch, step; got '" + per + "'");
      t->schedule.per_step = per == "step";
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

}  // namespace

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

}  // namespace manifest

double LearningRateAt(const TrainingSpec& t, int epoch, double fraction) {
  // Where training is, in epochs: whole ones unless the schedule moves per step.
  const double at = epoch + (t.schedule.per_step ? std::clamp(fraction, 0.0, 1.0) : 0.0);
  double lr = t.learning_rate;
  switch (t.schedule.type) {
    case LearningRateSchedule::Type::kExponential:
      lr *= std::pow(t.learning_rate_decay, at);
      break;
    case LearningRateSchedule::Type::kStep:  // drops at whole epochs, per step or not
      lr *= std::pow(t.schedule.factor, std::floor(at / std::max(1, t.schedule.every_epochs)));
      break;
    case LearningRateSchedule::Type::kCosine: {
      // Half a cosine from learning_rate at epoch 0 towards final x learning_rate after the
      // last epoch, which still trains at a rate above the final one.
      const double done = at / std::max(1, t.epochs);
      lr *= t.schedule.final + (1 - t.schedule.final) * 0.5 * (1 + std::cos(M_PI * done));
      break;
    }
  }
  // The warmup ramp: (e + 1) / (W + 1) of the rate in epoch e < W, or rising linearly through
  // those values to the whole rate at epoch W when per step.
  if (at < t.warmup_epochs) lr *= (at + 1) / double(t.warmup_epochs + 1);
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

namespace {

// The shape of layer `l` (named `p` in errors) on input `cur`.
StatusOr<LayerShape> ShapeOf(const LayerSpec& l, const Shape& cur, const std::string& p) {
  const bool bad =
      (l.type == LayerType::kConv &&
       (l.maps < 1 || l.kernel < 1 || l.stride < 1 || l.padding < 0)) ||
      ((l.type == LayerType::kMaxPool || l.type == LayerType::kAvgPool) && l.size < 1) ||
      (l.type == LayerType::kDense && l.units < 1) ||
      (l.type == LayerType::kSoftmax && l.classes < 1);
  if (bad) return InvalidArgumentError(p + ": sizes must be positive");
  const std::string input = std::to_string(cur.height) + "x" + std::to_string(cur.width);
  LayerShape s;
  s.in = cur;
  switch (l.type) {
    case LayerType::kConv: {
      if (cur.height + 2 * l.padding < l.kernel || cur.width + 2 * l.padding < l.kernel)
        return InvalidArgumentError(p + ".kernel: " + std::to_string(l.kernel) +
                                    " is larger than its input " + input);
      s.out = {l.maps, (cur.height + 2 * l.padding - l.kernel) / l.stride + 1,
               (cur.width + 2 * l.padding - l.kernel) / l.stride + 1};
      s.weights = int64_t{l.maps} * cur.channels * l.kernel * l.kernel;
      s.biases = l.maps;
      break;
    }
    case LayerType::kMaxPool:
    case LayerType::kAvgPool:
      if (cur.height < l.size || cur.width < l.size)
        return InvalidArgumentError(p + ".size: " + std::to_string(l.size) +
                                    " is larger than its input " + input);
      s.out = {cur.channels, cur.height / l.size, cur.width / l.size};
      break;
    case LayerType::kDropout:
      if (!(l.rate >= 0 && l.rate < 1)) return InvalidArgumentError(p + ".rate: must be in [0, 1)");
      s.out = cur;
      break;
    case LayerType::kDense:
    case LayerType::kSoftmax: {
      const int units = l.type == LayerType::kDense ? l.units : l.classes;
      s.out = {units, 1, 1};
      s.weights = int64_t{units} * cur.size();
      s.biases = units;
      break;
    }
  }
  if (s.weights > (int64_t{1} << 31))
    return InvalidArgumentError(p + ": " + std::to_string(s.weights) +
                                " weights is more than this version supports (2^31)");
  return s;
}

}  // namespace

StatusOr<std::vector<LayerShape>> InferShapes(const ModelSpec& model) {
  std::vector<LayerShape> out;
  Shape cur = model.input;
  if (cur.channels < 1 || cur.height < 1 || cur.width < 1)
    return InvalidArgumentError("input: every dimension must be > 0");
  for (size_t i = 0; i < model.layers.size(); ++i) {
    ADAM_ASSIGN_OR_RETURN(LayerShape s,
                          ShapeOf(model.layers[i], cur, "layers[" + std::to_string(i) + "]"));
    out.push_back(s);
    cur = s.out;
  }
  return out;
}

int NumClasses(const ModelSpec& model) {
  return model.layers.empty() ? 0 : model.layers.back().classes;
}

bool ControllerOwnsShards(const AdamJob& job) { return job.roles.parameter_server.copies > 1; }

Status CheckControllerFlag(const AdamJob& job, bool controller_given) {
  if (controller_given == ControllerOwnsShards(job)) return OkStatus();
  const std::string copies = std::to_string(job.roles.parameter_server.copies);
  return InvalidArgumentError(
      controller_given ? "--controller: spec.roles.parameterServer.copies is " + copies +
                             ", so no controller owns this job's shard map"
                       : "spec.roles.parameterServer.copies is " + copies +
                             ": a controller owns the shard map, and --controller must name its "
                             "members");
}

}  // namespace adam::spec
