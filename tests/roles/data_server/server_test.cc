// The data server as a role object, run in-process: Start binds and reports its ports, the
// service answers over gRPC through the role's transport, Stop ends it (twice is harmless).
#include "data_server/server.h"

#include <gtest/gtest.h>

#include "adam/v1/data.grpc.pb.h"
#include "net/tls.h"
#include "roles/data_server/sources.h"

namespace adam::data_server {
namespace {

int Served(const net::Transport& transport, int port) {
  auto stub =
      v1::DataService::NewStub(net::MakeChannel(transport, "127.0.0.1:" + std::to_string(port)));
  grpc::ClientContext ctx;
  net::SetDeadline(&ctx, std::chrono::seconds(2));
  v1::DatasetInfo info;
  if (!stub->GetInfo(&ctx, v1::GetInfoRequest(), &info).ok()) return -1;
  return int(info.train_count());
}

TEST(DataServerRole, StartsServesAndStopsInProcess) {
  spec::DataServerOptions o;
  o.listen = "127.0.0.1:0";
  DataServer server(MakeSource(10, 1, 1.0, 4), 3, o);
  ASSERT_TRUE(server.Start().ok());
  const events::Ready ready = server.ReadyEvent();
  EXPECT_GT(ready.port, 0);
  EXPECT_GT(ready.metrics_port, 0);
  EXPECT_EQ(ready.port, server.port());
  EXPECT_EQ(Served(*net::Transport::Plaintext(), server.port()), 10);
  server.Stop();
  EXPECT_EQ(Served(*net::Transport::Plaintext(), server.port()), -1);
  server.Stop();
}

// Its transport is the one it was given: a role with the job's TLS refuses a plain peer, and a
// peer of the job whose role does not read data (net/access.h).
TEST(DataServerRole, ServesThroughTheTransportItWasGiven) {
  auto ca = net::MakeJobCertificates("test-job", {"*.test-job"});
  ASSERT_TRUE(ca.ok());
  auto roles = net::IssueRoleCertificates(*ca, {"*.test-job"});
  ASSERT_TRUE(roles.ok());
  spec::DataServerOptions o;
  o.listen = "127.0.0.1:0";
  RoleProcess process;
  process.transport = net::Transport::MutualTls(roles->at("data-server"));
  DataServer server(MakeSource(6, 1, 1.0, 4), 3, o, process);
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(Served(*net::Transport::MutualTls(roles->at("trainer")), server.port()), 6);
  EXPECT_EQ(Served(*net::Transport::MutualTls(roles->at("ps")), server.port()), -1);
  EXPECT_EQ(Served(*net::Transport::Plaintext(), server.port()), -1);
}

// A listen address that cannot be bound fails Start naming it, and leaves nothing serving.
TEST(DataServerRole, AnAddressInUseFailsStartNamingIt) {
  spec::DataServerOptions o;
  o.listen = "127.0.0.1:0";
  DataServer first(MakeSource(4, 1, 1.0, 4), 3, o);
  ASSERT_TRUE(first.Start().ok());
  o.listen = "127.0.0.1:" + std::to_string(first.port());
  DataServer second(MakeSource(4, 1, 1.0, 4), 3, o);
  const Status st = second.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(o.listen), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace adam::data_server
