// A small HTTP server for an operator's own endpoints (/metrics, /healthz, /readyz): GET only,
// each path answered by a function. cpprest stays behind this header. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/status.h"

namespace adam::kube {

struct HttpAnswer {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpEndpoint {
 public:
  using Handler = std::function<HttpAnswer()>;
  // Serves `handlers` (path -> handler) on host:port (port 0 = any free port); other paths 404.
  static StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& host, int port,
                                                       std::map<std::string, Handler> handlers);
  ~HttpEndpoint();
  int port() const { return port_; }

 private:
  HttpEndpoint() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace adam::kube
