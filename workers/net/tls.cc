// Job certificates with OpenSSL; the process-wide TLS material used by grpc.cc.
#include "net/tls.h"

#include <arpa/inet.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>

#include "net/tls_internal.h"

namespace adam::net {
namespace {

template <typename T, void (*F)(T*)>
struct Free {
  void operator()(T* p) const { F(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Free<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Free<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Free<BIO, BIO_free_all>>;

std::string BioText(BIO* b) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  return std::string(data, size_t(n > 0 ? n : 0));
}

bool AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

Cert NewCert(const std::string& cn, EVP_PKEY* key, int days) {
  Cert c(X509_new());
  if (!c) return nullptr;
  X509_set_version(c.get(), 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof serial);
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(c.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(c.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(c.get()), long(days) * 86400);
  X509_set_pubkey(c.get(), key);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(c.get()), "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return c;
}

std::mutex g_mu;
TlsMaterial g_material;
bool g_enabled = false;

}  // namespace

StatusOr<TlsMaterial> MakeJobCertificates(const std::string& name,
                                          const std::vector<std::string>& hosts, int days) {
  if (hosts.empty()) return InvalidArgumentError("a job certificate needs at least one host");
  Key ca_key(EVP_EC_gen("P-256")), key(EVP_EC_gen("P-256"));
  if (!ca_key || !key) return InternalError("cannot generate EC keys");
  Cert ca = NewCert(name + " CA", ca_key.get(), days);
  Cert leaf = NewCert(name, key.get(), days);
  if (!ca || !leaf) return InternalError("cannot create certificates");
  X509_set_issuer_name(ca.get(), X509_get_subject_name(ca.get()));
  X509_set_issuer_name(leaf.get(), X509_get_subject_name(ca.get()));
  std::string san = std::string("DNS:") + kTlsServerName;
  for (const std::string& h : hosts) {
    in_addr a{};
    san += san.empty() ? "" : ",";
    san += (inet_pton(AF_INET, h.c_str(), &a) == 1 ? "IP:" : "DNS:") + h;
  }
  if (!AddExt(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE") ||
      !AddExt(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !AddExt(ca.get(), ca.get(), NID_subject_key_identifier, "hash") ||
      !AddExt(leaf.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !AddExt(leaf.get(), ca.get(), NID_key_usage, "critical,digitalSignature,keyAgreement") ||
      !AddExt(leaf.get(), ca.get(), NID_ext_key_usage, "serverAuth,clientAuth") ||
      !AddExt(leaf.get(), ca.get(), NID_subject_alt_name, san))
    return InvalidArgumentError("cannot name the hosts " + san + " in a certificate");
  if (X509_sign(ca.get(), ca_key.get(), EVP_sha256()) <= 0 ||
      X509_sign(leaf.get(), ca_key.get(), EVP_sha256()) <= 0)
    return InternalError("cannot sign the certificates");
  TlsMaterial m;
  Bio b1(BIO_new(BIO_s_mem())), b2(BIO_new(BIO_s_mem())), b3(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(b1.get(), ca.get());
  PEM_write_bio_X509(b2.get(), leaf.get());
  PEM_write_bio_PrivateKey(b3.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  m.ca_pem = BioText(b1.get());
  m.cert_pem = BioText(b2.get());
  m.key_pem = BioText(b3.get());
  return m;
}

StatusOr<TlsMaterial> LoadTls(const std::string& dir) {
  TlsMaterial m;
  for (auto [file, out] : {std::pair<const char*, std::string*>{"ca.crt", &m.ca_pem},
                           {"tls.crt", &m.cert_pem},
                           {"tls.key", &m.key_pem}}) {
    const std::string path = dir + "/" + file;
    std::ifstream f(path, std::ios::binary);
    if (!f) return NotFoundError(path + ": cannot read (TLS material: ca.crt, tls.crt, tls.key)");
    std::stringstream ss;
    ss << f.rdbuf();
    *out = ss.str();
    if (out->find("-----BEGIN ") == std::string::npos)
      return InvalidArgumentError(path + ": no PEM block");
  }
  return m;
}

Status WriteTls(const TlsMaterial& m, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return UnavailableError(dir + ": " + ec.message());
  for (auto [file, text] : {std::pair<const char*, const std::string*>{"ca.crt", &m.ca_pem},
                            {"tls.crt", &m.cert_pem},
                            {"tls.key", &m.key_pem}}) {
    const std::string path = dir + "/" + file;
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << *text;
    if (!f) return UnavailableError(path + ": cannot write");
    f.close();
    if (std::string(file) == "tls.key") chmod(path.c_str(), 0600);
  }
  return OkStatus();
}

void EnableMutualTls(const TlsMaterial& material) {
  std::lock_guard<std::mutex> l(g_mu);
  g_material = material;
  g_enabled = true;
}

bool MutualTlsEnabled() {
  std::lock_guard<std::mutex> l(g_mu);
  return g_enabled;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials() {
  std::lock_guard<std::mutex> l(g_mu);
  if (!g_enabled) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = g_material.ca_pem;
  o.pem_key_cert_pairs.push_back({g_material.key_pem, g_material.cert_pem});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() {
  std::lock_guard<std::mutex> l(g_mu);
  if (!g_enabled) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = g_material.ca_pem;
  o.pem_private_key = g_material.key_pem;
  o.pem_cert_chain = g_material.cert_pem;
  return grpc::SslCredentials(o);
}

}  // namespace adam::net
