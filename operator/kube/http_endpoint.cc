// HttpEndpoint on cpprest's listener.
#include "kube/http_endpoint.h"

#include <cpprest/http_listener.h>

#include "core/ports.h"

namespace adam::kube {

struct HttpEndpoint::Impl {
  std::unique_ptr<web::http::experimental::listener::http_listener> listener;
  std::map<std::string, Handler> handlers;
};

StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const std::string& host, int port, std::map<std::string, Handler> handlers) {
  std::unique_ptr<HttpEndpoint> e(new HttpEndpoint());
  e->impl_ = std::make_unique<Impl>();
  e->impl_->handlers = std::move(handlers);
  // cpprest cannot report the port it bound, so port 0 picks a free one first.
  if (port == 0) {
    port = FreePort(host == "0.0.0.0" ? "127.0.0.1" : host);
    if (port == 0) return UnavailableError("no free port on " + host);
  }
  e->port_ = port;
  const std::string url = "http://" + host + ":" + std::to_string(port);
  try {
    e->impl_->listener = std::make_unique<web::http::experimental::listener::http_listener>(url);
    Impl* impl = e->impl_.get();
    e->impl_->listener->support(
        web::http::methods::GET, [impl](const web::http::http_request& req) {
          auto it = impl->handlers.find(req.relative_uri().path());
          const HttpAnswer a = it == impl->handlers.end()
                                   ? HttpAnswer{404, "text/plain; charset=utf-8", "not found\n"}
                                   : it->second();
          // The body as bytes: cpprest's std::string overloads cast a char buffer to an
          // unsigned-char stream, which UBSan reports.
          web::http::http_response resp(static_cast<web::http::status_code>(a.code));
          resp.set_body(std::vector<unsigned char>(a.body.begin(), a.body.end()));
          resp.headers().set_content_type(a.content_type);
          req.reply(resp);
        });
    e->impl_->listener->open().wait();
  } catch (const std::exception& ex) {
    return UnavailableError("cannot serve on " + url + ": " + ex.what());
  }
  return e;
}

HttpEndpoint::~HttpEndpoint() {
  if (impl_ && impl_->listener) {
    try {
      impl_->listener->close().wait();
    } catch (const std::exception&) {
    }
  }
}

}  // namespace adam::kube
