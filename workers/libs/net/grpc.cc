// gRPC server and channel helpers.
#include "net/grpc.h"

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <netdb.h>
#include <spdlog/spdlog.h>

#include <set>
#include <thread>

#include "core/mutex.h"
#include "net/access.h"
#include "net/tls_internal.h"

namespace adam::net {

namespace {

// A pod listens on its own DNS name (NAME.SUBDOMAIN, from its headless Service), which cluster DNS
// publishes only once the endpoints controller has seen the pod: a second or so after its
// containers start. Waits until `address`'s host resolves, at most kNameWaitTries times
// kNameWaitStep; a numeric or empty host resolves at once.
constexpr int kNameWaitTries = 150;
constexpr std::chrono::milliseconds kNameWaitStep{200};

void WaitForName(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.empty() || host.front() == '[') return;  // a port alone, or an IPv6 literal
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  for (int i = 0; i < kNameWaitTries; ++i) {
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (res) ::freeaddrinfo(res);
    if (rc == 0 || (rc != EAI_AGAIN && rc != EAI_NONAME && rc != EAI_NODATA)) return;
    if (i == 0)
      spdlog::info("waiting for {} to resolve ({}): cluster DNS may not publish it yet", host,
                   ::gai_strerror(rc));
    std::this_thread::sleep_for(kNameWaitStep);
  }
}

// Checks every call's caller against the job's call table (access.h) before the call reaches
// its service. Runs on the transport's thread (IsBlocking false): it only reads the call's
// metadata and the peer's verified certificate.
class CallerCheck final : public grpc::AuthMetadataProcessor {
 public:
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* context,
                       OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) override {
    const auto path = metadata.find(":path");
    std::vector<std::string> names;
    for (const grpc::string_ref& cn : context->FindPropertyValues("x509_common_name"))
      names.emplace_back(cn.data(), cn.size());
    const Status s = CheckCaller(path == metadata.end()
                                     ? std::string_view()
                                     : std::string_view(path->second.data(), path->second.size()),
                                 names);
    if (s.ok()) return grpc::Status::OK;
    Warn(s.message());
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, s.message());
  }

 private:
  // Each refusal once per server: a misconfigured or hostile peer retries, and must not flood.
  void Warn(const std::string& what) {
    MutexLock lock(mu_);
    if (warned_.size() < 64 && warned_.insert(what).second)
      spdlog::warn("refused a call: {}", what);
  }
  Mutex mu_;
  std::set<std::string> warned_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::shared_ptr<const Transport> Transport::Plaintext() {
  static const std::shared_ptr<const Transport> plain = std::make_shared<const Transport>(nullptr);
  return plain;
}

std::shared_ptr<const Transport> Transport::MutualTls(const TlsMaterial& material) {
  return std::make_shared<const Transport>(StaticProvider(material));
}

StatusOr<std::shared_ptr<const Transport>> Transport::MutualTlsFromDir(
    const std::string& dir, std::chrono::seconds refresh) {
  ADAM_ASSIGN_OR_RETURN(auto provider, DirProvider(dir, refresh));
  return std::shared_ptr<const Transport>(std::make_shared<const Transport>(std::move(provider)));
}

std::shared_ptr<grpc::ServerCredentials> Transport::ServerCredentials() const {
  if (!provider_) return grpc::InsecureServerCredentials();
  grpc::experimental::TlsServerCredentialsOptions o(provider_);
  o.watch_root_certs();
  o.watch_identity_key_cert_pairs();
  o.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  auto credentials = grpc::experimental::TlsServerCredentials(o);
  credentials->SetAuthMetadataProcessor(std::make_shared<CallerCheck>());
  return credentials;
}

std::shared_ptr<grpc::ChannelCredentials> Transport::ChannelCredentials() const {
  if (!provider_) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions o;
  o.set_certificate_provider(provider_);
  o.watch_root_certs();
  o.watch_identity_key_cert_pairs();
  return grpc::experimental::TlsCredentials(o);
}

StatusOr<Server> StartServer(const Transport& transport, const std::string& address,
                             const std::vector<grpc::Service*>& services) {
  WaitForName(address);
  grpc::ServerBuilder builder;
  Server out;
  builder.AddListeningPort(address, transport.ServerCredentials(), &out.port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // Refuse a port another process holds instead of sharing it silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Accept the clients' keepalive pings (MakeChannel) however often they come while a call is
  // held: by default a server answers pings more often than every 5 minutes on a call that sends
  // nothing (a pull held by the consistency model, a shard-map watch) with GOAWAY.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             int(kKeepaliveTime.count()) / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  for (auto* s : services) builder.RegisterService(s);
  out.server = builder.BuildAndStart();
  if (!out.server || out.port == 0)
    return UnavailableError("cannot listen on " + address + " (address in use or not local?)");
  return out;
}

StatusOr<Listeners> Listeners::Start(const Transport& transport, const std::string& address,
                                     const std::vector<grpc::Service*>& services,
                                     const std::vector<ExtraListener>& extra) {
  Listeners out;
  ADAM_ASSIGN_OR_RETURN(out.main_, StartServer(transport, address, services));
  for (const auto& l : extra) {
    auto s = StartServer(transport, l.address, l.services);
    if (!s.ok()) {
      out.Shutdown(std::chrono::milliseconds(0));
      return s.status();
    }
    spdlog::info("{} on {}", l.name,
                 l.address.substr(0, l.address.rfind(':') + 1) + std::to_string(s->port));
    out.extra_.emplace_back(l.name, std::move(*s));
  }
  return out;
}

std::vector<int> Listeners::extra_ports() const {
  std::vector<int> ports;
  ports.reserve(extra_.size());
  for (const auto& [name, s] : extra_) ports.push_back(s.port);
  return ports;
}

events::Ready Listeners::ReadyEvent(int metrics_port) const {
  events::Ready ready;
  ready.port = main_.port;
  ready.metrics_port = metrics_port;
  for (const auto& [name, s] : extra_) ready.ports[name] = s.port;
  return ready;
}

void Listeners::Shutdown(std::chrono::milliseconds grace) {
  const auto deadline = DeadlineAfter(grace);
  for (auto& [name, s] : extra_)
    if (s.server) s.server->Shutdown(deadline);
  if (main_.server) main_.server->Shutdown(deadline);
}

std::shared_ptr<grpc::Channel> MakeChannel(const Transport& transport, const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Reconnect quickly after a peer restarts instead of backing off for up to two minutes: a
  // failover must not wait on a backoff timer.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  // After a lost connection the channel re-resolves the address before it reconnects, and by
  // default waits seconds between resolutions: a restarted peer would stay unreachable that long.
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 100);
  // A peer whose address stopped answering (a pod or container gone, its node down, a network
  // that drops every packet) sends no reset: without pings a call to it waits for its deadline.
  // While calls are out, a ping every kKeepaliveTime not answered within kKeepaliveTimeout ends
  // the connection, and its calls fail UNAVAILABLE, which callers retry on a new one.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, int(kKeepaliveTime.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, int(kKeepaliveTimeout.count()));
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  if (transport.tls()) args.SetSslTargetNameOverride(kTlsServerName);
  return grpc::CreateCustomChannel(address, transport.ChannelCredentials(), args);
}

Status WaitForReady(grpc::Channel* channel, const std::string& what, const std::string& address,
                    std::chrono::milliseconds timeout) {
  if (channel->WaitForConnected(DeadlineAfter(timeout))) return OkStatus();
  return UnavailableError("cannot reach " + what + " at " + address + " within " +
                          std::to_string(timeout.count()) + " ms");
}

Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return OkStatus();
  StatusCode code = StatusCode::kInternal;
  switch (s.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      code = StatusCode::kInvalidArgument;
      break;
    case grpc::StatusCode::NOT_FOUND:
      code = StatusCode::kNotFound;
      break;
    case grpc::StatusCode::UNAVAILABLE:
      code = StatusCode::kUnavailable;
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      code = StatusCode::kDeadlineExceeded;
      break;
    case grpc::StatusCode::FAILED_PRECONDITION:
      code = StatusCode::kFailedPrecondition;
      break;
    case grpc::StatusCode::DATA_LOSS:
      code = StatusCode::kDataLoss;
      break;
    case grpc::StatusCode::CANCELLED:
      code = StatusCode::kCancelled;
      break;
    default:
      break;
  }
  return Status(code, what + ": " + s.error_message());
}

grpc::Status ToGrpc(const Status& s) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (s.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case StatusCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case StatusCode::kDataLoss:
      code = grpc::StatusCode::DATA_LOSS;
      break;
    case StatusCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case StatusCode::kFailedPrecondition:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case StatusCode::kAlreadyExists:
      code = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case StatusCode::kCancelled:
      code = grpc::StatusCode::CANCELLED;
      break;
    case StatusCode::kDeadlineExceeded:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case StatusCode::kAborted:
      code = grpc::StatusCode::ABORTED;
      break;
    case StatusCode::kOutOfRange:
      code = grpc::StatusCode::OUT_OF_RANGE;
      break;
    case StatusCode::kInternal:
      break;
  }
  return grpc::Status(code, s.message());
}

std::chrono::system_clock::time_point DeadlineAfter(std::chrono::milliseconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) {
  ctx->set_deadline(DeadlineAfter(timeout));
}

std::chrono::nanoseconds TimeLeft(const grpc::ServerContextBase& ctx) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(ctx.deadline() -
                                                              std::chrono::system_clock::now());
}

}  // namespace adam::net
