// Mutual TLS: a peer with the job's certificate connects; one without a certificate, or with a
// certificate from another CA, is refused during the handshake.
#include "net/tls.h"

#include <gtest/gtest.h>

#include "adam/v1/controller.grpc.pb.h"
#include "core/ports.h"
#include "net/grpc.h"
#include "testing/tmp_dir.h"

namespace adam::net {
namespace {

bool Connects(std::shared_ptr<grpc::Channel> ch) {
  return ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::milliseconds(800));
}

std::shared_ptr<grpc::Channel> WithCerts(const std::string& address, const TlsMaterial* m,
                                         const std::string& ca) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca;
  if (m) {
    o.pem_private_key = m->key_pem;
    o.pem_cert_chain = m->cert_pem;
  }
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride(kTlsServerName);
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(o), args);
}

TEST(Tls, OnlyPeersWithTheJobsCertificateConnect) {
  // No 127.0.0.1 among the hosts: channels check the common server name, and the CA decides.
  auto job = MakeJobCertificates("test-job", {"*.test-job"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_NE(job->ca_pem.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_NE(job->key_pem.find("PRIVATE KEY"), std::string::npos);
  // Files round trip.
  testing::TmpDir dir;
  ASSERT_TRUE(WriteTls(*job, dir.File("tls")).ok());
  auto loaded = LoadTls(dir.File("tls"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->cert_pem, job->cert_pem);
  EXPECT_NE(LoadTls(dir.File("nowhere")).status().message().find("ca.crt"), std::string::npos);

  EnableMutualTls(*loaded);
  ASSERT_TRUE(MutualTlsEnabled());
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  adam::v1::Controller::Service unimplemented;  // any service: the handshake is what is tested
  auto server = StartServer(address, {&unimplemented});
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  EXPECT_TRUE(Connects(MakeChannel(address)));  // this process: the job's certificate
  EXPECT_FALSE(Connects(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
  EXPECT_FALSE(Connects(WithCerts(address, nullptr, job->ca_pem)));  // TLS, no client certificate
  auto other = MakeJobCertificates("intruder", {"127.0.0.1"});
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(Connects(WithCerts(address, &*other, job->ca_pem)));  // another CA's certificate
  // And the channel checks the server: with another job's CA as its root, no connection.
  EXPECT_FALSE(Connects(WithCerts(address, &*job, other->ca_pem)));
  server->server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace adam::net
