// Job certificates with OpenSSL; the process-wide TLS material used by grpc.cc.
#include "net/tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>

#include "core/file.h"
#include "core/mutex.h"
#include "net/access.h"
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

Cert NewCert(const std::string& cn, EVP_PKEY* key, std::chrono::seconds validity) {
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
  X509_gmtime_adj(X509_getm_notAfter(c.get()), long(validity.count()));
  X509_set_pubkey(c.get(), key);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(c.get()), "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return c;
}

std::string PemOf(const X509* cert) {
  Bio b(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(b.get(), const_cast<X509*>(cert));
  return BioText(b.get());
}

std::string PemOf(EVP_PKEY* key) {
  Bio b(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(b.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  return BioText(b.get());
}

Cert ReadCert(const std::string& pem) {
  Bio b(BIO_new_mem_buf(pem.data(), int(pem.size())));
  return Cert(b ? PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr) : nullptr);
}

Key ReadKey(const std::string& pem) {
  Bio b(BIO_new_mem_buf(pem.data(), int(pem.size())));
  return Key(b ? PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr) : nullptr);
}

bool SignedBy(X509* cert, X509* ca) {
  EVP_PKEY* ca_key = X509_get0_pubkey(ca);
  return ca_key != nullptr && X509_verify(cert, ca_key) == 1;
}

}  // namespace

StatusOr<TlsMaterial> MakeCertificateAuthority(const std::string& name) {
  Key ca_key(EVP_EC_gen("P-256"));
  if (!ca_key) return InternalError("cannot generate an EC key");
  Cert ca = NewCert(name + " CA", ca_key.get(), kCaValidity);
  if (!ca) return InternalError("cannot create the CA certificate");
  X509_set_issuer_name(ca.get(), X509_get_subject_name(ca.get()));
  if (!AddExt(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE") ||
      !AddExt(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !AddExt(ca.get(), ca.get(), NID_subject_key_identifier, "hash"))
    return InternalError("cannot add the CA's extensions");
  if (X509_sign(ca.get(), ca_key.get(), EVP_sha256()) <= 0)
    return InternalError("cannot sign the CA certificate");
  TlsMaterial m;
  m.ca_pem = PemOf(ca.get());
  m.ca_key_pem = PemOf(ca_key.get());
  return m;
}

StatusOr<TlsMaterial> MakeJobCertificates(const std::string& name,
                                          const std::vector<std::string>& hosts,
                                          std::chrono::seconds validity) {
  if (hosts.empty()) return InvalidArgumentError("a job certificate needs at least one host");
  ADAM_ASSIGN_OR_RETURN(const TlsMaterial ca, MakeCertificateAuthority(name));
  return RenewCertificate(ca, name, hosts, validity);
}

StatusOr<TlsMaterial> RenewCertificate(const TlsMaterial& issuer, const std::string& name,
                                       const std::vector<std::string>& hosts,
                                       std::chrono::seconds validity) {
  if (hosts.empty()) return InvalidArgumentError("a job certificate needs at least one host");
  Cert ca = ReadCert(issuer.ca_pem);
  if (!ca) return InvalidArgumentError("ca.crt: no PEM certificate");
  Key ca_key = ReadKey(issuer.ca_key_pem);
  if (!ca_key) return InvalidArgumentError("ca.key: no PEM private key");
  if (X509_check_private_key(ca.get(), ca_key.get()) != 1)
    return InvalidArgumentError("ca.key does not belong to ca.crt");
  Key key(EVP_EC_gen("P-256"));
  if (!key) return InternalError("cannot generate an EC key");
  Cert leaf = NewCert(name, key.get(), validity);
  if (!leaf) return InternalError("cannot create the certificate");
  X509_set_issuer_name(leaf.get(), X509_get_subject_name(ca.get()));
  std::string san = std::string("DNS:") + kTlsServerName;
  for (const std::string& h : hosts) {
    in_addr a{};
    san += ",";
    san += (inet_pton(AF_INET, h.c_str(), &a) == 1 ? "IP:" : "DNS:") + h;
  }
  if (!AddExt(leaf.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !AddExt(leaf.get(), ca.get(), NID_key_usage, "critical,digitalSignature,keyAgreement") ||
      !AddExt(leaf.get(), ca.get(), NID_ext_key_usage, "serverAuth,clientAuth") ||
      !AddExt(leaf.get(), ca.get(), NID_subject_alt_name, san))
    return InvalidArgumentError("cannot name the hosts " + san + " in a certificate");
  if (X509_sign(leaf.get(), ca_key.get(), EVP_sha256()) <= 0)
    return InternalError("cannot sign the certificate");
  TlsMaterial m = issuer;
  m.cert_pem = PemOf(leaf.get());
  m.key_pem = PemOf(key.get());
  return m;
}

StatusOr<std::map<std::string, TlsMaterial>> IssueRoleCertificates(
    const TlsMaterial& ca, const std::vector<std::string>& hosts, std::chrono::seconds validity) {
  std::map<std::string, TlsMaterial> out;
  for (std::string_view role : kRoleNames) {
    ADAM_ASSIGN_OR_RETURN(out[std::string(role)],
                          RenewCertificate(ca, std::string(role), hosts, validity));
  }
  return out;
}

Status CheckIssuedBy(const std::string& cert_pem, const std::string& ca_pem) {
  Cert cert = ReadCert(cert_pem), ca = ReadCert(ca_pem);
  if (!cert) return InvalidArgumentError("no PEM certificate");
  if (!ca) return InvalidArgumentError("no PEM CA certificate");
  if (!SignedBy(cert.get(), ca.get()))
    return InvalidArgumentError("the certificate is not signed by the CA");
  return OkStatus();
}

StatusOr<std::vector<std::string>> CertificateNames(const std::string& pem) {
  Cert c = ReadCert(pem);
  if (!c) return InvalidArgumentError("no PEM certificate");
  X509_NAME* subject = X509_get_subject_name(c.get());
  std::vector<std::string> names;
  for (int i = X509_NAME_get_index_by_NID(subject, NID_commonName, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) {
    const ASN1_STRING* v = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i));
    names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(v)),
                       size_t(ASN1_STRING_length(v)));
  }
  return names;
}

StatusOr<std::chrono::system_clock::time_point> CertificateNotAfter(const std::string& pem) {
  Cert c = ReadCert(pem);
  if (!c) return InvalidArgumentError("no PEM certificate");
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(c.get()), &tm) != 1)
    return InvalidArgumentError("the certificate's notAfter is not a time");
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

StatusOr<TlsMaterial> LoadTls(const std::string& dir) {
  TlsMaterial m;
  for (auto [file, out] : {std::pair<const char*, std::string*>{"ca.crt", &m.ca_pem},
                           {"tls.crt", &m.cert_pem},
                           {"tls.key", &m.key_pem}}) {
    const std::string path = dir + "/" + file;
    auto text = ReadWholeFile(path);
    if (!text)
      return NotFoundError(path + ": cannot read (TLS material: ca.crt, tls.crt, tls.key)");
    *out = std::move(*text);
    if (out->find("-----BEGIN ") == std::string::npos)
      return InvalidArgumentError(path + ": no PEM block");
  }
  return m;
}

Status WriteTls(const TlsMaterial& m, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return UnavailableError(dir + ": " + ec.message());
  // Only the owner reads the folder: the key is never readable by anyone else, not even while it
  // is written.
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  // Each file renamed into place whole, the key before its certificate. (Kubernetes swaps all of
  // a Secret volume's files at once; this writer serves `adam run` and tests.)
  for (auto [file, text] : {std::pair<const char*, const std::string*>{"ca.crt", &m.ca_pem},
                            {"tls.key", &m.key_pem},
                            {"tls.crt", &m.cert_pem}}) {
    const std::string path = dir + "/" + file;
    const std::string aside = path + ".new";
    const int fd = ::open(aside.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                          std::string(file) == "tls.key" ? 0600 : 0644);
    if (fd < 0) return UnavailableError(aside + ": cannot write: " + std::strerror(errno));
    const ssize_t n = ::write(fd, text->data(), text->size());
    const int closed = ::close(fd);
    if (n != ssize_t(text->size()) || closed != 0)
      return UnavailableError(aside + ": cannot write");
    std::filesystem::rename(aside, path, ec);
    if (ec) return UnavailableError(path + ": " + ec.message());
  }
  return OkStatus();
}

std::shared_ptr<CertificateProvider> StaticProvider(const TlsMaterial& material) {
  return std::make_shared<grpc::experimental::StaticDataCertificateProvider>(
      material.ca_pem,
      std::vector<grpc::experimental::IdentityKeyCertPair>{{material.key_pem, material.cert_pem}});
}

Status CheckTlsDir(const std::string& dir) {
  ADAM_ASSIGN_OR_RETURN(const TlsMaterial m, LoadTls(dir));
  Cert cert = ReadCert(m.cert_pem), ca = ReadCert(m.ca_pem);
  Key key = ReadKey(m.key_pem);
  if (!cert) return InvalidArgumentError(dir + "/tls.crt: no certificate");
  if (!ca) return InvalidArgumentError(dir + "/ca.crt: no certificate");
  if (!key) return InvalidArgumentError(dir + "/tls.key: no private key");
  if (X509_check_private_key(cert.get(), key.get()) != 1)
    return InvalidArgumentError(dir + "/tls.key does not belong to " + dir + "/tls.crt");
  if (!SignedBy(cert.get(), ca.get()))
    return InvalidArgumentError(dir + "/tls.crt is not signed by " + dir + "/ca.crt");
  return OkStatus();
}

StatusOr<std::shared_ptr<CertificateProvider>> DirProvider(const std::string& dir,
                                                           std::chrono::seconds refresh) {
  ADAM_RETURN_IF_ERROR(CheckTlsDir(dir));
  return std::shared_ptr<CertificateProvider>(
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          dir + "/tls.key", dir + "/tls.crt", dir + "/ca.crt",
          unsigned(std::max<int64_t>(1, refresh.count()))));
}

}  // namespace adam::net
