// What `adam run` tells its user: the figures it learns from the roles' events (epochs, loss and
// accuracy, failovers and their times, the controller's leader and shard map, the model
// written), one progress line per epoch on stderr, the faults marked on the report's timeline,
// the report (--report DIR) and the summary on stdout (text, or one JSON object). Used by the
// launcher's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/role_events.h"
#include "launcher/launcher.h"
#include "launcher/report.h"
#include "spec/adamjob.h"

namespace adam::launcher {

class RunLog {
 public:
  // The run starts now (its wall time counts from here).
  RunLog(const spec::AdamJob& job, const RunOptions& options);

  // Where the parameter servers' checkpoints are (named when a run resumes from them).
  void set_state_root(std::string dir) { state_root_ = std::move(dir); }
  void TrainingStarted() { train_start_ = o_.clock->Now(); }
  void TrainingEnded() { train_end_ = o_.clock->Now(); }
  double TrainSeconds() const;

  // An event of role instance `from` (not its "ready", which the launcher keeps).
  void OnEvent(const std::string& from, const events::RoleEvent& ev);
  // A fault or a turn of the run, on the report's timeline.
  void Mark(const std::string& what);
  // `name` killed by --kill: failover times are measured from now.
  void Killed(const std::string& name);
  void ChaosFault() { ++chaos_faults_; }
  // Once a second at most: the images/s the report plots.
  void SampleRate();

  // Trainer 0 did not finish while others did: the job's result must come from an evaluator of
  // the final model. Says so on stderr.
  bool NeedsFinalEvaluation();
  // The evaluator's accuracy becomes the job's; false when it reported none.
  bool TakeFinalEvaluation();

  const std::string& controller_leader() const { return controller_leader_; }
  const std::string& diverged() const { return diverged_; }

  // Writes DIR/index.html for a run that ended with `code`; false (after saying why) when it
  // cannot.
  bool WriteReport(int code);
  void PrintSummary();

 private:
  // One handler per kind the run's figures follow; the others are not acted on.
  void On(const std::string& from, const events::Progress& ev);
  void On(const std::string& from, const events::Epoch& ev);
  void On(const std::string& from, const events::Done& ev);
  void On(const std::string& from, const events::PromotedFirstUpdate& ev);
  void On(const std::string& from, const events::ModelWritten& ev);
  void On(const std::string& from, const events::Evaluated& ev);
  void On(const std::string& from, const events::Resumed& ev);
  void On(const std::string& from, const events::ShardFellBack& ev);
  void On(const std::string& from, const events::Diverged& ev);
  void On(const std::string& from, const events::Failover& ev);
  void On(const std::string& from, const events::ServersResized& ev);
  void On(const std::string& from, const events::Rebalanced& ev);
  void On(const std::string& from, const events::Retired& ev);
  void On(const std::string& from, const events::ShardMapCommitted& ev);
  void On(const std::string& from, const events::ControllerLeader& ev);
  template <class E>
  void On(const std::string& /*from*/, const E& /*ev*/) {}
  void CountImages(int trainer, int64_t images_total);
  nlohmann::json SummaryJson(int64_t images, double ips, double train, double wall) const;
  void AddFaultFields(nlohmann::json* j) const;
  void AddTrainingFields(nlohmann::json* j) const;
  // The final model's figures per class (a trainer's "classes" list).
  void TakeClasses(const std::vector<events::ClassCount>& classes);

  const spec::AdamJob& job_;
  const RunOptions& o_;
  std::string state_root_;
  Clock::TimePoint start_, train_start_, train_end_;
  std::map<int, int64_t> images_total_;
  std::map<int, events::Done> done_;
  std::map<int, std::vector<double>> epoch_loss_;
  std::optional<Clock::TimePoint> last_line_;
  int64_t last_total_ = 0;
  double last_accuracy_ = -1;
  double last_loss_ = 0;
  int last_epoch_ = 0;
  int64_t kill_unix_ms_ = 0;
  std::string killed_;
  int promoted_ = 0;  // shards that moved to a new primary since the kill
  std::set<int> promoted_shards_;
  int64_t failover_ms_ = -1, first_failover_ms_ = -1, controller_failover_ms_ = -1;
  std::string controller_leader_;
  int64_t controller_term_ = 0;
  int chaos_faults_ = 0;
  int64_t map_version_ = 0;  // the newest shard map the controller leader committed
  int failovers_ = 0;        // the controller's failovers (lost servers whose shards moved)
  // Elastic servers: each resize the controller saw through ("rebalanced" events), with when it
  // started (train seconds) for the summary.
  double resized_at_ = -1;
  nlohmann::json rebalances_ = nlohmann::json::array();
  int under_replicated_ = 0;  // its shards with fewer in-sync copies than wanted
  // Pulls that read a shard at a lower version than their trainer read before ("shard_fell_back"
  // events): how many, the largest fall, and the updates missing by trainer.
  int fell_back_ = 0;
  int64_t fell_back_largest_ = 0;
  std::map<std::string, int64_t> fell_back_updates_;
  std::string diverged_;        // the first trainer's divergence message
  std::string model_written_;   // where the final model went (a model_written event)
  double final_accuracy_ = -1;  // the evaluator's, when trainer 0 did not finish
  int evaluated_epoch_ = 0;     // the epoch of trainer 0's last evaluation
  int resumed_epochs_ = -1;     // trainer 0's start: the epochs the checkpoints held (-1: none)
  RunRecord record_;            // for --report; its `classes` for the summaries too
  std::optional<Clock::TimePoint> rate_at_;
  std::deque<std::pair<Clock::TimePoint, int64_t>> rate_window_;  // (time, images) samples
};

// Formatting shared by the progress lines, the summary and the report.
int64_t UnixMs(const Clock& clock);  // the clock's wall time in ms since 1970
std::string Clock2(double seconds);  // m:ss or h:mm:ss
std::string Percent(double fraction);
std::string Thousands(double v);  // 12,345

}  // namespace adam::launcher
