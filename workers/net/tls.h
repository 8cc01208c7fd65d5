// Mutual TLS between a job's roles.
//
// Each job has its own certificate authority and one certificate, for both server and client
// use, naming every address its roles listen on (IPs such as 127.0.0.1, DNS names such as
// "*.JOB" for the pods under the job's headless Service). Once EnableMutualTls is called, every
// server net::StartServer starts demands and verifies a client certificate from that CA, and every
// channel net::MakeChannel makes presents the certificate and verifies the server's: a peer
// without a certificate of the job is refused. Without it (tests, `--plaintext`), traffic is
// plain. The files of a directory: ca.crt, tls.crt, tls.key (PEM), as in a Kubernetes TLS
// Secret plus its CA. Thread-safe; EnableMutualTls before any server or channel.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace adam::net {

// Every job certificate also names this host, and every channel checks the server's certificate
// against it: peers are reached by IP (a replication network's address) as well as by name, and
// what authenticates a peer is the job's own CA, not its address.
inline constexpr const char* kTlsServerName = "adam-role";

struct TlsMaterial {
  std::string ca_pem;    // the job's CA certificate
  std::string cert_pem;  // the roles' certificate, signed by the CA
  std::string key_pem;   // its private key
};

// A fresh CA and certificate for `hosts` (each an IPv4 address or a DNS name, "*.x" allowed),
// valid for `days` (P-256 keys, SHA-256 signatures). `name` goes into the subjects' CN.
StatusOr<TlsMaterial> MakeJobCertificates(const std::string& name, const std::vector<std::string>& hosts,
                                          int days = 365);

// DIR/ca.crt, DIR/tls.crt and DIR/tls.key; an error names the missing or unreadable file, or a
// file that holds no PEM block.
StatusOr<TlsMaterial> LoadTls(const std::string& dir);
// Writes the three files (the key readable by its owner only), creating DIR.
Status WriteTls(const TlsMaterial& material, const std::string& dir);

// Turns mutual TLS on for every later server and channel of this process.
void EnableMutualTls(const TlsMaterial& material);
bool MutualTlsEnabled();

}  // namespace adam::net
