// The job's certificates (reconciler.h: EnsureCertificates): its CA, and a certificate per role,
// in two Secrets, issued once and renewed before they expire.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <set>

#include "core/exit_codes.h"
#include "net/access.h"
#include "net/tls.h"
#include "reconcile/conditions.h"
#include "reconcile/drift.h"
#include "reconcile/kueue.h"
#include "reconcile/reconciler.h"
#include "reconcile/render.h"
#include "reconcile/start_failures.h"
#include "reconcile/state.h"
#include "spec/adamjob.h"

namespace adam::op {

using kube::FormatTime;
using kube::ParseTime;

namespace {

// A Secret of the job `job` (uid `uid`), owned by it.
Json SecretObject(const std::string& name, const std::string& ns, const std::string& job,
                  const std::string& uid, const std::string& type,
                  const std::map<std::string, std::string>& data) {
  Json d = Json::object();
  for (const auto& [k, v] : data) d[k] = kube::Base64Encode(v);
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"type", type},
          {"metadata",
           {{"name", name},
            {"namespace", ns},
            {"labels",
             {{"app.kubernetes.io/name", "adam"},
              {"app.kubernetes.io/instance", job},
              {"app.kubernetes.io/managed-by", "adam-operator"},
              {kJobLabel, job},
              {kRoleLabel, "job"}}},
            {"ownerReferences",
             {{{"apiVersion", "adam.dev/v1alpha1"},
               {"kind", "AdamJob"},
               {"name", job},
               {"uid", uid},
               {"controller", true},
               {"blockOwnerDeletion", true}}}}}},
          {"data", d}};
}

// A Secret's data[key], decoded; "" when absent or not base64.
std::string SecretData(const Json& secret, const std::string& key) {
  auto v = kube::Base64Decode(secret.value("data", Json::object()).value(key, ""));
  return v.ok() ? *v : "";
}

// The certificates Secret's data: the CA's certificate and each role's certificate and key.
std::map<std::string, std::string> CertificatesData(
    const std::map<std::string, net::TlsMaterial>& roles) {
  std::map<std::string, std::string> data;
  for (const auto& [role, m] : roles) {
    data["ca.crt"] = m.ca_pem;  // the same CA's in every role's material
    data[role + ".crt"] = m.cert_pem;
    data[role + ".key"] = m.key_pem;
  }
  return data;
}

// The earliest end of validity among the roles' certificates in the certificates Secret; an
// error naming the first role whose certificate is missing or unreadable.
StatusOr<std::chrono::system_clock::time_point> EarliestNotAfter(const Json& secret) {
  std::optional<std::chrono::system_clock::time_point> earliest;
  for (std::string_view role : net::kRoleNames) {
    const std::string key = std::string(role) + ".crt";
    auto end = net::CertificateNotAfter(SecretData(secret, key));
    if (!end.ok()) return InvalidArgumentError("holds no readable " + key);
    if (!earliest || *end < *earliest) earliest = *end;
  }
  return *earliest;
}

}  // namespace

// Two Secrets per job: JOB-certs (ca.crt, and ROLE.crt and ROLE.key for each role of
// net::kRoleNames), of which each pod mounts its own role's three files only, and JOB-ca (ca.crt,
// ca.key), which no pod mounts. Made once; the CA is never regenerated while its Secret exists.
// Once less than a third of the earliest certificate's validity is left, new certificates from the
// same CA replace all of them in JOB-certs; roles read their files again every minute
// (net/tls.h).
//
// The operator never lists or watches Secrets (its RBAC has no list or watch on them): it reads
// its jobs' two by name, and only when it needs to. A certificate found valid is not read again
// until it is due for renewal, or for kSecretRecheck, whichever is sooner (a deleted JOB-tls is
// made again within that).
Status Reconciler::EnsureCertificates(State& s) {
  const std::string key = s.ns + "/" + s.name;
  {
    MutexLock lock(mu_);
    auto known = certificates_.find(key);
    if (known != certificates_.end() && known->second.uid == s.uid &&
        s.now < known->second.check_at) {
      s.renew_at = known->second.renew_at;
      return OkStatus();
    }
  }
  const std::string tls_name = CertificatesSecretName(*s.spec), ca_name = CaSecretName(*s.spec);
  ADAM_ASSIGN_OR_RETURN(const std::optional<Json> tls, OwnSecret(s, tls_name));
  bool valid = false;
  if (tls) {
    auto not_after = EarliestNotAfter(*tls);
    valid = not_after.ok() && *not_after - certificate_validity_ / 3 > s.now;
    if (valid) s.renew_at = *not_after - certificate_validity_ / 3;
  }
  if (!valid) {  // the CA is read only to issue or renew
    ADAM_ASSIGN_OR_RETURN(const std::optional<Json> ca, OwnSecret(s, ca_name));
    const std::vector<std::string> hosts = {"*." + s.name, "*." + s.name + "." + s.ns + ".svc",
                                            "*." + s.name + "." + s.ns + ".svc.cluster.local"};
    ADAM_RETURN_IF_ERROR(tls ? RenewCertificate(s, *tls, ca, hosts, &valid)
                             : IssueCertificate(s, ca, hosts, &valid));
  }
  if (valid && s.renew_at) {
    MutexLock lock(mu_);
    certificates_[key] = {s.uid, *s.renew_at, std::min(*s.renew_at, s.now + kSecretRecheck)};
  }
  return OkStatus();
}

StatusOr<std::optional<Json>> Reconciler::OwnSecret(State& s, const std::string& name) {
  auto got = client_->Get(kube::Secrets(), s.ns, name);
  if (!got.ok()) {
    if (got.status().code() == StatusCode::kNotFound) return std::optional<Json>();
    return got.status();
  }
  // A predecessor's of the same name, still being deleted, is not the job's.
  if (HasDeletion(*got)) return std::optional<Json>();
  for (const Json& ref : (*got)["metadata"].value("ownerReferences", Json::array()))
    if (ref.value("controller", false) && ref.value("uid", "") == s.uid)
      return std::optional<Json>(std::move(*got));
  return std::optional<Json>();
}

namespace {

net::TlsMaterial IssuerOf(const Json& ca_secret) {
  net::TlsMaterial m;
  m.ca_pem = SecretData(ca_secret, "ca.crt");
  m.ca_key_pem = SecretData(ca_secret, "ca.key");
  return m;
}

}  // namespace

Status Reconciler::IssueCertificate(State& s, const std::optional<Json>& ca,
                                    const std::vector<std::string>& hosts, bool* valid) {
  const std::string tls_name = CertificatesSecretName(*s.spec), ca_name = CaSecretName(*s.spec);
  StatusOr<net::TlsMaterial> issuer = ca ? IssuerOf(*ca) : net::MakeCertificateAuthority(s.name);
  if (!ca && issuer.ok()) {
    auto c =
        client_->Create(kube::Secrets(), s.ns,
                        SecretObject(ca_name, s.ns, s.name, s.uid, "Opaque",
                                     {{"ca.crt", issuer->ca_pem}, {"ca.key", issuer->ca_key_pem}}));
    if (!c.ok() && c.status().code() != StatusCode::kAlreadyExists) return c.status();
    if (!c.ok()) {  // made by an earlier pass the cache has not shown yet: issue from that CA
      ADAM_ASSIGN_OR_RETURN(const Json existing, client_->Get(kube::Secrets(), s.ns, ca_name));
      issuer = IssuerOf(existing);
    }
  }
  auto made = issuer.ok() ? net::IssueRoleCertificates(*issuer, hosts, certificate_validity_)
                          : issuer.status();
  if (!made.ok()) return Status(made.status().code(), ca_name + ": " + made.status().message());
  auto c = client_->Create(
      kube::Secrets(), s.ns,
      SecretObject(tls_name, s.ns, s.name, s.uid, "Opaque", CertificatesData(*made)));
  if (!c.ok() && c.status().code() != StatusCode::kAlreadyExists) return c.status();
  s.renew_at = s.now + certificate_validity_ - certificate_validity_ / 3;
  *valid = c.ok();  // one of the same name that is not the job's is looked at again next pass
  return OkStatus();
}

Status Reconciler::RenewCertificate(State& s, const Json& tls, const std::optional<Json>& ca,
                                    const std::vector<std::string>& hosts, bool* valid) {
  const std::string ca_name = CaSecretName(*s.spec);
  const auto renew_before = certificate_validity_ / 3;
  auto not_after = EarliestNotAfter(tls);
  const std::string expiry = not_after.ok() ? "the earliest expires at " + FormatTime(*not_after)
                                            : "Secret " + CertificatesSecretName(*s.spec) + " " +
                                                  not_after.status().message();
  if (!ca) return NotRenewable(s, expiry, "Secret " + ca_name + " with its CA's key is missing");
  auto renewed = net::IssueRoleCertificates(IssuerOf(*ca), hosts, certificate_validity_);
  if (!renewed.ok()) {
    return NotRenewable(s, expiry,
                        "Secret " + ca_name + " is unusable: " + renewed.status().message());
  }
  Json updated = tls;
  updated["data"] = Json::object();
  for (const auto& [key, pem] : CertificatesData(*renewed))
    updated["data"][key] = kube::Base64Encode(pem);
  auto u = client_->Update(kube::Secrets(), s.ns, updated);  // ABORTED if the cache was stale
  if (!u.ok()) return u.status();
  {
    MutexLock lock(mu_);
    certificate_warned_.erase(s.ns + "/" + s.name);
  }
  const auto new_end = s.now + certificate_validity_;
  Event(s, "Normal", "CertificateRenewed",
        "the job's certificates: " + expiry + "; renewed from the job's CA until " +
            FormatTime(new_end) +
            " (each role reads it within a minute of its Secret volume's update)");
  s.renew_at = new_end - renew_before;
  *valid = true;
  return OkStatus();
}

// The job's pods keep being looked after while someone mends the CA Secret. Every reconcile
// tries again; one fault is warned of at most hourly.
Status Reconciler::NotRenewable(State& s, const std::string& expiry, const std::string& why) {
  bool warn = false;
  {
    MutexLock lock(mu_);
    auto& [when, what] = certificate_warned_[s.ns + "/" + s.name];
    if (what != why || s.now - when >= std::chrono::hours(1)) {
      when = s.now;
      what = why;
      warn = true;
    }
  }
  if (warn) {
    const std::string tls_name = CertificatesSecretName(*s.spec);
    Event(s, "Warning", "CertificateNotRenewable",
          "the job's certificates in Secret " + tls_name + ": " + expiry + ", and " + why +
              "; mend it, or delete " + tls_name +
              " and the job's pods to start over with a new CA");
  }
  s.renew_at = s.now + std::chrono::hours(1);
  return OkStatus();
}

}  // namespace adam::op
