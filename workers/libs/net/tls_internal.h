// Certificate providers for a Transport (grpc.h): internal to the net module.
#pragma once

#include <grpcpp/security/tls_certificate_provider.h>

#include <chrono>
#include <memory>
#include <string>

#include "core/status.h"
#include "net/tls.h"

namespace adam::net {

using CertificateProvider = grpc::experimental::CertificateProviderInterface;

// Fixed material.
std::shared_ptr<CertificateProvider> StaticProvider(const TlsMaterial& material);
// DIR's files, checked now (CheckTlsDir) and read again every `refresh`.
StatusOr<std::shared_ptr<CertificateProvider>> DirProvider(const std::string& dir,
                                                           std::chrono::seconds refresh);

}  // namespace adam::net
