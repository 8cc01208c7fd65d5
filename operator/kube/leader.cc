// LeaderElector.
#include "kube/leader.h"

#include <spdlog/spdlog.h>

namespace adam::kube {
namespace {

// MicroTime, as Lease times are written.
std::string MicroTime() {
  const auto now = std::chrono::system_clock::now();
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::string t = FormatTime(now);
  char frac[16];
  std::snprintf(frac, sizeof frac, ".%06lld", static_cast<long long>(us));
  return t.substr(0, t.size() - 1) + frac + "Z";
}

}  // namespace

LeaderElector::LeaderElector(Client* client, LeaderOptions options, std::function<void()> on_started,
                             std::function<void()> on_stopped)
    : client_(client), o_(std::move(options)), on_started_(std::move(on_started)),
      on_stopped_(std::move(on_stopped)) {}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() { thread_ = std::thread([this] { Run(); }); }

Json LeaderElector::LeaseSpec(const Json& old, bool transition) const {
  Json spec = old.is_object() ? old : Json::object();
  const std::string now = MicroTime();
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
  const auto now = std::chrono::steady_clock::now();
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
  auto wait = [&](std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, d, [&] { return stop_.load(); });
  };
  while (!stop_) {
    if (TryAcquireOrRenew()) {
      last_renew_ = std::chrono::steady_clock::now();
      if (!leader_.exchange(true)) {
        spdlog::info("leader election: {} now leads {}/{}", o_.identity, o_.name_space, o_.name);
        if (on_started_) on_started_();
      }
    } else if (leader_ && std::chrono::steady_clock::now() - last_renew_ > o_.renew_deadline) {
      leader_ = false;
      spdlog::warn("leader election: {} could not renew {}/{} for {} ms; stepping down",
                   o_.identity, o_.name_space, o_.name, o_.renew_deadline.count());
      if (on_stopped_) on_stopped_();
    }
    wait(o_.retry_period);
  }
}

void LeaderElector::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_.exchange(true) && !thread_.joinable()) return;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (leader_.exchange(false)) {
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

}  // namespace adam::kube
