// The job's call table (access.h).
#include "net/access.h"

#include <algorithm>

namespace adam::net {

const std::vector<ServiceCallers>& ServiceCallersTable() {
  static const std::vector<ServiceCallers> table = {
      // The controllers' Raft group among themselves.
      {"adam.v1.RaftTransport", {"controller"}},
      // Parameter servers heartbeat; trainers and parameter servers read the shard map.
      {"adam.v1.Controller", {"ps", "trainer"}},
      // Shard copies, checkpoints and forwarded updates between parameter servers.
      {"adam.v1.ReplicaService", {"ps"}},
      // Pushes, pulls and the acknowledged-update check's reads.
      {"adam.v1.ParameterService", {"trainer"}},
      // Batches, epochs and the end of the job.
      {"adam.v1.DataService", {"trainer"}},
      // Activations and errors between the parts of a partitioned model.
      {"adam.v1.ModelExchange", {"trainer"}},
  };
  return table;
}

namespace {

std::string Join(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

}  // namespace

Status CheckCaller(std::string_view path, const std::vector<std::string>& caller_names) {
  // "/SERVICE/METHOD"
  const size_t slash = path.size() > 1 ? path.find('/', 1) : std::string_view::npos;
  if (path.empty() || path.front() != '/' || slash == std::string_view::npos)
    return FailedPreconditionError("the call names no service (path \"" + std::string(path) +
                                   "\")");
  const std::string_view service = path.substr(1, slash - 1);
  std::vector<std::string_view> names(caller_names.begin(), caller_names.end());
  const std::string caller = names.empty() ? "a certificate with no subject CN"
                                           : "the certificate of \"" + Join(names) + "\"";
  const auto& table = ServiceCallersTable();
  const auto row = std::find_if(table.begin(), table.end(),
                                [&](const ServiceCallers& r) { return r.service == service; });
  if (row == table.end())
    return FailedPreconditionError(std::string(service) +
                                   " is not a service of the job's roles; refused to " + caller);
  for (std::string_view n : names)
    if (std::find(row->callers.begin(), row->callers.end(), n) != row->callers.end())
      return OkStatus();
  return FailedPreconditionError(std::string(service) + " may be called by " + Join(row->callers) +
                                 " only; refused to " + caller);
}

}  // namespace adam::net
