// Mutual TLS between a job's roles.
//
// Each job has its own certificate authority and one certificate per role (IssueRoleCertificates),
// for both server and client use, whose subject CN is the role's name (access.h) and which names
// every address the job's roles listen on (IPs such as 127.0.0.1, DNS names such as "*.JOB" for
// the pods under the job's headless Service). With a mutual-TLS transport, every server
// net::StartServer starts demands and verifies a client certificate from that CA and lets a call
// through only when the caller's role may make it (access.h), and every channel net::MakeChannel
// makes presents the role's certificate and verifies the server's: a peer without a certificate of
// the job is refused, and a pod holds only its own role's key. Without it (tests, `--plaintext`),
// traffic is plain. The files of a directory: ca.crt, tls.crt, tls.key (PEM), as in a Kubernetes
// TLS Secret plus its CA. Which of the two a server or channel uses is its net::Transport's
// (grpc.h): a process holds no TLS state of its own. Thread-safe.
//
// Rotation: the CA lives ten years, a certificate one (kCertificateValidity). Whoever keeps the
// CA's key (the operator, in a Secret no pod mounts) issues new certificates from the same CA
// before the old ones expire (RenewCertificate) and rewrites the files; a transport made by
// Transport::MutualTlsFromDir reads them again every `refresh`, so later handshakes use the new
// certificate without a restart. Connections already open stay up: TLS checks expiry only in
// the handshake, and old and new certificates share the CA, so every mix of them verifies.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace adam::net {

// Every job certificate also names this host, and every channel checks the server's certificate
// against it: peers are reached by IP (a replication network's address) as well as by name, and
// what authenticates a peer is the job's own CA, not its address.
inline constexpr const char* kTlsServerName = "adam-role";

inline constexpr std::chrono::seconds kCertificateValidity{365 * 86400};
inline constexpr std::chrono::seconds kCaValidity{3650 * 86400};

struct TlsMaterial {
  std::string ca_pem;    // the job's CA certificate
  std::string cert_pem;  // the roles' certificate, signed by the CA
  std::string key_pem;   // its private key
  std::string
      ca_key_pem;  // the CA's private key: only where certificates are issued, never in pods
};

// A fresh CA (valid kCaValidity) named `name` + " CA": its certificate and key only (ca_pem,
// ca_key_pem), to issue role certificates from (IssueRoleCertificates).
StatusOr<TlsMaterial> MakeCertificateAuthority(const std::string& name);
// A fresh CA (valid kCaValidity) and a certificate for `hosts` (each an IPv4 address or a DNS
// name, "*.x" allowed) valid for `validity` (P-256 keys, SHA-256 signatures). `name` goes into
// the subjects' CN. A validity at or below zero makes a certificate that has already expired
// (for tests of expiry).
StatusOr<TlsMaterial> MakeJobCertificates(const std::string& name,
                                          const std::vector<std::string>& hosts,
                                          std::chrono::seconds validity = kCertificateValidity);
// A new certificate and key for `hosts` from the CA of `ca` (its ca_pem and ca_key_pem), valid
// for `validity`; the result keeps the CA.
StatusOr<TlsMaterial> RenewCertificate(const TlsMaterial& ca, const std::string& name,
                                       const std::vector<std::string>& hosts,
                                       std::chrono::seconds validity = kCertificateValidity);
// A certificate for each role of kRoleNames (access.h), named by it, from the CA of `ca`, for
// `hosts`, valid for `validity`; each result keeps the CA.
StatusOr<std::map<std::string, TlsMaterial>> IssueRoleCertificates(
    const TlsMaterial& ca, const std::vector<std::string>& hosts,
    std::chrono::seconds validity = kCertificateValidity);
// OK when the certificate `cert_pem` carries a valid signature of the CA `ca_pem`.
Status CheckIssuedBy(const std::string& cert_pem, const std::string& ca_pem);
// The subject CNs of a PEM certificate's first certificate (a role's certificate: its role).
StatusOr<std::vector<std::string>> CertificateNames(const std::string& pem);
// The end of a PEM certificate's validity (its first certificate's notAfter).
StatusOr<std::chrono::system_clock::time_point> CertificateNotAfter(const std::string& pem);

// DIR/ca.crt, DIR/tls.crt and DIR/tls.key; an error names the missing or unreadable file, or a
// file that holds no PEM block.
StatusOr<TlsMaterial> LoadTls(const std::string& dir);
// Writes the three files (the key readable by its owner only), creating DIR; each file is
// replaced whole (written aside, then renamed), so a reader never sees half of a file.
Status WriteTls(const TlsMaterial& material, const std::string& dir);

// Checks DIR's three files as a set (LoadTls, then: the key belongs to tls.crt, which ca.crt
// signed); the error names the file at fault.
Status CheckTlsDir(const std::string& dir);

}  // namespace adam::net
