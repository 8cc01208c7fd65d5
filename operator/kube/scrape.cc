// Prometheus text parsing and the HTTP metrics source.
#include "kube/scrape.h"

#include <cpprest/http_client.h>

#include <cmath>
#include <cstdlib>

namespace adam::kube {

StatusOr<std::map<std::string, double>> ParsePrometheusText(const std::string& text) {
  std::map<std::string, double> out;
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&](const std::string& what) {
      return DataLossError("metrics line " + std::to_string(line_no) + ": " + what);
    };
    // The series: a name, then optionally {labels} (label values may hold spaces and braces).
    size_t i = 0;
    while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) || line[i] == '_' ||
                               line[i] == ':'))
      ++i;
    if (i == 0) return bad("expected a metric name");
    if (i < line.size() && line[i] == '{') {
      bool quoted = false;
      ++i;
      while (i < line.size() && (quoted || line[i] != '}')) {
        if (line[i] == '\\' && quoted) ++i;
        else if (line[i] == '"') quoted = !quoted;
        ++i;
      }
      if (i >= line.size()) return bad("unterminated label set");
      ++i;
    }
    const std::string series = line.substr(0, i);
    while (i < line.size() && line[i] == ' ') ++i;
    if (i >= line.size()) return bad("no value for " + series.substr(0, 64));
    const size_t vend = line.find(' ', i);
    const std::string value = line.substr(i, vend == std::string::npos ? std::string::npos : vend - i);
    double v = 0;
    if (value == "+Inf") {
      v = INFINITY;
    } else if (value == "-Inf") {
      v = -INFINITY;
    } else if (value == "NaN") {
      v = NAN;
    } else {
      char* e = nullptr;
      v = std::strtod(value.c_str(), &e);
      if (value.empty() || *e != '\0') return bad("'" + value.substr(0, 32) + "' is not a number");
    }
    out[series] = v;
  }
  return out;
}

namespace {

class HttpMetricsSource : public MetricsSource {
 public:
  StatusOr<std::map<std::string, double>> Scrape(const std::string& host, int port) override {
    const std::string url = "http://" + host + ":" + std::to_string(port);
    try {
      web::http::client::http_client_config cc;
      cc.set_timeout(std::chrono::seconds(1));
      web::http::client::http_client client(url, cc);
      auto resp = client.request(web::http::methods::GET, "/metrics").get();
      if (resp.status_code() != 200)
        return UnavailableError(url + "/metrics: HTTP " + std::to_string(resp.status_code()));
      const std::vector<unsigned char> body = resp.extract_vector().get();  // bytes: see http_client.cc
      return ParsePrometheusText(std::string(body.begin(), body.end()));
    } catch (const std::exception& e) {
      return UnavailableError(url + "/metrics: " + e.what());
    }
  }
};

}  // namespace

std::unique_ptr<MetricsSource> NewHttpMetricsSource() { return std::make_unique<HttpMetricsSource>(); }

}  // namespace adam::kube
