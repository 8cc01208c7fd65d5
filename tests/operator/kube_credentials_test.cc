// How the Kubernetes client finds and renews its credentials (kube_fixture.h): token files,
// exec plugins, kubeconfig files, a pod's service account.
#include "operator/kube_fixture.h"

namespace adam::kube {
namespace {

// A token file is read again when it changes (the kubelet rotates bound tokens).
// A client reading its token from DIR/token, which holds "first" as the API server expects.
std::unique_ptr<Client> TokenFileClient(const testing::TmpDir& dir, FakeApiServer* api) {
  std::ofstream(dir.File("token")) << "first\n";
  api->SetToken("first");
  Config c = Plain(api->url());
  c.token_file = dir.File("token");
  return NewHttpClient(c);
}

TEST(Credentials, ATokenFileIsReadAgainWhenRotated) {
  testing::TmpDir dir;
  auto api = FakeApiServer::StartTls("", "", "");
  auto client = TokenFileClient(dir, api.get());
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("one", "1")).ok());
  api->SetToken("second");
  EXPECT_EQ(client->Get(ConfigMaps(), "ns", "one").status().code(),
            StatusCode::kFailedPrecondition);
  std::ofstream(dir.File("token")) << "second\n";
  auto got = client->Get(ConfigMaps(), "ns", "one");
  EXPECT_TRUE(got.ok()) << got.status().message();
}

// A token file caught empty (rewritten in place, between the truncate and the write) is not sent
// as no token at all, which a real API server answers as anonymous with 403: the last token is.
TEST(Credentials, AnEmptiedTokenFileKeepsTheLastToken) {
  testing::TmpDir dir;
  auto api = FakeApiServer::StartTls("", "", "");
  auto client = TokenFileClient(dir, api.get());
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("one", "1")).ok());
  std::ofstream(dir.File("token"), std::ios::trunc).flush();
  auto got = client->Get(ConfigMaps(), "ns", "one");
  EXPECT_TRUE(got.ok()) << got.status().message();
  std::ofstream(dir.File("token")) << "second\n";
  api->SetToken("second");
  got = client->Get(ConfigMaps(), "ns", "one");
  EXPECT_TRUE(got.ok()) << got.status().message();
}

// Never written: the error names the file instead of sending an anonymous request.
TEST(Credentials, AnEmptyTokenFileIsAnError) {
  testing::TmpDir dir;
  auto api = FakeApiServer::StartTls("", "", "");
  std::ofstream(dir.File("token")).flush();
  Config c = Plain(api->url());
  c.token_file = dir.File("token");
  auto got = NewHttpClient(c)->Get(ConfigMaps(), "ns", "one");
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("token file is empty"), std::string::npos)
      << got.status().message();
}

// An exec plugin's credential is cached until it expires or is refused, then asked for again.
TEST(Credentials, AnExecPluginIsRunOnceAndAgainWhenRefused) {
  testing::TmpDir dir;
  auto api = FakeApiServer::StartTls("", "", "");
  const std::string plugin = dir.File("plugin.sh");
  std::ofstream(plugin)
      << "#!/bin/sh\n"
         "echo run >> \"$(dirname \"$0\")/runs\"\n"
         "case \"$KUBERNETES_EXEC_INFO\" in *ExecCredential*) ;; *) exit 3;; esac\n"
         "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
         "\"status\":{\"token\":\"%s\"}}' \"$(cat \"$(dirname \"$0\")/token\")\"\n";
  std::filesystem::permissions(plugin, std::filesystem::perms::owner_all);
  std::ofstream(dir.File("token")) << "t1";
  api->SetToken("t1");
  const std::string kubeconfig = R"(
apiVersion: v1
kind: Config
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: ")" +
                                 api->url() + R"("}}]
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./plugin.sh
      env: [{name: PLUGIN_MODE, value: test}]
)";
  auto c = ParseKubeconfig(kubeconfig, dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE(c->exec.has_value());
  EXPECT_EQ(c->exec->command, dir.File("./plugin.sh"));
  auto client = NewHttpClient(*c);
  ASSERT_TRUE(client->Create(ConfigMaps(), "ns", Cm("one", "1")).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client->Get(ConfigMaps(), "ns", "one").ok());
  auto runs = [&] {
    std::ifstream f(dir.File("runs"));
    int n = 0;
    for (std::string l; std::getline(f, l);) ++n;
    return n;
  };
  EXPECT_EQ(runs(), 1);
  std::ofstream(dir.File("token")) << "t2";
  api->SetToken("t2");
  auto got = client->Get(ConfigMaps(), "ns", "one");  // 401, the plugin again, then success
  EXPECT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(runs(), 2);

  // Bad stanzas and bad answers are named.
  std::string bad = kubeconfig;
  bad.replace(bad.find("authentication.k8s.io/v1\n"), 25, "authentication.k8s.io/v9\n");
  EXPECT_NE(
      ParseKubeconfig(bad, dir.path()).status().message().find("users[u].user.exec.apiVersion"),
      std::string::npos);
  std::ofstream(plugin) << "#!/bin/sh\necho not json\n";
  std::filesystem::permissions(plugin, std::filesystem::perms::owner_all);
  auto broken = NewHttpClient(*c)->Get(ConfigMaps(), "ns", "one");
  EXPECT_NE(broken.status().message().find("no ExecCredential JSON"), std::string::npos)
      << broken.status().message();
}

TEST(Kubeconfig, TheFirstExistingFileOfTheListIsUsed) {
  testing::TmpDir dir;
  std::ofstream(dir.File("one")) << "x";
  std::ofstream(dir.File("two")) << "x";
  EXPECT_EQ(DefaultKubeconfigPath(dir.File("one") + ":" + dir.File("two")), dir.File("one"));
  EXPECT_EQ(DefaultKubeconfigPath("/nonexistent:" + dir.File("two")), dir.File("two"));
  EXPECT_EQ(DefaultKubeconfigPath(":/nonexistent"), "");
}

TEST(InCluster, ReadsTheServiceAccount) {
  testing::TmpDir dir;
  const std::string sa = dir.path() + "/var/run/secrets/kubernetes.io/serviceaccount";
  std::filesystem::create_directories(sa);
  std::ofstream(sa + "/token") << "tok";
  std::ofstream(sa + "/ca.crt") << "CA";
  std::ofstream(sa + "/namespace") << "ml";
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_EQ(InClusterConfig(dir.path()).status().code(), StatusCode::kNotFound);
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto c = InClusterConfig(dir.path());
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  // The token is a file the kubelet rotates: the client reads it, not a copy made once.
  EXPECT_EQ(c->token, "");
  EXPECT_EQ(c->token_file, sa + "/token");
  EXPECT_EQ(c->ca_pem, "CA");
  EXPECT_EQ(c->name_space, "ml");
}

TEST(Kubeconfig, ReadsTheCurrentContextAndNamesBadFields) {
  const std::string text = R"(
apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context: {cluster: c1, user: u1, namespace: team}
clusters:
- name: c1
  cluster: {server: "https://10.0.0.1:6443", certificate-authority-data: "Q0EK"}
users:
- name: u1
  user: {token: secret-token}
)";
  auto c = ParseKubeconfig(text, "");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->token, "secret-token");
  EXPECT_EQ(c->ca_pem, "CA\n");
  EXPECT_EQ(c->name_space, "team");
  auto missing = ParseKubeconfig(text, "", "prod");
  EXPECT_NE(missing.status().message().find("no context 'prod'"), std::string::npos);
  std::string bad = text;
  bad.replace(bad.find("Q0EK"), 4, "!!!!");
  auto b = ParseKubeconfig(bad, "");
  EXPECT_NE(b.status().message().find("certificate-authority-data"), std::string::npos)
      << b.status().message();
  EXPECT_FALSE(ParseKubeconfig("[1, 2", "").ok());
}

}  // namespace
}  // namespace adam::kube
