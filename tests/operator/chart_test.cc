// The Helm chart without helm: its templates rendered by a small interpreter of the template
// subset they use (values, release and chart fields, if/else/end, default, quote, toYaml,
// nindent, whitespace trimming), then parsed as YAML and checked: the objects and their
// placement, RBAC that covers every call the operator makes and nothing wider, and the CRD.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "operator/openapi.h"
#include "reconcile/render.h"
#include "testing/wait.h"

namespace adam::testing {
namespace {

using Json = nlohmann::json;

std::string Read(const std::string& path) { return testing::ReadText(path); }

const std::string kChart = std::string(ADAM_SOURCE_DIR) + "/charts/adam";

struct Context {
  Json values;
  std::string release = "adam";
  std::string name_space = "adam-system";
  Json chart;
};

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\n");
  const size_t b = s.find_last_not_of(" \t\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

Json Lookup(const Context& c, const std::string& path) {
  if (path.rfind(".Values.", 0) == 0) {
    Json v = c.values;
    std::stringstream ss(path.substr(8));
    for (std::string k; std::getline(ss, k, '.');) {
      if (!v.is_object() || !v.contains(k)) return nullptr;
      v = v[k];
    }
    return v;
  }
  if (path == ".Release.Name") return c.release;
  if (path == ".Release.Namespace") return c.name_space;
  if (path == ".Chart.AppVersion") return c.chart["appVersion"];
  if (path == ".Chart.Name") return c.chart["name"];
  if (path.size() > 1 && path.front() == '"' && path.back() == '"') return path.substr(1, path.size() - 2);
  if (path.rfind(".Files.Get ", 0) == 0) {
    const std::string rel = Trim(path.substr(11));
    return Read(kChart + "/" + rel.substr(1, rel.size() - 2));
  }
  ADD_FAILURE() << "template: unknown term " << path;
  return nullptr;
}

bool Truthy(const Json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) return !v.get<std::string>().empty();
  if (v.is_number()) return v.get<double>() != 0;
  return !v.empty();
}

std::string Text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

std::string ToYamlText(const Json& v) {
  if (v.is_object() && v.empty()) return "{}";
  if (v.is_array() && v.empty()) return "[]";
  std::string y = op::ToYaml(op::Json::parse(v.dump()));
  while (!y.empty() && y.back() == '\n') y.pop_back();
  return y;
}

// Evaluates a pipeline: TERM | fn args | fn args ...
Json Pipeline(const Context& c, const std::string& expr) {
  std::vector<std::string> stages;
  std::stringstream ss(expr);
  for (std::string s; std::getline(ss, s, '|');) stages.push_back(Trim(s));
  Json v;
  std::string first = stages[0];
  if (first.rfind("toYaml ", 0) == 0) {
    v = ToYamlText(Lookup(c, Trim(first.substr(7))));
  } else if (first.rfind("not ", 0) == 0) {
    v = !Truthy(Lookup(c, Trim(first.substr(4))));
  } else {
    v = Lookup(c, first);
  }
  for (size_t i = 1; i < stages.size(); ++i) {
    const std::string& st = stages[i];
    if (st.rfind("default ", 0) == 0) {
      if (!Truthy(v)) v = Lookup(c, Trim(st.substr(8)));
    } else if (st == "quote") {
      std::string q = "\"";
      q += Text(v);
      q += '"';
      v = q;
    } else if (st.rfind("indent ", 0) == 0 || st.rfind("nindent ", 0) == 0) {
      // indent N: every line indented; nindent N: the same after a newline.
      const bool leading_newline = st[0] == 'n';
      const int n = std::stoi(st.substr(leading_newline ? 8 : 7));
      std::string out, line;
      std::stringstream ls(Text(v));
      while (std::getline(ls, line)) {
        if (!out.empty() || leading_newline) out += '\n';
        out.append(size_t(n), ' ');
        out += line;
      }
      v = out;
    } else {
      ADD_FAILURE() << "template: unknown function " << st;
    }
  }
  return v;
}

std::string RenderTemplate(const std::string& tpl, const Context& c) {
  std::string out;
  std::vector<bool> emit = {true};      // per nesting level
  std::vector<bool> taken;              // whether the if branch ran
  size_t pos = 0;
  while (pos < tpl.size()) {
    const size_t open = tpl.find("{{", pos);
    std::string text = tpl.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (open == std::string::npos) {
      if (emit.back()) out += text;
      break;
    }
    const size_t close = tpl.find("}}", open);
    EXPECT_NE(close, std::string::npos) << "unclosed action";
    std::string action = tpl.substr(open + 2, close - open - 2);
    const bool trim_left = !action.empty() && action[0] == '-';
    const bool trim_right = !action.empty() && action.back() == '-';
    if (trim_left) {
      action = action.substr(1);
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    }
    if (trim_right) action.pop_back();
    if (emit.back()) out += text;
    pos = close + 2;
    if (trim_right)
      while (pos < tpl.size() && std::isspace(static_cast<unsigned char>(tpl[pos]))) ++pos;
    action = Trim(action);
    if (action.rfind("if ", 0) == 0) {
      const bool cond = emit.back() && Truthy(Pipeline(c, action.substr(3)));
      taken.push_back(cond);
      emit.push_back(cond);
    } else if (action == "else") {
      const bool parent = emit[emit.size() - 2];
      emit.back() = parent && !taken.back();
    } else if (action == "end") {
      emit.pop_back();
      taken.pop_back();
    } else if (emit.back()) {
      out += Text(Pipeline(c, action));
    }
  }
  EXPECT_EQ(emit.size(), 1u) << "unbalanced if/end";
  return out;
}

std::vector<Json> RenderChart(const Json& overrides = Json::object()) {
  Context c;
  c.values = YamlToJson(Read(kChart + "/values.yaml"));
  c.values.merge_patch(overrides);
  c.chart = YamlToJson(Read(kChart + "/Chart.yaml"));
  std::vector<Json> out;
  for (const auto& e : std::filesystem::directory_iterator(kChart + "/templates")) {
    if (e.path().extension() != ".yaml") continue;
    const std::string text = RenderTemplate(Read(e.path()), c);
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t sep = text.find("\n---", pos);
      const std::string doc = text.substr(pos, sep == std::string::npos ? std::string::npos : sep - pos);
      pos = sep == std::string::npos ? text.size() + 1 : sep + 4;
      Json j;
      try {
        j = YamlToJson(doc);
      } catch (const std::exception& ex) {
        ADD_FAILURE() << e.path() << ": not YAML after rendering: " << ex.what() << "\n" << doc;
        continue;
      }
      if (!j.is_null()) out.push_back(j);
    }
  }
  return out;
}

const Json* Find(const std::vector<Json>& objects, const std::string& kind) {
  for (const Json& o : objects)
    if (o["kind"] == kind) return &o;
  return nullptr;
}

TEST(Chart, DefaultsRenderTheOperatorAndClusterWideRbac) {
  const auto objects = RenderChart();
  std::multiset<std::string> kinds;
  for (const Json& o : objects) kinds.insert(o["kind"].get<std::string>());
  for (const char* k : {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                        "Deployment", "Service", "NetworkPolicy", "ConfigMap"})
    EXPECT_EQ(kinds.count(k), 1u) << k;
  EXPECT_EQ(kinds.count("ServiceMonitor"), 0u);
  const Json& dep = *Find(objects, "Deployment");
  EXPECT_EQ(dep["spec"]["replicas"], 2);
  const Json& pod = dep["spec"]["template"]["spec"];
  EXPECT_EQ(pod["serviceAccountName"], "adam");
  EXPECT_EQ(pod["securityContext"]["runAsNonRoot"], true);
  const Json& ctr = pod["containers"][0];
  EXPECT_EQ(ctr["image"], "adam:0.1.0");
  EXPECT_EQ(ctr["securityContext"]["readOnlyRootFilesystem"], true);
  EXPECT_EQ(ctr["readinessProbe"]["httpGet"]["path"], "/readyz");
  EXPECT_EQ(ctr["livenessProbe"]["httpGet"]["path"], "/healthz");
  const std::string args = ctr["args"].dump();
  EXPECT_NE(args.find("--leader-elect=true"), std::string::npos);
  EXPECT_NE(args.find("--leader-election-namespace=adam-system"), std::string::npos);
  EXPECT_EQ(args.find("--namespace="), std::string::npos);
  EXPECT_NE(args.find("--certificate-days=365"), std::string::npos);
  // Every flag the chart passes is one `adam operator` takes.
  std::string help;
  if (FILE* p = popen(ADAM_BINARY " operator --help", "r")) {
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) help.append(buf, n);
    pclose(p);
  }
  ASSERT_NE(help.find("--kubeconfig"), std::string::npos) << help;
  for (const Json& a : ctr["args"]) {
    const std::string arg = a.get<std::string>();
    if (arg.rfind("--", 0) != 0) continue;
    // The whole flag, not a prefix of a longer one: help lists it followed by a space or comma.
    const std::string flag = arg.substr(0, arg.find('='));
    EXPECT_TRUE(help.find(flag + " ") != std::string::npos ||
                help.find(flag + ",") != std::string::npos) << arg;
  }
  EXPECT_EQ(dep["metadata"]["labels"]["app.kubernetes.io/version"], "0.1.0");
}

// Every (group, resource, verb) the operator's code calls must be allowed, and no rule may be
// wider than that: no wildcard, no verb the operator never uses.
TEST(Chart, RbacCoversEveryCallAndNothingMore) {
  const std::set<std::string> needed = {
      "adam.dev/adamjobs/get", "adam.dev/adamjobs/list", "adam.dev/adamjobs/watch",
      "adam.dev/adamjobs/update", "adam.dev/adamjobs/delete", "adam.dev/adamjobs/status/update",
      "adam.dev/adamjobs/finalizers/update",
      "/pods/list", "/pods/watch", "/pods/create", "/pods/delete", "/configmaps/list",
      "/configmaps/watch", "/configmaps/create", "/configmaps/update", "/services/list",
      "/services/watch", "/services/create", "/persistentvolumeclaims/list",
      "/persistentvolumeclaims/watch", "/persistentvolumeclaims/create", "apps/statefulsets/list",
      "apps/statefulsets/watch", "apps/statefulsets/create", "apps/statefulsets/update",
      "apps/statefulsets/delete", "/events/create", "/secrets/list", "/secrets/watch",
      "/secrets/create", "/secrets/update", "networking.k8s.io/networkpolicies/list",
      "networking.k8s.io/networkpolicies/watch", "networking.k8s.io/networkpolicies/create", "coordination.k8s.io/leases/get",
      "coordination.k8s.io/leases/create", "coordination.k8s.io/leases/update"};
  std::set<std::string> granted;
  for (const Json& o : RenderChart()) {
    if (o["kind"] != "ClusterRole" && o["kind"] != "Role") continue;
    for (const Json& rule : o["rules"])
      for (const Json& g : rule["apiGroups"])
        for (const Json& r : rule["resources"])
          for (const Json& v : rule["verbs"]) {
            EXPECT_NE(v, "*");
            EXPECT_NE(r, "*");
            granted.insert(g.get<std::string>() + "/" + r.get<std::string>() + "/" + v.get<std::string>());
          }
  }
  for (const auto& n : needed) EXPECT_TRUE(granted.count(n)) << "missing " << n;
  for (const auto& g : granted)
    if (!needed.count(g) && g.find("/get") == std::string::npos)  // reads of one object are harmless
      ADD_FAILURE() << "wider than needed: " << g;
}

TEST(Chart, OneNamespaceUsesARoleAndOptionalObjectsFollowValues) {
  const auto objects = RenderChart({{"watchNamespace", "ml"},
                                    {"metrics", {{"serviceMonitor", {{"enabled", true}}}}},
                                    {"networkPolicy", {{"enabled", false}}}});
  EXPECT_EQ(Find(objects, "ClusterRole"), nullptr);
  int roles = 0;
  for (const Json& o : objects)
    if (o["kind"] == "Role" && o["metadata"]["namespace"] == "ml") ++roles;
  EXPECT_EQ(roles, 1);
  EXPECT_NE(Find(objects, "ServiceMonitor"), nullptr);
  const Json* pm = Find(objects, "PodMonitor");
  ASSERT_NE(pm, nullptr);
  EXPECT_EQ(pm->at("spec")["selector"]["matchLabels"]["app.kubernetes.io/managed-by"], "adam-operator");
  EXPECT_EQ(Find(objects, "NetworkPolicy"), nullptr);
  EXPECT_NE(Find(objects, "Deployment")->dump().find("--namespace=ml"), std::string::npos);
}

// The Grafana dashboard: shipped in the chart as a sidecar ConfigMap (and linked from docs/), with
// panels for throughput, accuracy and loss, parameter-server health and failovers, each query
// naming only metrics that exist (docs/metrics.md lists every one).
TEST(Chart, DashboardPanelsQueryMetricsThatExist) {
  const auto objects = RenderChart();
  const Json* cm = nullptr;
  for (const Json& o : objects)
    if (o["kind"] == "ConfigMap" && o["metadata"]["name"] == "adam-dashboard") cm = &o;
  ASSERT_NE(cm, nullptr);
  EXPECT_EQ(cm->at("metadata")["labels"]["grafana_dashboard"], "1");
  const Json dash = Json::parse(cm->at("data")["adam.json"].get<std::string>());
  EXPECT_EQ(dash, Json::parse(Read(kChart + "/dashboards/adam.json")));
  EXPECT_EQ(Json::parse(Read(std::string(ADAM_SOURCE_DIR) + "/docs/grafana-dashboard.json")), dash);
  const std::string metrics_doc = Read(std::string(ADAM_SOURCE_DIR) + "/docs/metrics.md");
  const std::regex name("([a-z_:]+)(\\{|\\[| |\\)|$)");
  const std::set<std::string> keywords = {"sum", "by", "rate", "max", "avg", "increase", "time", "up"};
  std::set<std::string> titles;
  int queries = 0;
  for (const Json& p : dash["panels"]) {
    titles.insert(p["title"].get<std::string>());
    if (p["type"] == "row") continue;
    EXPECT_EQ(p["datasource"]["uid"], "${datasource}") << p["title"];
    for (const Json& t : p["targets"]) {
      ++queries;
      const std::string expr = t["expr"];
      // Label names inside {...} and (...) grouping lists are not metrics: drop them first.
      const std::string bare = std::regex_replace(
          std::regex_replace(expr, std::regex("\\{[^}]*\\}"), "{}"), std::regex("by \\([^)]*\\)"), "");
      for (auto it = std::sregex_iterator(bare.begin(), bare.end(), name); it != std::sregex_iterator(); ++it) {
        std::string n = (*it)[1];
        if (keywords.count(n) || n.size() < 4) continue;
        // A histogram's series: NAME_bucket, NAME_sum, NAME_count.
        n = std::regex_replace(n, std::regex("_(bucket|sum|count)$"), "");
        EXPECT_NE(metrics_doc.find("`" + n), std::string::npos) << p["title"] << ": " << n << " in " << expr;
      }
    }
  }
  EXPECT_GE(queries, 15);
  for (const char* t : {"Images per second", "Test accuracy", "Training loss", "Updates applied per second",
                        "Checkpoint age", "Failovers", "Under-replicated shards", "Reconciles per second"})
    EXPECT_TRUE(titles.count(t)) << t;
}

TEST(Chart, ShipsTheSameCrdAndParses) {
  EXPECT_EQ(Read(kChart + "/crds/adam.dev_adamjobs.yaml"),
            Read(std::string(ADAM_SOURCE_DIR) + "/crds/adam.dev_adamjobs.yaml"));
  const Json chart = YamlToJson(Read(kChart + "/Chart.yaml"));
  EXPECT_EQ(chart["apiVersion"], "v2");
  EXPECT_EQ(chart["name"], "adam");
  // Every value the templates read is documented in values.yaml (a typo renders empty).
  const std::regex ref("\\.Values\\.([A-Za-z.]+)");
  const Json values = YamlToJson(Read(kChart + "/values.yaml"));
  for (const auto& e : std::filesystem::directory_iterator(kChart + "/templates")) {
    const std::string t = Read(e.path());
    for (auto it = std::sregex_iterator(t.begin(), t.end(), ref); it != std::sregex_iterator(); ++it) {
      Json v = values;
      std::stringstream ss((*it)[1].str());
      for (std::string k; std::getline(ss, k, '.');) {
        ASSERT_TRUE(v.is_object() && v.contains(k)) << e.path() << ": .Values." << (*it)[1] << " is not in values.yaml";
        v = v[k];
      }
    }
  }
}

}  // namespace
}  // namespace adam::testing
