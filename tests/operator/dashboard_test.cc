// The Grafana dashboard (charts/adam/dashboards/adam.json, also docs/grafana-dashboard.json):
// panels for throughput, accuracy and loss, parameter-server health and failovers, each query
// naming only metrics that exist (docs/reference/metrics.md lists every one). The chart's ConfigMap
// that carries it is checked by `make k8s-e2e` with the real helm.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "testing/wait.h"

namespace adam::testing {
namespace {

using Json = nlohmann::json;

TEST(Dashboard, PanelsQueryMetricsThatExist) {
  const std::string root = ADAM_SOURCE_DIR;
  const Json dash = Json::parse(ReadText(root + "/charts/adam/dashboards/adam.json"));
  EXPECT_EQ(Json::parse(ReadText(root + "/docs/grafana-dashboard.json")), dash);
  const std::string metrics_doc = ReadText(root + "/docs/reference/metrics.md");
  const std::regex name("([a-z_:]+)(\\{|\\[| |\\)|$)");
  const std::set<std::string> keywords = {"sum", "by",       "rate", "max",
                                          "avg", "increase", "time", "up"};
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
      const std::string bare =
          std::regex_replace(std::regex_replace(expr, std::regex("\\{[^}]*\\}"), "{}"),
                             std::regex("by \\([^)]*\\)"), "");
      for (auto it = std::sregex_iterator(bare.begin(), bare.end(), name);
           it != std::sregex_iterator(); ++it) {
        std::string n = (*it)[1];
        if (keywords.count(n) || n.size() < 4) continue;
        // A histogram's series: NAME_bucket, NAME_sum, NAME_count.
        n = std::regex_replace(n, std::regex("_(bucket|sum|count)$"), "");
        EXPECT_NE(metrics_doc.find("`" + n), std::string::npos)
            << p["title"] << ": " << n << " in " << expr;
      }
    }
  }
  EXPECT_GE(queries, 15);
  for (const char* t :
       {"Images per second", "Test accuracy", "Training loss", "Updates applied per second",
        "Checkpoint age", "Failovers", "Under-replicated shards", "Reconciles per second"})
    EXPECT_TRUE(titles.count(t)) << t;
}

}  // namespace
}  // namespace adam::testing
