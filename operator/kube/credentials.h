// The credentials half of the API client, shared by http_client.cc and kubeconfig.cc (not a
// public header): exec plugins and reading files whole.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "core/status.h"
#include "kube/client.h"

namespace adam::kube {

// What an exec plugin answered.
struct ExecAnswer {
  std::string token, cert_pem, key_pem;
  std::optional<std::chrono::system_clock::time_point> expiry;  // none: valid until refused
};

// Runs the plugin with KUBERNETES_EXEC_INFO set, as kubectl does, and reads the ExecCredential it
// prints. Errors name the kubeconfig field and what the plugin did wrong.
StatusOr<ExecAnswer> RunExecPlugin(const ExecPlugin& p);

// A file's whole content; `*ok` says whether it could be opened.
std::string ReadFile(const std::string& path, bool* ok);

}  // namespace adam::kube
