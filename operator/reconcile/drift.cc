#include "reconcile/drift.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <utility>

#include "reconcile/render.h"

namespace adam::op {

namespace {

using Json = kube::Json;

// Labels and annotations, the generation annotation left out (the one the object was made at).
Json MetadataOnly(const Json& o) {
  const Json& md = o["metadata"];
  Json part = {
      {"apiVersion", o["apiVersion"]}, {"kind", o["kind"]}, {"metadata", {{"name", md["name"]}}}};
  if (md.contains("namespace")) part["metadata"]["namespace"] = md["namespace"];
  if (md.contains("labels")) part["metadata"]["labels"] = md["labels"];
  Json notes = md.value("annotations", Json::object());
  notes.erase(kGenerationAnnotation);
  if (!notes.empty()) part["metadata"]["annotations"] = notes;
  return part;
}

bool IsZero(const Json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_number() && v == 0) ||
         (v.is_string() && v.get<std::string>().empty()) ||
         ((v.is_object() || v.is_array()) && v.empty());
}

// "[name=adam]" for a list item with a name, "[3]" otherwise.
std::string ItemPath(const Json& item, size_t i) {
  if (item.is_object() && item.contains("name") && item["name"].is_string())
    return "[name=" + item["name"].get<std::string>() + "]";
  return "[" + std::to_string(i) + "]";
}

// A quantity may be given as a number or a string, and comes back in its canonical form.
bool AsQuantity(const Json& v, long double* value) {
  if (v.is_number()) return QuantityValue(v.dump(), value);
  return v.is_string() && QuantityValue(v.get<std::string>(), value);
}

bool SameScalar(const Json& want, const Json& live) {
  if (want == live) return true;
  long double a = 0, b = 0;
  if (!AsQuantity(want, &a) || !AsQuantity(live, &b)) return false;
  return std::fabs(a - b) <= 1e-9L * std::max(std::fabs(a), std::fabs(b));
}

std::string Differs(const Json& want, const Json& live, const std::string& at) {
  if (want.is_object()) {
    if (!live.is_object()) return IsZero(want) && live.is_null() ? "" : at;
    for (const auto& [k, v] : want.items()) {
      // A list's items come without apiVersion and kind: the object's identity, not its content.
      if (at.empty() && (k == "apiVersion" || k == "kind")) continue;
      std::string here = at.empty() ? k : at + "." + k;
      if (!live.contains(k)) {
        if (IsZero(v)) continue;
        return here;
      }
      std::string d = Differs(v, live[k], here);
      if (!d.empty()) return d;
    }
    return "";
  }
  if (want.is_array()) {
    if (!live.is_array()) return IsZero(want) && live.is_null() ? "" : at;
    if (want.size() != live.size()) return at;
    for (size_t i = 0; i < want.size(); ++i) {
      std::string d = Differs(want[i], live[i], at + ItemPath(want[i], i));
      if (!d.empty()) return d;
    }
    return "";
  }
  return SameScalar(want, live) ? "" : at;
}

}  // namespace

Json ApplyConfiguration(const Json& o) {
  const std::string kind = o.value("kind", "");
  if (kind == "Pod" || kind == "PersistentVolumeClaim") return MetadataOnly(o);
  Json part = o;
  part.erase("status");
  if (kind == "StatefulSet") {
    Json spec = Json::object();
    for (const char* f :
         {"replicas", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy"})
      if (o["spec"].contains(f)) spec[f] = o["spec"][f];
    part["spec"] = std::move(spec);
  }
  return part;
}

std::string FirstDifference(const Json& want, const Json& live) { return Differs(want, live, ""); }

Json WrittenOver(const Json& live, const Json& want) {
  Json out = live;
  for (const auto& [k, v] : want.items())
    out[k] = v.is_object() && out.contains(k) && out[k].is_object() ? WrittenOver(out[k], v) : v;
  return out;
}

bool QuantityValue(const std::string& q, long double* value) {
  size_t i = 0;
  const size_t n = q.size();
  bool negative = false;
  if (i < n && (q[i] == '+' || q[i] == '-')) negative = q[i++] == '-';
  const size_t start = i;
  long double v = 0;
  bool digits = false;
  while (i < n && std::isdigit(static_cast<unsigned char>(q[i]))) {
    v = v * 10 + (q[i++] - '0');
    digits = true;
  }
  if (i < n && q[i] == '.') {
    ++i;
    long double scale = 0.1L;
    while (i < n && std::isdigit(static_cast<unsigned char>(q[i]))) {
      v += scale * (q[i++] - '0');
      scale /= 10;
      digits = true;
    }
  }
  if (!digits || i == start) return false;
  const std::string suffix = q.substr(i);
  static const std::pair<const char*, long double> kSuffixes[] = {
      {"", 1},         {"n", 1e-9L},    {"u", 1e-6L},    {"m", 1e-3L},
      {"k", 1e3L},     {"M", 1e6L},     {"G", 1e9L},     {"T", 1e12L},
      {"P", 1e15L},    {"E", 1e18L},    {"Ki", 0x1p10L}, {"Mi", 0x1p20L},
      {"Gi", 0x1p30L}, {"Ti", 0x1p40L}, {"Pi", 0x1p50L}, {"Ei", 0x1p60L}};
  long double factor = 0;
  for (const auto& [s, f] : kSuffixes)
    if (suffix == s) factor = f;
  if (factor == 0 && suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    size_t j = 1;
    bool minus = false;
    if (suffix[j] == '+' || suffix[j] == '-') minus = suffix[j++] == '-';
    if (j == suffix.size() || suffix.size() - j > 4) return false;
    int exp = 0;
    for (; j < suffix.size(); ++j) {
      if (!std::isdigit(static_cast<unsigned char>(suffix[j]))) return false;
      exp = exp * 10 + (suffix[j] - '0');
    }
    factor = std::pow(10.0L, minus ? -exp : exp);
  }
  if (factor == 0) return false;
  *value = (negative ? -v : v) * factor;
  return true;
}

}  // namespace adam::op
