// Prometheus text parsing and the HTTP metrics source.
#include "kube/scrape.h"

#include <cpprest/http_client.h>

#include <algorithm>
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
    while (i < line.size() &&
           (std::isalnum(static_cast<unsigned char>(line[i])) || line[i] == '_' || line[i] == ':'))
      ++i;
    if (i == 0) return bad("expected a metric name");
    if (i < line.size() && line[i] == '{') {
      bool quoted = false;
      ++i;
      while (i < line.size() && (quoted || line[i] != '}')) {
        if (line[i] == '\\' && quoted)
          ++i;
        else if (line[i] == '"')
          quoted = !quoted;
        ++i;
      }
      if (i >= line.size()) return bad("unterminated label set");
      ++i;
    }
    const std::string series = line.substr(0, i);
    while (i < line.size() && line[i] == ' ') ++i;
    if (i >= line.size()) return bad("no value for " + series.substr(0, 64));
    const size_t vend = line.find(' ', i);
    const std::string value =
        line.substr(i, vend == std::string::npos ? std::string::npos : vend - i);
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
      const std::vector<unsigned char> body =
          resp.extract_vector().get();  // bytes: see http_client.cc
      return ParsePrometheusText(std::string(body.begin(), body.end()));
    } catch (const std::exception& e) {
      return UnavailableError(url + "/metrics: " + e.what());
    }
  }
};

}  // namespace

std::unique_ptr<MetricsSource> NewHttpMetricsSource() {
  return std::make_unique<HttpMetricsSource>();
}

MetricsCache::MetricsCache(MetricsSource* source, std::chrono::milliseconds period, int threads,
                           Clock* clock)
    : source_(source), clock_(clock), period_(period) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Run(); });
}

MetricsCache::~MetricsCache() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::vector<MetricsCache::Sample> MetricsCache::Latest(const std::string& key,
                                                       const std::string& host, int port) {
  MutexLock lock(mu_);
  const auto now = clock_->Now();
  Target& t = targets_[key];
  if (t.host != host || t.port != port) {
    t.host = host;
    t.port = port;
    t.samples.clear();
    t.due = now;
    cv_.notify_one();
  }
  t.asked = now;
  return {t.samples.begin(), t.samples.end()};
}

uint64_t MetricsCache::scrapes() const {
  MutexLock lock(mu_);
  return scrapes_;
}

void MetricsCache::Run() {
  MutexLock lock(mu_);
  while (!stop_) {
    const auto now = clock_->Now();
    auto next = now + period_;
    std::string key;
    for (auto it = targets_.begin(); it != targets_.end();) {
      Target& t = it->second;
      if (!t.in_flight &&
          now - t.asked > 3 * period_) {  // its pod is gone or no longer asked about
        it = targets_.erase(it);
        continue;
      }
      if (!t.in_flight && key.empty() && t.due <= now) key = it->first;
      if (!t.in_flight && t.due > now) next = std::min(next, t.due);
      ++it;
    }
    if (key.empty()) {
      clock_->WaitUntil(lock, cv_, next);
      continue;
    }
    Target& t = targets_[key];
    t.in_flight = true;
    const std::string host = t.host;
    const int port = t.port;
    lock.Unlock();
    auto got = source_->Scrape(host, port);
    lock.Lock();
    ++scrapes_;
    auto it = targets_.find(key);
    if (it == targets_.end()) continue;
    it->second.in_flight = false;
    it->second.due = clock_->Now() + period_;
    if (got.ok() && it->second.host == host && it->second.port == port) {
      it->second.samples.push_front({std::move(*got), clock_->Now()});
      if (it->second.samples.size() > 2) it->second.samples.pop_back();
    }
  }
}

}  // namespace adam::kube
