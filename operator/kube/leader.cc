// LeaderElector.
#include "kube/leader.h"

#include <spdlog/spdlog.h>

namespace adam::kube {

LeaderElector::LeaderElector(Client* client, LeaderOptions options,
                             std::function<void()> on_started, std::function<void()> on_stopped)
    : client_(client),
      o_(std::move(options)),
      on_started_(std::move(on_started)),
      on_stopped_(std::move(on_stopped)) {}

namespace {

int64_t Nanos(Clock::TimePoint t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

Status CheckLeaderTimes(const LeaderOptions& o, std::chrono::milliseconds request_timeout) {
  using std::to_string;
  if (o.retry_period.count() <= 0 || o.retry_period >= o.renew_deadline)
    return InvalidArgumentError("--leader-elect-retry-period (" +
                                to_string(o.retry_period.count()) +
                                " ms) must be > 0 and below --leader-elect-renew-deadline (" +
                                to_string(o.renew_deadline.count()) + " ms)");
  if (o.renew_deadline + request_timeout >= o.lease_duration)
    return InvalidArgumentError(
        "--leader-elect-renew-deadline (" + to_string(o.renew_deadline.count()) +
        " ms) plus the API request timeout (" + to_string(request_timeout.count()) +
        " ms) must be below --leader-elect-lease-duration (" + to_string(o.lease_duration.count()) +
        " ms): a leader's last write must end before a standby may take over");
  return OkStatus();
}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  thread_ = std::thread([this] { Run(); });
  watchdog_ = std::thread([this] { Watchdog(); });
}

bool LeaderElector::Leading() const {
  const int64_t at = renewed_at_.load(std::memory_order_relaxed);
  return at != 0 &&
         Nanos(o_.clock->Now()) - at < std::chrono::nanoseconds(o_.renew_deadline).count();
}

Json LeaderElector::LeaseSpec(const Json& old, bool transition) const {
  Json spec = old.is_object() ? old : Json::object();
  const std::string now = FormatMicroTime(o_.clock->WallNow());
  spec["holderIdentity"] = o_.identity;
  spec["leaseDurationSeconds"] = std::max<int64_t>(1, o_.lease_duration.count() / 1000);
  spec["renewTime"] = now;
  if (transition || !spec.contains("acquireTime")) {
    spec["acquireTime"] = now;
    spec["leaseTransitions"] = spec.value("leaseTransitions", 0) + (transition ? 1 : 0);
  }
  return spec;
}

bool LeaderElector::TryAcquireOrRenew() {
  const auto now = o_.clock->Now();
  auto lease = client_->Get(Leases(), o_.name_space, o_.name);
  if (!lease.ok()) {
    if (lease.status().code() != StatusCode::kNotFound) return false;
    Json obj = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", o_.name}, {"namespace", o_.name_space}}},
                {"spec", LeaseSpec(Json::object(), false)}};
    auto created = client_->Create(Leases(), o_.name_space, obj);
    if (!created.ok()) return false;
    observed_record_ = (*created)["spec"].dump();
    observed_at_ = now;
    return true;
  }
  const Json spec = lease->value("spec", Json::object());
  const std::string record = spec.dump();
  if (record != observed_record_) {
    observed_record_ = record;
    observed_at_ = now;
  }
  const std::string holder = spec.value("holderIdentity", "");
  const auto duration = std::chrono::seconds(spec.value("leaseDurationSeconds", 15));
  const bool mine = holder == o_.identity;
  if (!mine && !holder.empty() && now < observed_at_ + duration) return false;  // held by another
  Json updated = *lease;
  updated["spec"] = LeaseSpec(spec, !mine);
  auto put = client_->Update(Leases(), o_.name_space, updated);
  if (!put.ok()) return false;  // another candidate won this round (ABORTED) or the API failed
  observed_record_ = (*put)["spec"].dump();
  observed_at_ = now;
  return true;
}

void LeaderElector::Run() {
  while (!stop_) {
    const int64_t attempt = Nanos(o_.clock->Now());
    if (TryAcquireOrRenew()) {
      bool started = false;
      {
        MutexLock lock(mu_);
        // A renewal that succeeded after the watchdog stepped down does not undo it.
        if (stop_ || stepped_down_) break;
        // Renewed as of when the attempt began: the Lease's record is no older than that.
        started = renewed_at_.exchange(attempt) == 0;
      }
      cv_.notify_all();
      if (started) {
        spdlog::info("leader election: {} now leads {}/{}", o_.identity, o_.name_space, o_.name);
        if (on_started_) on_started_();
      }
    }
    MutexLock lock(mu_);
    if (stepped_down_) break;  // lost: campaign no more
    const auto next = o_.clock->Now() + o_.retry_period;
    while (!stop_ && o_.clock->WaitUntil(lock, cv_, next)) {
    }
  }
}

// Steps down at the renew deadline even while the campaign thread waits on a hung request.
void LeaderElector::Watchdog() {
  MutexLock lock(mu_);
  while (!stop_) {
    const int64_t at = renewed_at_.load(std::memory_order_relaxed);
    if (at == 0) {
      lock.Await(cv_,
                 [&] { return stop_.load() || renewed_at_.load(std::memory_order_relaxed) != 0; });
      continue;
    }
    const auto deadline = Clock::TimePoint(std::chrono::nanoseconds(at)) + o_.renew_deadline;
    if (o_.clock->Now() < deadline) {
      o_.clock->WaitUntil(lock, cv_, deadline);
      continue;
    }
    lock.Unlock();
    StepDown("could not renew");
    lock.Lock();
  }
}

void LeaderElector::StepDown(const char* why) {
  {
    MutexLock lock(mu_);
    if (renewed_at_.exchange(0) == 0 || stepped_down_) return;
    stepped_down_ = true;
  }
  cv_.notify_all();
  spdlog::warn("leader election: {} {} {}/{} within {} ms; stepping down", o_.identity, why,
               o_.name_space, o_.name, o_.renew_deadline.count());
  if (on_stopped_) on_stopped_();
}

void LeaderElector::Stop() {
  {
    MutexLock lock(mu_);
    if (stop_.exchange(true) && !thread_.joinable()) return;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (watchdog_.joinable()) watchdog_.join();
  bool was_leading = false;
  {
    MutexLock lock(mu_);
    was_leading = renewed_at_.exchange(0) != 0 && !stepped_down_;
    stepped_down_ = true;
  }
  if (was_leading) {
    // Give the Lease up so a successor takes over at once.
    auto lease = client_->Get(Leases(), o_.name_space, o_.name);
    if (lease.ok() && (*lease)["spec"].value("holderIdentity", "") == o_.identity) {
      Json released = *lease;
      released["spec"]["holderIdentity"] = "";
      released["spec"]["leaseDurationSeconds"] = 1;
      (void)client_->Update(Leases(), o_.name_space, released);
    }
    if (on_stopped_) on_stopped_();
  }
}

Status FencedClient::Check(const char* verb, const Resource& r) const {
  if (allowed_()) return OkStatus();
  return UnavailableError(std::string(verb) + " " + r.plural +
                          ": refused, this operator no longer "
                          "holds the leader Lease");
}

StatusOr<Json> FencedClient::Create(const Resource& r, const std::string& ns, const Json& object) {
  ADAM_RETURN_IF_ERROR(Check("create", r));
  return inner_->Create(r, ns, object);
}

StatusOr<Json> FencedClient::Update(const Resource& r, const std::string& ns, const Json& object) {
  ADAM_RETURN_IF_ERROR(Check("update", r));
  return inner_->Update(r, ns, object);
}

StatusOr<Json> FencedClient::UpdateStatus(const Resource& r, const std::string& ns,
                                          const Json& object) {
  ADAM_RETURN_IF_ERROR(Check("update status of", r));
  return inner_->UpdateStatus(r, ns, object);
}

StatusOr<Json> FencedClient::Apply(const Resource& r, const std::string& ns, const Json& object,
                                   const std::string& manager) {
  ADAM_RETURN_IF_ERROR(Check("apply", r));
  return inner_->Apply(r, ns, object, manager);
}

Status FencedClient::Delete(const Resource& r, const std::string& ns, const std::string& name) {
  ADAM_RETURN_IF_ERROR(Check("delete", r));
  return inner_->Delete(r, ns, name);
}

Status FencedClient::ForceDelete(const Resource& r, const std::string& ns,
                                 const std::string& name) {
  ADAM_RETURN_IF_ERROR(Check("delete", r));
  return inner_->ForceDelete(r, ns, name);
}

}  // namespace adam::kube
