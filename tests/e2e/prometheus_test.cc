// End to end with Debian's Prometheus server: a local `adam run` keeps a file_sd target list
// (--prometheus-sd); Prometheus, started here on loopback with a generated scrape config, scrapes
// every role, and its query API shows the key series exist and move.
#include <cpprest/http_client.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/ports.h"
#include "testing/child.h"
#include "testing/synthetic.h"
#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam {
namespace {

// The result vector of an instant query (empty on any error).
nlohmann::json Query(const std::string& base, const std::string& promql) {
  try {
    web::http::client::http_client client(base);
    web::uri_builder b("/api/v1/query");
    b.append_query("query", promql);
    auto resp = client.request(web::http::methods::GET, b.to_string()).get();
    if (resp.status_code() != 200) return nlohmann::json::array();
    const std::vector<unsigned char> body = resp.extract_vector().get();
    auto j = nlohmann::json::parse(std::string(body.begin(), body.end()));
    return j["data"]["result"];
  } catch (const std::exception&) {
    return nlohmann::json::array();
  }
}

TEST(Prometheus, ScrapesEveryRoleOfALocalRunAndTheSeriesMove) {
  const std::string prometheus = "/usr/bin/prometheus";
  if (!std::ifstream(prometheus).good())
    GTEST_SKIP() << "prometheus is not installed (scripts/install-deps.sh installs it)";
  testing::TmpDir dir;
  testing::WriteSynthetic(dir.File("train"), 1200, 1);
  testing::WriteSynthetic(dir.File("test"), 300, 2);
  const std::string job =
      testing::Manifest(dir, "epochs: 1000, learningRate: 0.01, pushEvery: 50",
                        "parameterServer: {replicas: 2}, trainer: {replicas: 2}");
  const std::string targets = dir.File("targets.json");
  std::ofstream(targets) << "[]\n";
  const int port = FreePort();
  ASSERT_GT(port, 0);
  std::ofstream(dir.File("prometheus.yml"))
      << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
      << "scrape_configs:\n"
      << "  - job_name: adam\n"
      << "    file_sd_configs: [{files: ['" << targets << "'], refresh_interval: 1s}]\n";
  testing::Child prom(
      prometheus,
      {"--config.file=" + dir.File("prometheus.yml"), "--storage.tsdb.path=" + dir.File("tsdb"),
       "--web.listen-address=127.0.0.1:" + std::to_string(port)},
      dir.File("prometheus.log"));
  testing::Child run({"run", job, "--quiet", "--prometheus-sd", targets}, dir.File("run.log"));
  const std::string base = "http://127.0.0.1:" + std::to_string(port);

  // Every role is a target, and up.
  ASSERT_TRUE(testing::Eventually(
      [&] {
        return Query(base, "sum(up{job=\"adam\"})").dump().find("\"5\"") != std::string::npos;
      },
      std::chrono::seconds(60)))
      << "targets: " << testing::ReadText(targets) << "\nprometheus log:\n"
      << testing::ReadText(dir.File("prometheus.log")) << "\nrun log:\n"
      << testing::ReadText(dir.File("run.log"));
  for (const char* role : {"trainer", "ps", "data-server"})
    EXPECT_FALSE(Query(base, std::string("up{role=\"") + role + "\"} == 1").empty()) << role;

  // The key series move.
  for (const char* q :
       {"rate(adam_trainer_images_total[30s]) > 0", "rate(adam_ps_pushes_total[30s]) > 0",
        "rate(adam_data_images_served_total[30s]) > 0", "adam_trainer_epoch >= 1",
        "rate(adam_trainer_push_seconds_count[30s]) > 0", "adam_data_order_hits_total > 0"}) {
    EXPECT_TRUE(
        testing::Eventually([&] { return !Query(base, q).empty(); }, std::chrono::seconds(60)))
        << q;
  }
  // Both trainers report, each labelled with its instance.
  EXPECT_EQ(Query(base, "adam_trainer_images_total").size(), 2u);
}

}  // namespace
}  // namespace adam
