// Which role may call which service: the table covers every service of the job and nothing else,
// and a mutual-TLS server lets a call through only when the caller's certificate names a role
// the table allows, answering others PERMISSION_DENIED with the service and the caller named.
#include "net/access.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "adam/v1/controller.grpc.pb.h"
#include "adam/v1/data.grpc.pb.h"
#include "adam/v1/model_exchange.grpc.pb.h"
#include "adam/v1/ps.grpc.pb.h"
#include "adam/v1/replica.grpc.pb.h"
#include "core/ports.h"
#include "net/grpc.h"
#include "net/tls.h"

namespace adam::net {
namespace {

TEST(Access, TheTableCoversEveryServiceOfTheJobWithRolesOfTheJob) {
  const std::set<std::string> services = {
      v1::RaftTransport::service_full_name(),  v1::Controller::service_full_name(),
      v1::ReplicaService::service_full_name(), v1::ParameterService::service_full_name(),
      v1::DataService::service_full_name(),    v1::ModelExchange::service_full_name()};
  std::set<std::string> in_table;
  for (const ServiceCallers& row : ServiceCallersTable()) {
    in_table.insert(std::string(row.service));
    EXPECT_FALSE(row.callers.empty()) << row.service;
    for (std::string_view c : row.callers)
      EXPECT_NE(std::find(kRoleNames.begin(), kRoleNames.end(), c), kRoleNames.end())
          << row.service << ": " << c;
  }
  EXPECT_EQ(in_table, services);
}

TEST(Access, ACallIsCheckedAgainstItsServicesCallers) {
  EXPECT_TRUE(CheckCaller("/adam.v1.DataService/GetBatch", {"trainer"}).ok());
  EXPECT_TRUE(CheckCaller("/adam.v1.RaftTransport/Stream", {"controller"}).ok());
  EXPECT_TRUE(CheckCaller("/adam.v1.Controller/Heartbeat", {"ps"}).ok());
  EXPECT_TRUE(CheckCaller("/adam.v1.ReplicaService/Forward", {"ps"}).ok());
  Status s = CheckCaller("/adam.v1.ReplicaService/Forward", {"trainer"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("adam.v1.ReplicaService may be called by ps only"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("\"trainer\""), std::string::npos) << s.message();
  EXPECT_FALSE(CheckCaller("/adam.v1.RaftTransport/Stream", {"ps"}).ok());
  EXPECT_FALSE(CheckCaller("/adam.v1.ParameterService/Push", {"data-server"}).ok());
  // A certificate named for no role (an older job's shared one), or naming none at all.
  EXPECT_FALSE(CheckCaller("/adam.v1.DataService/GetBatch", {"test-job"}).ok());
  s = CheckCaller("/adam.v1.DataService/GetBatch", {});
  EXPECT_NE(s.message().find("no subject CN"), std::string::npos) << s.message();
  // Services outside the table, and paths that name none.
  s = CheckCaller("/grpc.health.v1.Health/Check", {"trainer"});
  EXPECT_NE(s.message().find("grpc.health.v1.Health is not a service of the job"),
            std::string::npos)
      << s.message();
  for (const char* bad : {"", "/", "adam.v1.DataService/GetBatch", "/adam.v1.DataService"})
    EXPECT_NE(CheckCaller(bad, {"trainer"}).message().find("names no service"), std::string::npos)
        << bad;
}

// grpc::StatusCode of a unary call; UNIMPLEMENTED means the call got through to the service.
template <class Call>
grpc::StatusCode CodeOf(Call call, std::string* message = nullptr) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, std::chrono::seconds(5));
  const grpc::Status s = call(&ctx);
  if (message) *message = s.error_message();
  return s.error_code();
}

TEST(Access, AServerLetsThroughOnlyTheRolesThatMayCallEachOfItsServices) {
  auto ca = MakeJobCertificates("test-job", {"*.test-job"});
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  auto roles = IssueRoleCertificates(*ca, {"*.test-job"});
  ASSERT_TRUE(roles.ok()) << roles.status().ToString();
  ASSERT_EQ(roles->size(), kRoleNames.size());
  for (const auto& [role, m] : *roles) {
    EXPECT_EQ(*CertificateNames(m.cert_pem), std::vector<std::string>{role});
    EXPECT_TRUE(CheckIssuedBy(m.cert_pem, ca->ca_pem).ok()) << role;
  }
  // A parameter server's two services, unimplemented: a call let through ends UNIMPLEMENTED.
  v1::ReplicaService::Service replica;
  v1::DataService::Service data;
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  auto server = StartServer(*Transport::MutualTls(roles->at("ps")), address, {&replica, &data});
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  auto calls = [&](const TlsMaterial& m, std::string* replica_message = nullptr) {
    auto channel = MakeChannel(*Transport::MutualTls(m), address);
    auto r = v1::ReplicaService::NewStub(channel);
    auto d = v1::DataService::NewStub(channel);
    v1::ForwardResponse fr;
    v1::DatasetInfo info;
    return std::pair{
        CodeOf([&](grpc::ClientContext* c) { return r->Forward(c, {}, &fr); }, replica_message),
        CodeOf([&](grpc::ClientContext* c) { return d->GetInfo(c, {}, &info); })};
  };
  using C = grpc::StatusCode;
  EXPECT_EQ(calls(roles->at("ps")), std::pair(C::UNIMPLEMENTED, C::PERMISSION_DENIED));
  std::string message;
  EXPECT_EQ(calls(roles->at("trainer"), &message),
            std::pair(C::PERMISSION_DENIED, C::UNIMPLEMENTED));
  EXPECT_NE(message.find("adam.v1.ReplicaService may be called by ps only"), std::string::npos)
      << message;
  for (const char* role : {"controller", "data-server"})
    EXPECT_EQ(calls(roles->at(role)), std::pair(C::PERMISSION_DENIED, C::PERMISSION_DENIED))
        << role;
  // The CA's own first certificate, named for the job and not a role: refused everywhere.
  EXPECT_EQ(calls(*ca), std::pair(C::PERMISSION_DENIED, C::PERMISSION_DENIED));
  // A renewed trainer certificate from the same CA is a trainer's.
  auto renewed = RenewCertificate(*ca, "trainer", {"*.test-job"});
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ(calls(*renewed), std::pair(C::PERMISSION_DENIED, C::UNIMPLEMENTED));
  server->server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace adam::net
