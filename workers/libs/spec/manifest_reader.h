// The manifest reader's parts shared by its two files (adamjob.cc: metadata, roles, failure
// rules, pod templates and the whole; adamjob_model.cc: data, model, training and output, and what
// is derived from them). Internal to the spec library.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "spec/adamjob.h"

namespace adam::spec::manifest {

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

inline constexpr int64_t kMaxInt = INT32_MAX;

// A part of the manifest passed through to Kubernetes, as JSON text (adamjob.cc).
std::string JsonText(const YAML::Node& n);

// spec.dataset, spec.model, spec.training (with spec.communication), spec.output: each read into
// its struct, every fault reported to `r` with its field path (adamjob_model.cc).
void ReadDataset(Reader& r, const YAML::Node& n, DatasetSpec* d);
void ReadModel(Reader& r, const YAML::Node& n, ModelSpec* m);
void ReadTraining(Reader& r, const YAML::Node& n, TrainingSpec* t);
void ReadOutput(Reader& r, const YAML::Node& n, int epochs, OutputSpec* o);
// The layers' shapes fit together and the parameters fit a copy.
void CheckShapes(Reader& r, const ModelSpec& m);

}  // namespace adam::spec::manifest
