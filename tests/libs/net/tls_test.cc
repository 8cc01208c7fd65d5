// Mutual TLS: a peer with the job's certificate connects; one without a certificate, or with a
// certificate from another CA, is refused during the handshake. A certificate renewed from the
// job's CA, written over the files, is used for the next handshake without a restart.
#include "net/tls.h"

#include <gtest/gtest.h>

#include "adam/v1/controller.grpc.pb.h"
#include "core/ports.h"
#include "net/grpc.h"
#include "testing/tmp_dir.h"
#include "testing/wait.h"

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

  const auto tls = Transport::MutualTls(*loaded);
  ASSERT_TRUE(tls->tls());
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  adam::v1::Controller::Service unimplemented;  // any service: the handshake is what is tested
  auto server = StartServer(*tls, address, {&unimplemented});
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  EXPECT_TRUE(Connects(MakeChannel(*tls, address)));  // the job's certificate
  EXPECT_FALSE(Connects(MakeChannel(*Transport::Plaintext(), address)));
  EXPECT_FALSE(Connects(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
  EXPECT_FALSE(Connects(WithCerts(address, nullptr, job->ca_pem)));  // TLS, no client certificate
  auto other = MakeJobCertificates("intruder", {"127.0.0.1"});
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(Connects(WithCerts(address, &*other, job->ca_pem)));  // another CA's certificate
  // And the channel checks the server: with another job's CA as its root, no connection.
  EXPECT_FALSE(Connects(WithCerts(address, &*job, other->ca_pem)));
  server->server->Shutdown(std::chrono::system_clock::now());
}

TEST(Tls, ARenewedCertificateIsUsedWithoutARestart) {
  using std::chrono::system_clock;
  // An expired certificate: handshakes fail both ways.
  auto job = MakeJobCertificates("test-job", {"*.test-job"}, std::chrono::seconds(-60));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto expired_at = CertificateNotAfter(job->cert_pem);
  ASSERT_TRUE(expired_at.ok());
  EXPECT_LT(*expired_at, system_clock::now());
  EXPECT_GT(*CertificateNotAfter(job->ca_pem), system_clock::now() + std::chrono::hours(24 * 3000));
  testing::TmpDir dir;
  ASSERT_TRUE(WriteTls(*job, dir.File("tls")).ok());
  auto tls = Transport::MutualTlsFromDir(dir.File("tls"), std::chrono::seconds(1));
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  adam::v1::Controller::Service unimplemented;
  auto server = StartServer(**tls, address, {&unimplemented});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_FALSE(Connects(MakeChannel(**tls, address)));

  // Renewed from the same CA and written over the files: the running server and new channels
  // pick it up within the refresh period.
  auto renewed = RenewCertificate(*job, "test-job", {"*.test-job"});
  ASSERT_TRUE(renewed.ok()) << renewed.status().ToString();
  EXPECT_EQ(renewed->ca_pem, job->ca_pem);
  EXPECT_TRUE(CheckIssuedBy(renewed->cert_pem, job->ca_pem).ok());
  EXPECT_NE(renewed->key_pem, job->key_pem);
  EXPECT_GT(*CertificateNotAfter(renewed->cert_pem),
            system_clock::now() + std::chrono::hours(24 * 364));
  ASSERT_TRUE(WriteTls(*renewed, dir.File("tls")).ok());
  EXPECT_TRUE(testing::Eventually([&] { return Connects(MakeChannel(**tls, address)); },
                                  std::chrono::seconds(10)));
  // A peer still holding the old, expired certificate is refused; one renewed separately from
  // the same CA is accepted (pods pick up the Secret at different moments).
  EXPECT_FALSE(Connects(WithCerts(address, &*job, job->ca_pem)));
  auto other_renewal = RenewCertificate(*job, "test-job", {"*.test-job"});
  ASSERT_TRUE(other_renewal.ok());
  EXPECT_TRUE(Connects(WithCerts(address, &*other_renewal, job->ca_pem)));
  server->server->Shutdown(system_clock::now());
}

// TLS is a transport's, not the process's: plain and mutual-TLS servers and channels side by side,
// each channel reaching only the servers of its own kind.
TEST(Tls, PlainAndMutualTlsTransportsLiveInOneProcess) {
  auto job = MakeJobCertificates("test-job", {"*.test-job"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const auto tls = Transport::MutualTls(*job);
  const auto plain = Transport::Plaintext();
  EXPECT_FALSE(plain->tls());
  adam::v1::Controller::Service a, b;
  const std::string secure = "127.0.0.1:" + std::to_string(FreePort());
  const std::string open = "127.0.0.1:" + std::to_string(FreePort());
  auto s1 = StartServer(*tls, secure, {&a});
  auto s2 = StartServer(*plain, open, {&b});
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_TRUE(Connects(MakeChannel(*tls, secure)));
  EXPECT_TRUE(Connects(MakeChannel(*plain, open)));
  EXPECT_FALSE(Connects(MakeChannel(*plain, secure)));
  EXPECT_FALSE(Connects(MakeChannel(*tls, open)));
  s1->server->Shutdown(std::chrono::system_clock::now());
  s2->server->Shutdown(std::chrono::system_clock::now());
}

TEST(Tls, BadMaterialIsRefusedNamingTheFile) {
  auto a = MakeJobCertificates("a", {"*.a"});
  auto b = MakeJobCertificates("b", {"*.b"});
  ASSERT_TRUE(a.ok() && b.ok());
  // Renewing needs the CA's own key.
  TlsMaterial wrong = *a;
  wrong.ca_key_pem = b->ca_key_pem;
  auto r = RenewCertificate(wrong, "a", {"*.a"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ca.key"), std::string::npos) << r.status().ToString();
  wrong.ca_key_pem.clear();
  EXPECT_FALSE(RenewCertificate(wrong, "a", {"*.a"}).ok());
  EXPECT_FALSE(CertificateNotAfter("garbage").ok());
  // A key that does not belong to the certificate, and a certificate file without PEM.
  testing::TmpDir dir;
  TlsMaterial mixed = *a;
  mixed.key_pem = b->key_pem;
  ASSERT_TRUE(WriteTls(mixed, dir.File("mixed")).ok());
  Status s = Transport::MutualTlsFromDir(dir.File("mixed")).status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tls.key does not belong"), std::string::npos) << s.ToString();
  // A certificate of another CA than ca.crt's.
  TlsMaterial foreign = *a;
  foreign.cert_pem = b->cert_pem;
  foreign.key_pem = b->key_pem;
  ASSERT_TRUE(WriteTls(foreign, dir.File("foreign")).ok());
  s = Transport::MutualTlsFromDir(dir.File("foreign")).status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tls.crt is not signed by"), std::string::npos) << s.ToString();
  EXPECT_TRUE(CheckIssuedBy(a->cert_pem, a->ca_pem).ok());
  EXPECT_FALSE(CheckIssuedBy(b->cert_pem, a->ca_pem).ok());
  TlsMaterial junk = *a;
  junk.cert_pem = "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n";
  ASSERT_TRUE(WriteTls(junk, dir.File("junk")).ok());
  s = Transport::MutualTlsFromDir(dir.File("junk")).status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tls.crt"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace adam::net
