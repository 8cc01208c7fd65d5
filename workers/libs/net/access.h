// Which role may call which service of a job.
//
// Every role of a job has a certificate of its own, issued by the job's CA, whose subject CN is
// the role's name (kRoleNames: the `adam` subcommand that runs it). Over mutual TLS, every server
// a net::Transport starts checks each call's caller against ServiceCallersTable() before the
// call reaches its service: a trainer's key cannot join the controllers' Raft group, write a shard
// copy as a parameter server, or heartbeat as one, whatever it knows of the job. A call refused
// ends PERMISSION_DENIED naming the service and the caller. Services not in the table are
// refused to everyone. Plain-text transports (tests, `--plaintext`) check nothing.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace adam::net {

// The certificate names of a job's roles.
inline constexpr std::array<std::string_view, 4> kRoleNames = {"controller", "ps", "trainer",
                                                               "data-server"};

struct ServiceCallers {
  std::string_view service;               // full gRPC name, "adam.v1.DataService"
  std::vector<std::string_view> callers;  // the role names allowed to call it
};

// Each service of proto/adam/v1 and the roles that call it.
const std::vector<ServiceCallers>& ServiceCallersTable();

// OK when a caller whose certificate carries the names `caller_names` (its subject CNs) may call
// the method `path` ("/adam.v1.DataService/GetBatch"); otherwise an error naming the service,
// who may call it and who called (the server answers it PERMISSION_DENIED).
Status CheckCaller(std::string_view path, const std::vector<std::string>& caller_names);

}  // namespace adam::net
