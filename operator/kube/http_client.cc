// Client over cpprestsdk (requests) and libcurl (watches); its configuration in kubeconfig.cc.
#include <cpprest/http_client.h>
#include <cpprest/uri.h>

#include <boost/asio/ssl.hpp>
#include <ctime>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <thread>

#include "core/mutex.h"
#include "kube/client.h"
#include "kube/credentials.h"
#include "kube/line_stream.h"
#include "kube/rate_limiter.h"
#include "kube/watch.h"

namespace adam::kube {

std::string Resource::Path(const std::string& ns) const {
  std::string p = group_version.find('/') == std::string::npos ? "/api/" + group_version
                                                               : "/apis/" + group_version;
  if (namespaced && !ns.empty()) p += "/namespaces/" + ns;
  return p + "/" + plural;
}

Resource AdamJobs() { return {"adam.dev/v1alpha1", "adamjobs"}; }
Resource Pods() { return {"v1", "pods"}; }
Resource Nodes() { return {"v1", "nodes", false}; }
Resource Services() { return {"v1", "services"}; }
Resource ConfigMaps() { return {"v1", "configmaps"}; }
Resource PersistentVolumeClaims() { return {"v1", "persistentvolumeclaims"}; }
Resource StatefulSets() { return {"apps/v1", "statefulsets"}; }
Resource Events() { return {"v1", "events"}; }
Resource EventsV1() { return {"events.k8s.io/v1", "events"}; }
Resource Leases() { return {"coordination.k8s.io/v1", "leases"}; }
Resource NetworkPolicies() { return {"networking.k8s.io/v1", "networkpolicies"}; }
Resource PodDisruptionBudgets() { return {"policy/v1", "poddisruptionbudgets"}; }
Resource Secrets() { return {"v1", "secrets"}; }
Resource Workloads() { return {"kueue.x-k8s.io/v1beta2", "workloads"}; }
Resource WorkloadPriorityClasses() {
  return {"kueue.x-k8s.io/v1beta2", "workloadpriorityclasses", false};
}
Resource ResourceFlavors() { return {"kueue.x-k8s.io/v1beta2", "resourceflavors", false}; }
Resource PodGroups() { return {"scheduling.x-k8s.io/v1alpha1", "podgroups"}; }
Resource GangPodGroups() { return {"scheduling.k8s.io/v1alpha2", "podgroups"}; }

std::string Base64Encode(const std::string& bytes) {
  return utility::conversions::to_base64(std::vector<unsigned char>(bytes.begin(), bytes.end()));
}

StatusOr<std::string> Base64Decode(const std::string& text) {
  try {
    auto bytes = utility::conversions::from_base64(text);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception&) {
    return InvalidArgumentError("not base64");
  }
}

StatusOr<Resource> ResourceForKind(const std::string& api_version, const std::string& kind) {
  for (const Resource& r :
       {AdamJobs(), Pods(), Services(), ConfigMaps(), PersistentVolumeClaims(), StatefulSets(),
        Events(), Leases(), NetworkPolicies(), Secrets(), Workloads(), ResourceFlavors(),
        PodGroups(), GangPodGroups(), PodDisruptionBudgets()}) {
    std::string singular = r.plural.substr(0, r.plural.size() - 1);
    if (r.plural == "networkpolicies") singular = "networkpolicy";
    std::string k = kind;
    for (char& c : k) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (r.group_version == api_version && singular == k) return r;
  }
  return InvalidArgumentError("no resource for " + api_version + " " + kind);
}

std::string FormatTime(std::chrono::system_clock::time_point t) {
  const std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string FormatMicroTime(std::chrono::system_clock::time_point t) {
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() % 1000000;
  std::string s = FormatTime(t);
  char frac[16];
  std::snprintf(frac, sizeof frac, ".%06lld", static_cast<long long>(micros < 0 ? 0 : micros));
  return s.insert(s.size() - 1, frac);
}

std::optional<std::chrono::system_clock::time_point> ParseTime(const std::string& text) {
  std::tm tm{};
  std::istringstream in(text);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail()) return std::nullopt;
  // Fractional seconds are allowed and dropped; the zone must be Z.
  std::string rest;
  in >> rest;
  if (rest.empty() || rest.back() != 'Z') return std::nullopt;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

namespace {

namespace http = web::http;

// Bodies travel as bytes: cpprest's std::string overloads wrap a char buffer as an unsigned-char
// stream by a cast that UBSan reports (a bad vptr), so only the byte overloads are used.
std::vector<unsigned char> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::string BodyText(http::http_response& resp) {
  const std::vector<unsigned char> v = resp.extract_vector().get();
  return std::string(v.begin(), v.end());
}

Status FromHttp(int code, const std::string& method, const std::string& path,
                const std::string& body) {
  // The API server answers errors with a Status object; its message is the useful part.
  std::string msg = body.substr(0, 512);
  try {
    Json s = Json::parse(body);
    if (s.is_object() && s.contains("message")) msg = s["message"].get<std::string>();
  } catch (const std::exception&) {
  }
  const std::string what = method + " " + path + ": HTTP " + std::to_string(code) + ": " + msg;
  switch (code) {
    case 404:
      return NotFoundError(what);
    case 409:
      return method == "POST" ? Status(StatusCode::kAlreadyExists, what) : AbortedError(what);
    case 410:
      return OutOfRangeError(what);
    case 400:
    case 422:
      return InvalidArgumentError(what);
    case 401:
    case 403:
      return FailedPreconditionError(what);
    case 429:
    case 500:
    case 503:
    case 504:
      return UnavailableError(what);
    default:
      return InternalError(what);
  }
}

// What a request authenticates with: a bearer token and/or a client certificate.
struct Credentials {
  std::string token;
  std::string cert_pem, key_pem;
};

// The Retry-After header's delay in whole seconds (RFC 9110 also allows a date; the API server
// sends seconds); nullopt when absent or not a number.
std::optional<std::chrono::seconds> RetryAfter(const http::http_response& resp) {
  const auto& h = resp.headers();
  auto it = h.find("Retry-After");
  if (it == h.end()) return std::nullopt;
  try {
    const long v = std::stol(it->second);
    if (v < 0) return std::nullopt;
    return std::chrono::seconds(std::min(v, 60L));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

class HttpClient : public Client {
 public:
  explicit HttpClient(const Config& c)
      : config_(c), limiter_(c.limiter ? c.limiter : NewRateLimiter(c.qps, c.burst, c.clock)) {}

  StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) override {
    return Call(http::methods::GET, r.Path(ns) + "/" + name, nullptr);
  }

  StatusOr<Json> List(const Resource& r, const std::string& ns, const ListOptions& o) override {
    std::string path = r.Path(ns);
    if (!o.label_selector.empty())
      path += "?labelSelector=" + web::uri::encode_data_string(o.label_selector);
    return Call(http::methods::GET, path, nullptr);
  }

  StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& object) override {
    return Call(http::methods::POST, r.Path(ns), &object);
  }

  StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& object) override {
    return Call(http::methods::PUT, r.Path(ns) + "/" + Name(object), &object);
  }

  StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns,
                              const Json& object) override {
    return Call(http::methods::PUT, r.Path(ns) + "/" + Name(object) + "/status", &object);
  }

  StatusOr<Json> Apply(const Resource& r, const std::string& ns, const Json& object,
                       const std::string& manager) override {
    return Call(http::methods::PATCH,
                r.Path(ns) + "/" + Name(object) +
                    "?fieldManager=" + web::uri::encode_data_string(manager) + "&force=true",
                &object, "application/apply-patch+yaml");  // JSON is YAML
  }

  Status Delete(const Resource& r, const std::string& ns, const std::string& name) override {
    const Json options = {
        {"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", "Background"}};
    auto s = Call(http::methods::DEL, r.Path(ns) + "/" + name, &options);
    return s.status();
  }

  Status ForceDelete(const Resource& r, const std::string& ns, const std::string& name) override {
    const Json options = {{"kind", "DeleteOptions"},
                          {"apiVersion", "v1"},
                          {"propagationPolicy", "Background"},
                          {"gracePeriodSeconds", 0}};
    auto s = Call(http::methods::DEL, r.Path(ns) + "/" + name, &options);
    return s.status();
  }

  Status Watch(const Resource& r, const std::string& ns, const WatchOptions& o,
               const std::function<bool(const WatchEvent&)>& on_event,
               const std::atomic<bool>* stop) override {
    std::string path = r.Path(ns) + "?watch=1&timeoutSeconds=" + std::to_string(o.timeout.count());
    if (o.bookmarks) path += "&allowWatchBookmarks=true";
    if (!o.resource_version.empty())
      path += "&resourceVersion=" + web::uri::encode_data_string(o.resource_version);
    if (!o.label_selector.empty())
      path += "&labelSelector=" + web::uri::encode_data_string(o.label_selector);
    auto creds = CurrentCredentials();
    if (!creds.ok()) return creds.status();
    // On a connection of its own (a watch holds one for minutes), through libcurl: see
    // kube/line_stream.h for why not cpprest.
    LineStreamRequest req;
    req.url = config_.server + path;
    req.ca_pem = config_.ca_pem;
    req.insecure_skip_tls_verify = config_.insecure_skip_tls_verify;
    req.cert_pem = creds->cert_pem;
    req.key_pem = creds->key_pem;
    req.token = creds->token;
    req.timeout = o.timeout + std::chrono::seconds(30);
    const auto t0 = config_.clock->Now();
    WatchDecoder decoder;
    Status result = OkStatus();
    auto read = [&](std::string_view line) {
      if (line.empty()) return true;
      auto ev = decoder.Decode(std::string(line));
      if (!ev.ok()) {
        result = ev.status();
        return false;
      }
      if (ev->type == "ERROR") {
        result = WatchErrorStatus(ev->object);
        return false;
      }
      return on_event(*ev);
    };
    const StatusOr<LineStreamAnswer> answer = [&]() -> StatusOr<LineStreamAnswer> {
      try {
        return StreamLines(
            req, [&](int code) { Observe("WATCH", code, t0); }, read, stop);
      } catch (const std::exception& e) {  // from on_event: the watch ends, as a lost one would
        return UnavailableError("WATCH " + path + ": " + e.what());
      }
    }();
    if (stop && stop->load() && !(answer.ok() && result.ok()))
      return Status(StatusCode::kCancelled, "watch of " + path + " stopped");
    if (!answer.ok()) return answer.status();
    if (answer->code == 401) InvalidateCredentials(creds->token);
    if (answer->code != 200) return FromHttp(answer->code, "WATCH", path, answer->body);
    return result;
  }

 private:
  static std::string Name(const Json& object) {
    return object.value("metadata", Json::object()).value("name", "");
  }

  http::client::http_client_config ClientConfig(std::chrono::milliseconds timeout,
                                                const Credentials& creds) const {
    http::client::http_client_config cc;
    cc.set_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    cc.set_validate_certificates(!config_.insecure_skip_tls_verify);
    const std::string ca = config_.ca_pem, cert = creds.cert_pem, key = creds.key_pem;
    if (!ca.empty() || !cert.empty()) {
      cc.set_ssl_context_callback([ca, cert, key](boost::asio::ssl::context& ctx) {
        if (!ca.empty()) ctx.add_certificate_authority(boost::asio::buffer(ca));
        if (!cert.empty()) {
          ctx.use_certificate_chain(boost::asio::buffer(cert));
          ctx.use_private_key(boost::asio::buffer(key), boost::asio::ssl::context::pem);
        }
      });
    }
    return cc;
  }

  static void Authorize(http::http_request& req, const Credentials& creds) {
    if (!creds.token.empty()) req.headers().add("Authorization", "Bearer " + creds.token);
    req.headers().add("Accept", "application/json");
    // The API server names a request's field manager after it (managedFields, audit logs).
    req.headers().add("User-Agent", "adam-operator");
  }

  void Observe(const std::string& method, int code, Clock::TimePoint t0) const {
    if (!config_.observer) return;
    config_.observer(RequestRecord{method, code, config_.clock->SecondsSince(t0)});
  }

  // The credentials for the next request: the static ones, the token file's current content, or
  // the exec plugin's cached answer (run again once it expires or the server refused it).
  StatusOr<Credentials> CurrentCredentials() {
    MutexLock lock(creds_mu_);
    Credentials c{config_.token, config_.client_cert_pem, config_.client_key_pem};
    if (!config_.token_file.empty()) {
      std::error_code ec;
      const auto mtime = std::filesystem::last_write_time(config_.token_file, ec);
      if (ec)
        return UnavailableError(config_.token_file + ": cannot read the token: " + ec.message());
      if (!token_read_ || mtime != token_mtime_) {
        bool ok = false;
        std::string t = ReadFile(config_.token_file, &ok);
        if (!ok) return UnavailableError(config_.token_file + ": cannot read the token");
        while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
        if (t.empty()) {
          // Caught between a truncate and a write (a file rewritten in place, not swapped as the
          // kubelet does): sent empty, the request would be anonymous and refused with 403. Keep
          // the last token and read the file again next time.
          if (file_token_.empty())
            return UnavailableError(config_.token_file + ": the token file is empty");
        } else {
          file_token_ = t;
          token_mtime_ = mtime;
          token_read_ = true;
        }
      }
      c.token = file_token_;
    }
    if (config_.exec) {
      if (!exec_creds_ || (exec_expiry_ && config_.clock->WallNow() >= *exec_expiry_)) {
        auto got = RunExecPlugin(*config_.exec);
        if (!got.ok()) return got.status();
        exec_creds_ = Credentials{got->token, got->cert_pem, got->key_pem};
        exec_expiry_ = got->expiry;
      }
      if (!exec_creds_->token.empty()) c.token = exec_creds_->token;
      if (!exec_creds_->cert_pem.empty()) {
        c.cert_pem = exec_creds_->cert_pem;
        c.key_pem = exec_creds_->key_pem;
      }
    }
    return c;
  }

  // After a 401: read the token file again and run the plugin again next time.
  void InvalidateCredentials(const std::string& refused_token) {
    MutexLock lock(creds_mu_);
    if (config_.exec && exec_creds_ && exec_creds_->token == refused_token) exec_creds_.reset();
    token_read_ = false;
  }

  // The pooled client for requests with `creds`' certificate: one per certificate, so its
  // connections are kept alive and reused across requests and threads.
  std::shared_ptr<http::client::http_client> Pooled(const Credentials& creds) {
    MutexLock lock(pool_mu_);
    if (!pooled_ || pooled_cert_ != creds.cert_pem) {
      pooled_ = std::make_shared<http::client::http_client>(
          config_.server, ClientConfig(config_.request_timeout, creds));
      pooled_cert_ = creds.cert_pem;
    }
    return pooled_;
  }

  StatusOr<Json> Call(const http::method& method, const std::string& path, const Json* body,
                      const char* content_type = "application/json") {
    bool refused_once = false;
    for (int attempt = 0;; ++attempt) {
      int code = 0;
      std::string text;
      std::optional<std::chrono::seconds> retry_after;
      std::string token;
      try {
        limiter_->Acquire();
        ADAM_ASSIGN_OR_RETURN(const Credentials creds, CurrentCredentials());
        token = creds.token;
        auto client = Pooled(creds);
        http::http_request req(method);
        req.set_request_uri(path);
        Authorize(req, creds);
        if (body) {
          req.set_body(Bytes(body->dump()));
          req.headers().set_content_type(content_type);
        }
        const auto t0 = config_.clock->Now();
        http::http_response resp = client->request(req).get();
        text = BodyText(resp);
        code = resp.status_code();
        Observe(method, code, t0);
        if (code == 429 || code == 503) retry_after = RetryAfter(resp);
      } catch (const std::exception& e) {
        Observe(method, 0, config_.clock->Now());
        return UnavailableError(method + " " + path + ": " + e.what());
      }
      if (code == 401 && !refused_once && (config_.exec || !config_.token_file.empty())) {
        // Rotated or expired credentials: fetch them again and try once more.
        refused_once = true;
        InvalidateCredentials(token);
        continue;
      }
      if (retry_after && attempt < config_.max_retries) {
        config_.clock->SleepFor(*retry_after);
        continue;
      }
      if (code < 200 || code >= 300) return FromHttp(code, method, path, text);
      if (text.empty()) return Json::object();
      try {
        return Json::parse(text);
      } catch (const std::exception& e) {
        return DataLossError(method + " " + path + ": the answer is not JSON: " + e.what());
      }
    }
  }

  const Config config_;
  const std::shared_ptr<RateLimiter> limiter_;
  Mutex pool_mu_;
  std::shared_ptr<http::client::http_client> pooled_ ABSL_GUARDED_BY(pool_mu_);
  std::string pooled_cert_ ABSL_GUARDED_BY(pool_mu_);
  Mutex creds_mu_;
  bool token_read_ ABSL_GUARDED_BY(creds_mu_) = false;
  std::filesystem::file_time_type token_mtime_ ABSL_GUARDED_BY(creds_mu_){};
  std::string file_token_ ABSL_GUARDED_BY(creds_mu_);
  std::optional<Credentials> exec_creds_ ABSL_GUARDED_BY(creds_mu_);
  std::optional<std::chrono::system_clock::time_point> exec_expiry_ ABSL_GUARDED_BY(creds_mu_);
};

}  // namespace

std::shared_ptr<RateLimiter> NewRateLimiter(double qps, int burst, Clock* clock) {
  return std::make_shared<RateLimiter>(qps, burst, clock);
}

std::unique_ptr<Client> NewHttpClient(const Config& config) {
  return std::make_unique<HttpClient>(config);
}

}  // namespace adam::kube
