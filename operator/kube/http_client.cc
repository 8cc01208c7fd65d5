// Client over cpprestsdk, kubeconfig and in-cluster configuration.
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>
#include <cpprest/uri.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <boost/asio/ssl.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <thread>

#include "core/mutex.h"
#include "kube/client.h"
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

// A token bucket: `qps` tokens a second, at most `burst` saved up. Acquire blocks until one is
// free. Thread-safe.
class RateLimiter {
 public:
  RateLimiter(double qps, int burst) : qps_(qps), burst_(std::max(1, burst)), tokens_(burst_) {}

  // Returns how long the caller waited.
  std::chrono::duration<double> Acquire() {
    if (qps_ <= 0) return {};
    MutexLock lock(mu_);
    const auto start = std::chrono::steady_clock::now();
    while (true) {
      const auto now = std::chrono::steady_clock::now();
      tokens_ = std::min<double>(
          burst_, tokens_ + qps_ * std::chrono::duration<double>(now - last_).count());
      last_ = now;
      if (tokens_ >= 1) {
        tokens_ -= 1;
        return now - start;
      }
      const auto wait = std::chrono::duration<double>((1 - tokens_) / qps_);
      lock.Unlock();
      std::this_thread::sleep_for(wait);
      lock.Lock();
    }
  }

 private:
  const double qps_;
  const int burst_;
  Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_ ABSL_GUARDED_BY(mu_) =
      std::chrono::steady_clock::now();
};

namespace {

namespace http = web::http;

// Bodies travel as bytes: cpprest's std::string overloads wrap a char buffer as an unsigned-char
// stream by a cast that UBSan reports (a bad vptr), so only the byte overloads are used.
std::vector<unsigned char> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::string BodyText(http::http_response& resp) {
  const std::vector<unsigned char> v = resp.extract_vector().get();
  return std::string(v.begin(), v.end());
}

std::string ReadFile(const std::string& path, bool* ok) {
  std::ifstream f(path, std::ios::binary);
  *ok = static_cast<bool>(f);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
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

// What an exec plugin answered.
struct ExecAnswer {
  std::string token, cert_pem, key_pem;
  std::optional<std::chrono::system_clock::time_point> expiry;  // none: valid until refused
};

namespace {

// Runs the plugin's command with its environment and KUBERNETES_EXEC_INFO, and returns what it
// printed (at most 1 MiB); an error when it cannot run or does not exit 0.
StatusOr<std::string> RunForOutput(const ExecPlugin& p, const std::string& where) {
  int out[2];
  if (pipe(out) != 0) return UnavailableError(where + ": pipe: " + std::strerror(errno));
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e) env_store.emplace_back(*e);
  for (const auto& [k, v] : p.env) env_store.push_back(k + "=" + v);
  const Json info = {{"apiVersion", p.api_version},
                     {"kind", "ExecCredential"},
                     {"spec", {{"interactive", false}}}};
  env_store.push_back("KUBERNETES_EXEC_INFO=" + info.dump());
  std::vector<char*> envp;
  envp.reserve(env_store.size() + 1);
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_store = {p.command};
  argv_store.insert(argv_store.end(), p.args.begin(), p.args.end());
  std::vector<char*> argv;
  argv.reserve(argv_store.size() + 1);
  for (auto& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, p.command.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    return FailedPreconditionError(where + ".command: cannot run '" + p.command +
                                   "': " + std::strerror(rc));
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (text.size() < (1 << 20)) text.append(buf, size_t(n));
  }
  close(out[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
    return FailedPreconditionError(where + ": '" + p.command + "' failed (" +
                                   (WIFEXITED(wstatus)
                                        ? "exit code " + std::to_string(WEXITSTATUS(wstatus))
                                        : "killed by a signal") +
                                   ")");
  return text;
}

// The ExecCredential the plugin printed: a token or a client certificate and key, and when they
// expire.
StatusOr<ExecAnswer> ParseExecCredential(const std::string& text, const ExecPlugin& p,
                                         const std::string& where) {
  Json cred;
  try {
    cred = Json::parse(text);
  } catch (const std::exception& e) {
    return InvalidArgumentError(where + ": '" + p.command +
                                "' printed no ExecCredential JSON: " + e.what());
  }
  if (!cred.is_object() || cred.value("kind", "") != "ExecCredential")
    return InvalidArgumentError(where + ": the plugin's answer is not an ExecCredential (kind)");
  if (cred.value("apiVersion", "") != p.api_version)
    return InvalidArgumentError(where + ": the plugin answered apiVersion '" +
                                cred.value("apiVersion", "") + "', asked for '" + p.api_version +
                                "'");
  const Json st = cred.value("status", Json::object());
  if (!st.is_object())
    return InvalidArgumentError(where + ": the plugin's answer has no status object");
  auto str = [&](const char* k) {
    auto it = st.find(k);
    return it != st.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  ExecAnswer a{str("token"), str("clientCertificateData"), str("clientKeyData"), std::nullopt};
  if (a.token.empty() && a.cert_pem.empty())
    return InvalidArgumentError(
        where + ": the plugin's status has neither token nor clientCertificateData");
  if (a.cert_pem.empty() != a.key_pem.empty())
    return InvalidArgumentError(where + ": clientCertificateData and clientKeyData come together");
  if (const std::string exp = str("expirationTimestamp"); !exp.empty()) {
    a.expiry = ParseTime(exp);
    if (!a.expiry)
      return InvalidArgumentError(where + ": status.expirationTimestamp '" + exp +
                                  "' is not RFC 3339");
  }
  return a;
}

}  // namespace

// Runs the plugin with KUBERNETES_EXEC_INFO set, as kubectl does, and reads the ExecCredential it
// prints. Errors name the kubeconfig field and what the plugin did wrong.
StatusOr<ExecAnswer> RunExecPlugin(const ExecPlugin& p) {
  const std::string where = p.where.empty() ? "exec plugin" : p.where;
  ADAM_ASSIGN_OR_RETURN(const std::string text, RunForOutput(p, where));
  return ParseExecCredential(text, p, where);
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
      : config_(c), limiter_(c.limiter ? c.limiter : NewRateLimiter(c.qps, c.burst)) {}

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
    pplx::cancellation_token_source cancel;
    std::atomic<bool> done{false};  // polled by the canceller: a value on its own
    // Cancelling the request closes the connection, which ends a read that waits for a line.
    std::thread canceller([&] {
      while (!done.load()) {
        if (stop && stop->load()) {
          cancel.cancel();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    Status result = OkStatus();
    try {
      auto creds = CurrentCredentials();
      if (!creds.ok()) {
        done = true;
        canceller.join();
        return creds.status();
      }
      // A stream of its own: a watch holds its connection for minutes.
      http::client::http_client client(config_.server,
                                       ClientConfig(o.timeout + std::chrono::seconds(30), *creds));
      http::http_request req(http::methods::GET);
      req.set_request_uri(path);
      Authorize(req, *creds);
      const auto t0 = std::chrono::steady_clock::now();
      http::http_response resp = client.request(req, cancel.get_token()).get();
      Observe("WATCH", resp.status_code(), t0);
      if (resp.status_code() == 401) InvalidateCredentials(creds->token);
      if (resp.status_code() != 200) {
        result = FromHttp(resp.status_code(), "WATCH", path, BodyText(resp));
      } else {
        auto body = resp.body();
        WatchDecoder decoder;
        bool ended = false;  // by the server: else this side leaves a stream that goes on
        while (true) {
          concurrency::streams::container_buffer<std::vector<uint8_t>> line;
          const size_t n = body.read_line(line).get();
          if (n == 0 && body.is_eof()) {
            ended = true;
            break;
          }
          if (line.collection().empty()) continue;
          auto ev = decoder.Decode(std::string(line.collection().begin(), line.collection().end()));
          if (!ev.ok()) {
            result = ev.status();
            break;
          }
          if (ev->type == "ERROR") {
            result = WatchErrorStatus(ev->object);
            break;
          }
          if (!on_event(*ev)) break;
        }
        // A stream left open (stopped, an ERROR event, a line that does not decode): its
        // connection closed now, while the request it belongs to is still this call's, rather
        // than read on by cpprest's threads after it returns.
        if (!ended) cancel.cancel();
      }
    } catch (const pplx::task_canceled&) {
      result = Status(StatusCode::kCancelled, "watch of " + path + " stopped");
    } catch (const std::exception& e) {
      result = (stop && stop->load()) ? Status(StatusCode::kCancelled, "watch stopped")
                                      : UnavailableError("WATCH " + path + ": " + e.what());
    }
    done = true;
    canceller.join();
    if (stop && stop->load() && !result.ok())
      return Status(StatusCode::kCancelled, "watch stopped");
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

  void Observe(const std::string& method, int code,
               std::chrono::steady_clock::time_point t0) const {
    if (!config_.observer) return;
    config_.observer(RequestRecord{
        method, code,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
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
      if (!exec_creds_ || (exec_expiry_ && std::chrono::system_clock::now() >= *exec_expiry_)) {
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
        const auto t0 = std::chrono::steady_clock::now();
        http::http_response resp = client->request(req).get();
        text = BodyText(resp);
        code = resp.status_code();
        Observe(method, code, t0);
        if (code == 429 || code == 503) retry_after = RetryAfter(resp);
      } catch (const std::exception& e) {
        Observe(method, 0, std::chrono::steady_clock::now());
        return UnavailableError(method + " " + path + ": " + e.what());
      }
      if (code == 401 && !refused_once && (config_.exec || !config_.token_file.empty())) {
        // Rotated or expired credentials: fetch them again and try once more.
        refused_once = true;
        InvalidateCredentials(token);
        continue;
      }
      if (retry_after && attempt < config_.max_retries) {
        std::this_thread::sleep_for(*retry_after);
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

// A PEM given inline (FIELD-data, base64) or as a file (FIELD); "" when neither.
StatusOr<std::string> Pem(const YAML::Node& n, const std::string& field, const std::string& where,
                          const std::string& base_dir) {
  bool ok = false;
  if (n[field + "-data"]) {
    auto pem = Base64Decode(n[field + "-data"].as<std::string>());
    if (!pem.ok()) return InvalidArgumentError(where + "." + field + "-data: not base64");
    return *pem;
  }
  if (n[field]) {
    std::filesystem::path p = n[field].as<std::string>();
    if (p.is_relative() && !base_dir.empty()) p = std::filesystem::path(base_dir) / p;
    std::string pem = ReadFile(p, &ok);
    if (!ok) return NotFoundError(where + "." + field + ": cannot read " + p.string());
    return pem;
  }
  return std::string();
}

// A kubeconfig user's `exec` stanza. A command with a slash is a path, relative to the
// kubeconfig's folder; a bare name is looked up in $PATH when it runs.
StatusOr<ExecPlugin> ParseExec(const YAML::Node& n, const std::string& where,
                               const std::string& base_dir) {
  if (!n.IsMap()) return InvalidArgumentError(where + ": must be a mapping");
  ExecPlugin p;
  p.where = where;
  if (!n["apiVersion"]) return InvalidArgumentError(where + ".apiVersion: required");
  p.api_version = n["apiVersion"].as<std::string>();
  if (p.api_version != "client.authentication.k8s.io/v1" &&
      p.api_version != "client.authentication.k8s.io/v1beta1")
    return InvalidArgumentError(where +
                                ".apiVersion: must be client.authentication.k8s.io/v1 or "
                                "v1beta1, got '" +
                                p.api_version + "'");
  if (!n["command"] || n["command"].as<std::string>().empty())
    return InvalidArgumentError(where + ".command: required");
  p.command = n["command"].as<std::string>();
  if (p.command.find('/') != std::string::npos && std::filesystem::path(p.command).is_relative() &&
      !base_dir.empty())
    p.command = (std::filesystem::path(base_dir) / p.command).string();
  if (const YAML::Node args = n["args"]) {
    if (!args.IsSequence()) return InvalidArgumentError(where + ".args: must be a list");
    for (const auto& a : args) p.args.push_back(a.as<std::string>());
  }
  if (const YAML::Node env = n["env"]) {
    if (!env.IsSequence()) return InvalidArgumentError(where + ".env: must be a list");
    for (size_t i = 0; i < env.size(); ++i) {
      if (!env[i]["name"] || !env[i]["value"])
        return InvalidArgumentError(where + ".env[" + std::to_string(i) +
                                    "]: needs name and value");
      p.env.emplace_back(env[i]["name"].as<std::string>(), env[i]["value"].as<std::string>());
    }
  }
  if (n["interactiveMode"] && n["interactiveMode"].as<std::string>() == "Always")
    return InvalidArgumentError(where +
                                ".interactiveMode: Always needs a terminal; the operator has none");
  return p;
}

}  // namespace

std::shared_ptr<RateLimiter> NewRateLimiter(double qps, int burst) {
  return std::make_shared<RateLimiter>(qps, burst);
}

std::unique_ptr<Client> NewHttpClient(const Config& config) {
  return std::make_unique<HttpClient>(config);
}

StatusOr<Config> InClusterConfig(const std::string& root) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !port) return NotFoundError("not in a cluster: KUBERNETES_SERVICE_HOST is unset");
  const std::string dir = root + "/var/run/secrets/kubernetes.io/serviceaccount";
  Config c;
  const std::string h = host;
  c.server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port;
  bool ok = false;
  c.token_file = dir + "/token";
  (void)ReadFile(c.token_file, &ok);
  if (!ok) return NotFoundError(c.token_file + ": cannot read the service-account token");
  c.ca_pem = ReadFile(dir + "/ca.crt", &ok);
  if (!ok) return NotFoundError(dir + "/ca.crt: cannot read the cluster CA");
  std::string ns = ReadFile(dir + "/namespace", &ok);
  if (ok && !ns.empty()) c.name_space = ns;
  return c;
}

StatusOr<Config> ParseKubeconfig(const std::string& text, const std::string& base_dir,
                                 const std::string& context) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("kubeconfig: not YAML: ") + e.what());
  }
  try {
    if (!root.IsMap()) return InvalidArgumentError("kubeconfig: must be a mapping");
    std::string ctx_name = context;
    if (ctx_name.empty()) {
      if (!root["current-context"])
        return InvalidArgumentError("kubeconfig.current-context: required");
      ctx_name = root["current-context"].as<std::string>();
    }
    auto find = [&](const char* list, const std::string& name) -> YAML::Node {
      const YAML::Node l = root[list];
      if (l && l.IsSequence())
        for (const auto& item : l)
          if (item.IsMap() && item["name"] && item["name"].as<std::string>() == name) return item;
      return YAML::Node();
    };
    const YAML::Node ctx = find("contexts", ctx_name);
    if (!ctx || !ctx["context"])
      return NotFoundError("kubeconfig.contexts: no context '" + ctx_name + "'");
    const YAML::Node cx = ctx["context"];
    Config c;
    if (cx["namespace"]) c.name_space = cx["namespace"].as<std::string>();
    const std::string cluster_name = cx["cluster"] ? cx["cluster"].as<std::string>() : "";
    const YAML::Node cluster = find("clusters", cluster_name);
    if (!cluster || !cluster["cluster"])
      return NotFoundError("kubeconfig.clusters: no cluster '" + cluster_name + "'");
    const YAML::Node cl = cluster["cluster"];
    const std::string where = "kubeconfig.clusters[" + cluster_name + "].cluster";
    if (!cl["server"]) return InvalidArgumentError(where + ".server: required");
    c.server = cl["server"].as<std::string>();
    if (cl["insecure-skip-tls-verify"])
      c.insecure_skip_tls_verify = cl["insecure-skip-tls-verify"].as<bool>();
    ADAM_ASSIGN_OR_RETURN(c.ca_pem, Pem(cl, "certificate-authority", where, base_dir));
    const std::string user_name = cx["user"] ? cx["user"].as<std::string>() : "";
    const YAML::Node user = find("users", user_name);
    if (user && user["user"]) {
      const YAML::Node u = user["user"];
      const std::string uw = "kubeconfig.users[" + user_name + "].user";
      if (u["token"]) c.token = u["token"].as<std::string>();
      if (u["tokenFile"]) {
        std::filesystem::path p = u["tokenFile"].as<std::string>();
        if (p.is_relative() && !base_dir.empty()) p = std::filesystem::path(base_dir) / p;
        bool ok = false;
        (void)ReadFile(p, &ok);
        if (!ok) return NotFoundError(uw + ".tokenFile: cannot read " + p.string());
        c.token_file = p.string();
        c.token.clear();
      }
      ADAM_ASSIGN_OR_RETURN(c.client_cert_pem, Pem(u, "client-certificate", uw, base_dir));
      ADAM_ASSIGN_OR_RETURN(c.client_key_pem, Pem(u, "client-key", uw, base_dir));
      if (c.client_cert_pem.empty() != c.client_key_pem.empty())
        return InvalidArgumentError(uw + ": client-certificate and client-key come together");
      if (u["exec"]) {
        ADAM_ASSIGN_OR_RETURN(c.exec, ParseExec(u["exec"], uw + ".exec", base_dir));
      } else if (u["auth-provider"] && c.token.empty() && c.token_file.empty() &&
                 c.client_cert_pem.empty()) {
        return InvalidArgumentError(uw +
                                    ".auth-provider: not supported (removed from kubectl in "
                                    "1.26); use an exec plugin, a token or a certificate");
      }
    }
    while (!c.token.empty() && (c.token.back() == '\n' || c.token.back() == '\r'))
      c.token.pop_back();
    return c;
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("kubeconfig: ") + e.what());
  }
}

std::string DefaultKubeconfigPath(const std::string& list) {
  if (!list.empty()) {
    // As kubectl merges the list, a file that does not exist is skipped.
    for (size_t start = 0; start <= list.size();) {
      const size_t colon = std::min(list.find(':', start), list.size());
      std::string one = list.substr(start, colon - start);
      if (!one.empty() && std::filesystem::exists(one)) return one;
      start = colon + 1;
    }
    return "";
  }
  const char* home = std::getenv("HOME");
  if (!home) return "";
  const std::string p = std::string(home) + "/.kube/config";
  return std::filesystem::exists(p) ? p : "";
}

StatusOr<Config> LoadKubeconfig(const std::string& path, const std::string& context) {
  bool ok = false;
  const std::string text = ReadFile(path, &ok);
  if (!ok) return NotFoundError(path + ": cannot read the kubeconfig");
  auto c = ParseKubeconfig(text, std::filesystem::path(path).parent_path().string(), context);
  if (!c.ok()) return c.status().Annotate(path);
  return c;
}

}  // namespace adam::kube
