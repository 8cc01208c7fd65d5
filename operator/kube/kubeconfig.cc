// Where the API client's configuration comes from: a kubeconfig (with its exec plugins) or the
// pod's service account.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kube/client.h"
#include "kube/credentials.h"

namespace adam::kube {

std::string ReadFile(const std::string& path, bool* ok) {
  std::ifstream f(path, std::ios::binary);
  *ok = static_cast<bool>(f);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

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

StatusOr<ExecAnswer> RunExecPlugin(const ExecPlugin& p) {
  const std::string where = p.where.empty() ? "exec plugin" : p.where;
  ADAM_ASSIGN_OR_RETURN(const std::string text, RunForOutput(p, where));
  return ParseExecCredential(text, p, where);
}

namespace {

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

namespace {

// A kubeconfig user's credentials (`uw` names it in errors): a token or token file, a client
// certificate and key, or an exec plugin. May throw YAML::Exception (ParseKubeconfig catches it).
Status ReadUser(const YAML::Node& u, const std::string& uw, const std::string& base_dir,
                Config* c) {
  if (u["token"]) c->token = u["token"].as<std::string>();
  if (u["tokenFile"]) {
    std::filesystem::path p = u["tokenFile"].as<std::string>();
    if (p.is_relative() && !base_dir.empty()) p = std::filesystem::path(base_dir) / p;
    bool ok = false;
    (void)ReadFile(p, &ok);
    if (!ok) return NotFoundError(uw + ".tokenFile: cannot read " + p.string());
    c->token_file = p.string();
    c->token.clear();
  }
  ADAM_ASSIGN_OR_RETURN(c->client_cert_pem, Pem(u, "client-certificate", uw, base_dir));
  ADAM_ASSIGN_OR_RETURN(c->client_key_pem, Pem(u, "client-key", uw, base_dir));
  if (c->client_cert_pem.empty() != c->client_key_pem.empty())
    return InvalidArgumentError(uw + ": client-certificate and client-key come together");
  if (u["exec"]) {
    ADAM_ASSIGN_OR_RETURN(c->exec, ParseExec(u["exec"], uw + ".exec", base_dir));
  } else if (u["auth-provider"] && c->token.empty() && c->token_file.empty() &&
             c->client_cert_pem.empty()) {
    return InvalidArgumentError(uw +
                                ".auth-provider: not supported (removed from kubectl in "
                                "1.26); use an exec plugin, a token or a certificate");
  }
  return OkStatus();
}

}  // namespace

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
    if (user && user["user"])
      ADAM_RETURN_IF_ERROR(
          ReadUser(user["user"], "kubeconfig.users[" + user_name + "].user", base_dir, &c));
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
