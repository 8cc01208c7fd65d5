// Client over cpprestsdk, kubeconfig and in-cluster configuration.
#include <boost/asio/ssl.hpp>
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>
#include <cpprest/uri.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <thread>

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
Resource Services() { return {"v1", "services"}; }
Resource ConfigMaps() { return {"v1", "configmaps"}; }
Resource PersistentVolumeClaims() { return {"v1", "persistentvolumeclaims"}; }
Resource StatefulSets() { return {"apps/v1", "statefulsets"}; }
Resource Events() { return {"v1", "events"}; }
Resource Leases() { return {"coordination.k8s.io/v1", "leases"}; }
Resource NetworkPolicies() { return {"networking.k8s.io/v1", "networkpolicies"}; }
Resource Secrets() { return {"v1", "secrets"}; }

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
  for (const Resource& r : {AdamJobs(), Pods(), Services(), ConfigMaps(), PersistentVolumeClaims(),
                            StatefulSets(), Events(), Leases(), NetworkPolicies(), Secrets()}) {
    std::string singular = r.plural.substr(0, r.plural.size() - 1);
    if (r.plural == "networkpolicies") singular = "networkpolicy";
    std::string k = kind;
    for (char& c : k) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (r.group_version == api_version && singular == k)
      return r;
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
    case 404: return NotFoundError(what);
    case 409: return method == "POST" ? Status(StatusCode::kAlreadyExists, what) : AbortedError(what);
    case 410: return OutOfRangeError(what);
    case 400:
    case 422: return InvalidArgumentError(what);
    case 401:
    case 403: return FailedPreconditionError(what);
    case 429:
    case 500:
    case 503:
    case 504: return UnavailableError(what);
    default: return InternalError(what);
  }
}

class HttpClient : public Client {
 public:
  explicit HttpClient(const Config& c) : config_(c) {}

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

  Status Delete(const Resource& r, const std::string& ns, const std::string& name) override {
    const Json options = {{"kind", "DeleteOptions"},
                          {"apiVersion", "v1"},
                          {"propagationPolicy", "Background"}};
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
    std::atomic<bool> done{false};
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
      http::client::http_client client(config_.server, ClientConfig(o.timeout + std::chrono::seconds(30)));
      http::http_request req(http::methods::GET);
      req.set_request_uri(path);
      Authorize(req);
      http::http_response resp = client.request(req, cancel.get_token()).get();
      if (resp.status_code() != 200) {
        result = FromHttp(resp.status_code(), "WATCH", path, BodyText(resp));
      } else {
        auto body = resp.body();
        WatchDecoder decoder;
        while (true) {
          concurrency::streams::container_buffer<std::vector<uint8_t>> line;
          const size_t n = body.read_line(line).get();
          if (n == 0 && body.is_eof()) break;
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
      }
    } catch (const pplx::task_canceled&) {
      result = Status(StatusCode::kCancelled, "watch of " + path + " stopped");
    } catch (const std::exception& e) {
      result = (stop && stop->load()) ? Status(StatusCode::kCancelled, "watch stopped")
                                      : UnavailableError("WATCH " + path + ": " + e.what());
    }
    done = true;
    canceller.join();
    if (stop && stop->load() && !result.ok()) return Status(StatusCode::kCancelled, "watch stopped");
    return result;
  }

 private:
  static std::string Name(const Json& object) {
    return object.value("metadata", Json::object()).value("name", "");
  }

  http::client::http_client_config ClientConfig(std::chrono::seconds timeout) const {
    http::client::http_client_config cc;
    cc.set_timeout(timeout);
    cc.set_validate_certificates(!config_.insecure_skip_tls_verify);
    const Config c = config_;
    if (!c.ca_pem.empty() || !c.client_cert_pem.empty()) {
      cc.set_ssl_context_callback([c](boost::asio::ssl::context& ctx) {
        if (!c.ca_pem.empty()) ctx.add_certificate_authority(boost::asio::buffer(c.ca_pem));
        if (!c.client_cert_pem.empty()) {
          ctx.use_certificate_chain(boost::asio::buffer(c.client_cert_pem));
          ctx.use_private_key(boost::asio::buffer(c.client_key_pem), boost::asio::ssl::context::pem);
        }
      });
    }
    return cc;
  }

  void Authorize(http::http_request& req) const {
    if (!config_.token.empty()) req.headers().add("Authorization", "Bearer " + config_.token);
    req.headers().add("Accept", "application/json");
  }

  StatusOr<Json> Call(const http::method& method, const std::string& path, const Json* body) {
    try {
      http::client::http_client client(config_.server, ClientConfig(std::chrono::seconds(30)));
      http::http_request req(method);
      req.set_request_uri(path);
      Authorize(req);
      if (body) {
        req.set_body(Bytes(body->dump()));
        req.headers().set_content_type("application/json");
      }
      http::http_response resp = client.request(req).get();
      const std::string text = BodyText(resp);
      const int code = resp.status_code();
      if (code < 200 || code >= 300) return FromHttp(code, method, path, text);
      if (text.empty()) return Json::object();
      try {
        return Json::parse(text);
      } catch (const std::exception& e) {
        return DataLossError(method + " " + path + ": the answer is not JSON: " + e.what());
      }
    } catch (const std::exception& e) {
      return UnavailableError(method + " " + path + ": " + e.what());
    }
  }

  const Config config_;
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

}  // namespace

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
  c.token = ReadFile(dir + "/token", &ok);
  if (!ok) return NotFoundError(dir + "/token: cannot read the service-account token");
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
      if (!root["current-context"]) return InvalidArgumentError("kubeconfig.current-context: required");
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
    if (!ctx || !ctx["context"]) return NotFoundError("kubeconfig.contexts: no context '" + ctx_name + "'");
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
    if (cl["insecure-skip-tls-verify"]) c.insecure_skip_tls_verify = cl["insecure-skip-tls-verify"].as<bool>();
    ADAM_ASSIGN_OR_RETURN(c.ca_pem, Pem(cl, "certificate-authority", where, base_dir));
    const std::string user_name = cx["user"] ? cx["user"].as<std::string>() : "";
    const YAML::Node user = find("users", user_name);
    if (user && user["user"]) {
      const YAML::Node u = user["user"];
      const std::string uw = "kubeconfig.users[" + user_name + "].user";
      if (u["token"]) c.token = u["token"].as<std::string>();
      if (u["tokenFile"]) {
        bool ok = false;
        c.token = ReadFile(u["tokenFile"].as<std::string>(), &ok);
        if (!ok) return NotFoundError(uw + ".tokenFile: cannot read it");
      }
      ADAM_ASSIGN_OR_RETURN(c.client_cert_pem, Pem(u, "client-certificate", uw, base_dir));
      ADAM_ASSIGN_OR_RETURN(c.client_key_pem, Pem(u, "client-key", uw, base_dir));
      if (c.client_cert_pem.empty() != c.client_key_pem.empty())
        return InvalidArgumentError(uw + ": client-certificate and client-key come together");
      if (u["exec"] || u["auth-provider"])
        if (c.token.empty() && c.client_cert_pem.empty())
          return InvalidArgumentError(uw + ": exec and auth-provider credentials are not supported; "
                                           "use a token or a client certificate");
    }
    while (!c.token.empty() && (c.token.back() == '\n' || c.token.back() == '\r')) c.token.pop_back();
    return c;
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("kubeconfig: ") + e.what());
  }
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
