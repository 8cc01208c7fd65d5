// The events a role tells its supervisor, typed: one struct per kind, each naming its fields once
// (`Fields`), and one pair of functions between them and the wire (`ToJson`, `FromJson`), which
// every writer (the roles) and every reader (`adam run`, the tests) goes through. On the wire an
// event is still one line, `@adam {"event": KIND, FIELD: VALUE, ...}` (core/event.h), so pod logs,
// the Go tests and docs/reference/summary-and-events.md read the same keys as before.
//
// Reading is lenient both ways, as a supervisor must be with roles of another version: a field
// the reader does not know is ignored, a missing one or one of another type keeps its default,
// and a kind it does not know reads as no event. Nothing here throws on any input (fuzzed:
// tests/fuzz/event_fuzzer.cc).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace adam::events {

// Each struct: kKind (the "event" value), its fields with their defaults, and
// Fields(self, visit), which calls visit(key, field) for every field in the order it is written.

// One class of the test set: its images and those the model got right.
struct ClassCount {
  std::string name;
  int64_t images = 0;
  int64_t correct = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("name", s.name);
    v("images", s.images);
    v("correct", s.correct);
  }
  bool operator==(const ClassCount&) const = default;
};

// Every role, once it listens: its main port, its metrics port, and each further listener by
// name (written as its own key, e.g. "replication": 40125).
struct Ready {
  static constexpr const char* kKind = "ready";
  int port = 0;
  int metrics_port = 0;
  std::map<std::string, int> ports;  // not in Fields: every other integer key of the event
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("port", s.port);
    v("metrics_port", s.metrics_port);
  }
  bool operator==(const Ready&) const = default;
};

// ---- trainers ----

struct Progress {  // every few seconds: the images trained so far
  static constexpr const char* kKind = "progress";
  int trainer = 0;
  int64_t images_total = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("trainer", s.trainer);
    v("images_total", s.images_total);
  }
  bool operator==(const Progress&) const = default;
};

struct Epoch {  // an epoch finished (`epoch` counts from 1)
  static constexpr const char* kKind = "epoch";
  int trainer = 0;
  int epoch = 0;
  double learning_rate = 0;
  int64_t images = 0;
  int64_t images_total = 0;
  double loss = 0;  // the epoch's mean training loss
  double seconds = 0;
  bool epoch_closed_early = false;      // the data server closed it at the quorum
  std::optional<double> test_accuracy;  // trainer 0's evaluation, when it evaluates
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("trainer", s.trainer);
    v("epoch", s.epoch);
    v("learning_rate", s.learning_rate);
    v("images", s.images);
    v("images_total", s.images_total);
    v("loss", s.loss);
    v("seconds", s.seconds);
    v("epoch_closed_early", s.epoch_closed_early);
    v("test_accuracy", s.test_accuracy);
  }
  bool operator==(const Epoch&) const = default;
};

struct Evaluated {  // the test accuracy of a model evaluated outside training
  static constexpr const char* kKind = "evaluated";
  int trainer = 0;
  double test_accuracy = 0;
  std::optional<double> seconds;
  std::vector<ClassCount> classes;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("trainer", s.trainer);
    v("test_accuracy", s.test_accuracy);
    v("seconds", s.seconds);
    v("classes", s.classes);
  }
  bool operator==(const Evaluated&) const = default;
};

struct Done {  // a trainer finished
  static constexpr const char* kKind = "done";
  int trainer = 0;
  int epochs = 0;
  int64_t images_total = 0;
  double seconds = 0;        // training
  double total_seconds = 0;  // from its start
  double test_accuracy = 0;
  uint64_t push_bytes = 0;
  uint64_t pull_bytes = 0;
  std::vector<ClassCount> classes;  // trainer 0's
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("trainer", s.trainer);
    v("epochs", s.epochs);
    v("images_total", s.images_total);
    v("seconds", s.seconds);
    v("total_seconds", s.total_seconds);
    v("test_accuracy", s.test_accuracy);
    v("push_bytes", s.push_bytes);
    v("pull_bytes", s.pull_bytes);
    v("classes", s.classes);
  }
  bool operator==(const Done&) const = default;
};

struct Diverged {  // the loss left any useful range; `message` says what to change
  static constexpr const char* kKind = "diverged";
  int trainer = 0;
  int epoch = 0;
  double loss = 0;
  std::string message;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("trainer", s.trainer);
    v("epoch", s.epoch);
    v("loss", s.loss);
    v("message", s.message);
  }
  bool operator==(const Diverged&) const = default;
};

struct ModelWritten {  // the ONNX file
  static constexpr const char* kKind = "model_written";
  int trainer = 0;
  std::string path;
  double test_accuracy = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("trainer", s.trainer);
    v("path", s.path);
    v("test_accuracy", s.test_accuracy);
  }
  bool operator==(const ModelWritten&) const = default;
};

struct Resumed {  // a trainer's start: the epochs the servers' checkpoints already hold
  static constexpr const char* kKind = "resumed";
  int trainer = 0;
  int epochs = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("trainer", s.trainer);
    v("epochs", s.epochs);
  }
  bool operator==(const Resumed&) const = default;
};

struct ShardFellBack {  // a pull read a shard at a lower version than the trainer read before
  static constexpr const char* kKind = "shard_fell_back";
  int trainer = 0;
  uint32_t shard = 0;
  int64_t server = 0;
  uint64_t version = 0;
  uint64_t before = 0;
  uint64_t updates = 0;  // before - version: the updates the servers no longer hold
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("trainer", s.trainer);
    v("shard", s.shard);
    v("server", s.server);
    v("version", s.version);
    v("before", s.before);
    v("updates", s.updates);
  }
  bool operator==(const ShardFellBack&) const = default;
};

struct PushCheck {  // the tagged-push checker's counts (trainer --check-pushes)
  static constexpr const char* kKind = "push_check";
  int trainer = 0;
  int round = 0;
  int pushes = 0;
  int acked = 0;
  int lost = 0;
  int twice = 0;
  int unacked_applied = 0;
  int disagree = 0;
  int unread = 0;
  int copies = 0;
  uint64_t map_version = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("trainer", s.trainer);
    v("round", s.round);
    v("pushes", s.pushes);
    v("acked", s.acked);
    v("lost", s.lost);
    v("twice", s.twice);
    v("unacked_applied", s.unacked_applied);
    v("disagree", s.disagree);
    v("unread", s.unread);
    v("copies", s.copies);
    v("map_version", s.map_version);
  }
  bool operator==(const PushCheck&) const = default;
};

// ---- parameter servers ----

struct Restored {  // shards restored from a checkpoint at start
  static constexpr const char* kKind = "restored";
  uint64_t generation = 0;
  std::string file;
  int64_t shards = 0;
  int epochs = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("generation", s.generation);
    v("file", s.file);
    v("shards", s.shards);
    v("epochs", s.epochs);
  }
  bool operator==(const Restored&) const = default;
};

struct CheckpointWriting {  // a flush began (written only when a test asks for a pause in it)
  static constexpr const char* kKind = "checkpoint_writing";
  uint64_t generation = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("generation", s.generation);
  }
  bool operator==(const CheckpointWriting&) const = default;
};

struct Checkpoint {  // a flush completed
  static constexpr const char* kKind = "checkpoint";
  uint64_t generation = 0;
  int64_t shards = 0;
  int epochs = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("generation", s.generation);
    v("shards", s.shards);
    v("epochs", s.epochs);
    v("bytes", s.bytes);
    v("seconds", s.seconds);
  }
  bool operator==(const Checkpoint&) const = default;
};

struct CheckpointRejected {  // a checkpoint file corrupt or of another shard map
  static constexpr const char* kKind = "checkpoint_rejected";
  std::string file;
  std::string reason;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("file", s.file);
    v("reason", s.reason);
  }
  bool operator==(const CheckpointRejected&) const = default;
};

struct CheckpointCopied {  // a flush's files copied to the peer over the replication network
  static constexpr const char* kKind = "checkpoint_copied";
  std::string peer;
  uint64_t generation = 0;
  int64_t files = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("peer", s.peer);
    v("generation", s.generation);
    v("files", s.files);
  }
  bool operator==(const CheckpointCopied&) const = default;
};

struct ShardMap {  // the server took a new shard map
  static constexpr const char* kKind = "shard_map";
  uint64_t version = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("version", s.version);
  }
  bool operator==(const ShardMap&) const = default;
};

struct CaughtUp {  // a promoted primary read the freshest state from its copies
  static constexpr const char* kKind = "caught_up";
  uint32_t shard = 0;
  uint64_t term = 0;
  uint64_t version = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("shard", s.shard);
    v("term", s.term);
    v("version", s.version);
  }
  bool operator==(const CaughtUp&) const = default;
};

struct PromotedFirstUpdate {  // the first update a newly promoted primary applied
  static constexpr const char* kKind = "promoted_first_update";
  uint32_t shard = 0;
  uint64_t map_version = 0;
  int64_t unix_ms = 0;  // when, on the server's clock (the launcher measures failover by it)
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("shard", s.shard);
    v("map_version", s.map_version);
    v("unix_ms", s.unix_ms);
  }
  bool operator==(const PromotedFirstUpdate&) const = default;
};

struct Retired {  // a leaving server holds nothing more and exits
  static constexpr const char* kKind = "retired";
  int64_t server = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("server", s.server);
  }
  bool operator==(const Retired&) const = default;
};

// ---- controller members ----

struct ControllerLeader {  // this member became leader
  static constexpr const char* kKind = "controller_leader";
  uint64_t id = 0;
  uint64_t term = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("id", s.id);
    v("term", s.term);
  }
  bool operator==(const ControllerLeader&) const = default;
};

struct ShardMapCommitted {  // the leader committed a new shard map
  static constexpr const char* kKind = "shard_map_committed";
  uint64_t version = 0;
  int under_replicated = 0;  // shards with fewer copies than wanted
  int servers_alive = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("version", s.version);
    v("under_replicated", s.under_replicated);
    v("servers_alive", s.servers_alive);
  }
  bool operator==(const ShardMapCommitted&) const = default;
};

struct Failover {  // copies promoted for lost servers
  static constexpr const char* kKind = "failover";
  std::vector<uint32_t> dead;
  uint64_t map_version = 0;
  int shards = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("dead", s.dead);
    v("map_version", s.map_version);
    v("shards", s.shards);
  }
  bool operator==(const Failover&) const = default;
};

struct ServerRestarted {  // a server came back under a new process
  static constexpr const char* kKind = "server_restarted";
  uint32_t server = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("server", s.server);
  }
  bool operator==(const ServerRestarted&) const = default;
};

struct ServerOnProbation {  // a server that flaps waits `ms` before it is trusted again
  static constexpr const char* kKind = "server_on_probation";
  uint32_t server = 0;
  int64_t ms = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("server", s.server);
    v("ms", s.ms);
  }
  bool operator==(const ServerOnProbation&) const = default;
};

struct ServersResized {  // an elastic resize began
  static constexpr const char* kKind = "servers_resized";
  int from = 0;
  int to = 0;
  uint64_t map_version = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("from", s.from);
    v("to", s.to);
    v("map_version", s.map_version);
  }
  bool operator==(const ServersResized&) const = default;
};

struct Rebalanced {  // every copy is where the resize wants it
  static constexpr const char* kKind = "rebalanced";
  int from = 0;
  int servers = 0;
  uint64_t copies_moved = 0;
  uint64_t copies = 0;
  uint64_t handoffs = 0;  // primaries handed off
  double seconds = 0;
  uint64_t map_version = 0;
  template <class S, class V>
  static void Fields(S& s, V&& v) {
    v("from", s.from);
    v("servers", s.servers);
    v("copies_moved", s.copies_moved);
    v("copies", s.copies);
    v("handoffs", s.handoffs);
    v("seconds", s.seconds);
    v("map_version", s.map_version);
  }
  bool operator==(const Rebalanced&) const = default;
};

using RoleEvent =
    std::variant<Ready, Progress, Epoch, Evaluated, Done, Diverged, ModelWritten, Resumed,
                 ShardFellBack, PushCheck, Restored, CheckpointWriting, Checkpoint,
                 CheckpointRejected, CheckpointCopied, ShardMap, CaughtUp, PromotedFirstUpdate,
                 Retired, ControllerLeader, ShardMapCommitted, Failover, ServerRestarted,
                 ServerOnProbation, ServersResized, Rebalanced>;

// The event as the wire carries it: {"event": KIND, fields...} (non-finite numbers as numbers;
// Emit writes them as strings, core/event.h).
nlohmann::json ToJson(const RoleEvent& event);
// The event an object carries; nullopt when it is not an object or its kind is unknown here.
std::optional<RoleEvent> FromJson(const nlohmann::json& j);
// An output line of a role: nullopt for a log line, malformed JSON or an unknown kind.
std::optional<RoleEvent> ParseLine(const std::string& line);
// Writes `@adam <json>` to stdout in one write (thread-safe).
void Emit(const RoleEvent& event);

std::string_view KindOf(const RoleEvent& event);
// Every kind, in the variant's order.
std::vector<std::string_view> Kinds();

}  // namespace adam::events
