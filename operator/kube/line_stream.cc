// StreamLines on libcurl's multi interface, driven from the calling thread.
#include "kube/line_stream.h"

#include <curl/curl.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

namespace adam::kube {
namespace {

constexpr size_t kMaxLine = size_t{64} << 20;
constexpr size_t kMaxErrorBody = size_t{64} << 10;

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Transfer {
  CURL* easy = nullptr;
  const std::function<void(int)>* on_status = nullptr;
  const std::function<bool(std::string_view)>* on_line = nullptr;
  LineStreamAnswer answer;
  LineCutter cutter{kMaxLine};
  bool reader_stopped = false;
  bool line_too_long = false;
  // What `on_status` or `on_line` threw: kept while the transfer is ended (an exception must not
  // cross libcurl's C frames), thrown again once the connection is closed.
  std::exception_ptr thrown;
};

// The end of the header block (an empty line) gives the status, once a final one (not 1xx).
size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view line(data, size * n);
  if (t->answer.code == 0 && (line == "\r\n" || line == "\n")) {
    long code = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 200) {
      t->answer.code = static_cast<int>(code);
      try {
        if (*t->on_status) (*t->on_status)(t->answer.code);
      } catch (...) {
        t->thrown = std::current_exception();
        return 0;  // anything but the length given ends the transfer
      }
    }
  }
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  if (t->answer.code != 200) {
    const size_t room = kMaxErrorBody - std::min(kMaxErrorBody, t->answer.body.size());
    t->answer.body.append(data, std::min(room, len));
    return len;
  }
  LineCutter::Cut cut = LineCutter::Cut::kMore;
  try {
    cut = t->cutter.Append(std::string_view(data, len), *t->on_line);
  } catch (...) {
    t->thrown = std::current_exception();
    return 0;
  }
  switch (cut) {
    case LineCutter::Cut::kMore:
      return len;
    case LineCutter::Cut::kStopped:
      t->reader_stopped = true;
      return 0;  // anything but `len` ends the transfer
    case LineCutter::Cut::kTooLong:
      t->line_too_long = true;
      return 0;
  }
  return 0;
}

struct EasyDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct MultiDeleter {
  void operator()(CURLM* m) const { curl_multi_cleanup(m); }
};
struct ListDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

// The server's CA, or no check at all, and a client certificate: each PEM copied by libcurl
// (CURL_BLOB_COPY), so `r` need not outlive the options.
void SetTls(CURL* e, const LineStreamRequest& r) {
  if (r.insecure_skip_tls_verify) {
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  auto blob = [](const std::string& pem) {
    return curl_blob{const_cast<char*>(pem.data()), pem.size(), CURL_BLOB_COPY};
  };
  if (!r.ca_pem.empty()) {
    curl_blob b = blob(r.ca_pem);
    curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &b);
  }
  if (!r.cert_pem.empty()) {
    curl_blob c = blob(r.cert_pem), k = blob(r.key_pem);
    curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &c);
    curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
    curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &k);
  }
}

// Everything but TLS: the address, the headers (kept by the caller until the transfer ends), the
// time-out, where errors are written and where the answer goes.
void SetRequest(CURL* e, const LineStreamRequest& r, curl_slist* headers, char* error,
                Transfer* t) {
  curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
  // The API server names a request's field manager after it (as every other request's).
  curl_easy_setopt(e, CURLOPT_USERAGENT, "adam-operator");
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(e, CURLOPT_PROXY, "");  // as the other requests: straight to the server
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error);
  if (r.timeout.count() > 0) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, long(r.timeout.count()));
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
}

std::string_view WithoutCr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

LineCutter::Cut LineCutter::Append(std::string_view data,
                                   const std::function<bool(std::string_view)>& on_line) {
  // Lines wholly inside `data` go out without a copy; only an unended tail is kept.
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      pending_.append(data);
      return pending_.size() > max_line_ ? Cut::kTooLong : Cut::kMore;
    }
    bool more = true;
    if (pending_.empty()) {
      more = on_line(WithoutCr(data.substr(0, nl)));
    } else {
      pending_.append(data.substr(0, nl));
      more = on_line(WithoutCr(pending_));
      pending_.clear();
    }
    if (!more) return Cut::kStopped;
    data.remove_prefix(nl + 1);
  }
  return Cut::kMore;
}

std::string_view LineCutter::rest() const { return WithoutCr(pending_); }

StatusOr<LineStreamAnswer> StreamLines(const LineStreamRequest& r,
                                       const std::function<void(int)>& on_status,
                                       const std::function<bool(std::string_view)>& on_line,
                                       const std::atomic<bool>* stop) {
  InitCurlOnce();
  std::unique_ptr<CURL, EasyDeleter> easy(curl_easy_init());
  std::unique_ptr<CURLM, MultiDeleter> multi(curl_multi_init());
  if (!easy || !multi) return UnavailableError("GET " + r.url + ": libcurl could not start");
  Transfer t;
  t.easy = easy.get();
  t.on_status = &on_status;
  t.on_line = &on_line;

  std::unique_ptr<curl_slist, ListDeleter> headers;
  auto add_header = [&](const std::string& h) {
    headers.reset(curl_slist_append(headers.release(), h.c_str()));
  };
  add_header("Accept: application/json");
  if (!r.token.empty()) add_header("Authorization: Bearer " + r.token);
  char error[CURL_ERROR_SIZE] = {0};
  CURL* e = easy.get();
  SetRequest(e, r, headers.get(), error, &t);
  SetTls(e, r);

  curl_multi_add_handle(multi.get(), e);
  bool stopped = false;
  for (int running = 1; running;) {
    const CURLMcode mc = curl_multi_perform(multi.get(), &running);
    if (mc != CURLM_OK) {
      curl_multi_remove_handle(multi.get(), e);
      return UnavailableError("GET " + r.url + ": " + curl_multi_strerror(mc));
    }
    if (!running) break;
    if (stop && stop->load()) {
      stopped = true;
      break;
    }
    curl_multi_poll(multi.get(), nullptr, 0, 20, nullptr);
  }
  CURLcode result = CURLE_OK;
  int queued = 0;
  while (CURLMsg* m = curl_multi_info_read(multi.get(), &queued))
    if (m->msg == CURLMSG_DONE) result = m->data.result;
  // Removing the handle closes its connection (a stream never goes back to a pool).
  curl_multi_remove_handle(multi.get(), e);

  if (t.thrown) std::rethrow_exception(t.thrown);
  if (stopped) return Status(StatusCode::kCancelled, "GET " + r.url + ": stopped");
  if (t.line_too_long)
    return DataLossError("GET " + r.url + ": a line longer than " + std::to_string(kMaxLine >> 20) +
                         " MiB");
  if (t.reader_stopped) return t.answer;
  if (result != CURLE_OK)
    return UnavailableError("GET " + r.url + ": " +
                            (error[0] ? std::string(error) : curl_easy_strerror(result)));
  // A last line the server did not end with '\n'.
  if (t.answer.code == 200 && !t.cutter.rest().empty()) on_line(t.cutter.rest());
  return t.answer;
}

}  // namespace adam::kube
