// Raft messages on the wire (proto/adam/v1/controller.proto). Thread-safe (pure functions).
#pragma once

#include "adam/v1/controller.pb.h"
#include "core/status.h"
#include "raft/raft.h"

namespace adam::raft {

void MessageToProto(const Message& m, v1::RaftMessage* p);
// Network input: a type, entry type, entry index sequence or entry term out of range, an index or
// term of 2^62 or more, or a snapshot term above the message's is refused (InvalidArgument naming
// the field); nothing else is trusted beyond what Node::Step checks.
StatusOr<Message> MessageFromProto(const v1::RaftMessage& p);

}  // namespace adam::raft
