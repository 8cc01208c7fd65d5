// The credentials grpc.cc gives every server and channel: mutual TLS once EnableMutualTls was
// called (tls.h), else insecure. Internal to the net module.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

namespace adam::net {

std::shared_ptr<grpc::ServerCredentials> ServerCredentials();
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials();

}  // namespace adam::net
