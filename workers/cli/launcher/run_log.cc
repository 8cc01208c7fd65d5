#include "launcher/run_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/event.h"

namespace adam::launcher {

int64_t UnixMs(const Clock& clock) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock.WallNow().time_since_epoch())
      .count();
}

std::string Clock2(double s) {
  const int t = int(s);
  char b[32];
  if (t >= 3600)
    std::snprintf(b, sizeof b, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(b, sizeof b, "%d:%02d", t / 60, t % 60);
  return b;
}

std::string Percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100 * fraction);
  return buf;
}

std::string Thousands(double v) {
  const std::string digits = std::to_string(int64_t(std::llround(v)));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') out += ',';
    out += digits[i];
  }
  return out;
}

RunLog::RunLog(const spec::AdamJob& job, const RunOptions& options)
    : job_(job), o_(options), start_(o_.clock->Now()), train_start_(start_), train_end_(start_) {}

void RunLog::Killed(const std::string& name) {
  kill_unix_ms_ = UnixMs(*o_.clock);
  killed_ = name;
}

bool RunLog::NeedsFinalEvaluation() {
  if (done_.count(0) || done_.empty()) return false;
  for (const auto& [_, ev] : done_) last_epoch_ = std::max(last_epoch_, ev.epochs);
  std::fprintf(stderr,
               "adam run: trainer-0 did not finish (its last evaluation was after epoch %d); "
               "evaluating the final model (epoch %d) with an evaluator\n",
               evaluated_epoch_, last_epoch_);
  return true;
}

bool RunLog::TakeFinalEvaluation() {
  if (final_accuracy_ < 0) return false;
  last_accuracy_ = final_accuracy_;
  Mark("final model evaluated without trainer-0");
  std::fprintf(stderr, "adam run: the final model: test accuracy %s\n",
               Percent(last_accuracy_).c_str());
  return true;
}

void RunLog::OnEvent(const std::string& from, const events::RoleEvent& ev) {
  std::visit([&](const auto& e) { On(from, e); }, ev);
}

void RunLog::CountImages(int trainer, int64_t images_total) {
  images_total_[trainer] = std::max<int64_t>(images_total_[trainer], images_total);
}

void RunLog::On(const std::string& /*from*/, const events::Progress& ev) {
  CountImages(ev.trainer, ev.images_total);
}

void RunLog::On(const std::string& /*from*/, const events::Done& ev) {
  CountImages(ev.trainer, ev.images_total);
  done_[ev.trainer] = ev;
  if (ev.trainer == 0) TakeClasses(ev.classes);
}

void RunLog::On(const std::string& from, const events::PromotedFirstUpdate& ev) {
  if (kill_unix_ms_ <= 0) return;
  const int64_t ms = ev.unix_ms - kill_unix_ms_;
  if (promoted_ == 0) {
    std::fprintf(stderr,
                 "adam run: failover: %s accepted its first update as the new primary "
                 "of shard %u %lld ms after the kill\n",
                 from.c_str(), ev.shard, static_cast<long long>(ms));
    Mark(from + ": first update as a new primary");
  }
  // Shards, not promotions: a shard promoted again (its new primary lost too) moved once.
  promoted_shards_.insert(int(ev.shard));
  promoted_ = int(promoted_shards_.size());
  failover_ms_ = std::max(failover_ms_, ms);
  if (first_failover_ms_ < 0) first_failover_ms_ = ms;
}

void RunLog::On(const std::string& /*from*/, const events::ModelWritten& ev) {
  model_written_ = ev.path;
}

// The evaluator's, or trainer 0's in a job resumed after its last epoch.
void RunLog::On(const std::string& /*from*/, const events::Evaluated& ev) {
  final_accuracy_ = ev.test_accuracy;
  last_accuracy_ = final_accuracy_;
  TakeClasses(ev.classes);
}

void RunLog::On(const std::string& from, const events::Diverged& ev) {
  if (diverged_.empty())
    diverged_ = from + ": " + (ev.message.empty() ? "training diverged" : ev.message);
}

// The controller leader moved a lost server's shards: one row per failover in the report.
void RunLog::On(const std::string& /*from*/, const events::Failover& ev) {
  std::string dead;
  for (uint32_t d : ev.dead) dead += (dead.empty() ? "ps-" : ", ps-") + std::to_string(d);
  if (dead.empty()) dead = "a parameter server";
  ++failovers_;
  std::fprintf(stderr, "adam run: failover: %s lost; %d shard(s) moved (shard map v%llu)\n",
               dead.c_str(), ev.shards, static_cast<unsigned long long>(ev.map_version));
  Mark("failover: " + dead + " lost, " + std::to_string(ev.shards) + " shard(s) moved");
}

void RunLog::On(const std::string& /*from*/, const events::ShardMapCommitted& ev) {
  if (int64_t(ev.version) < map_version_) return;
  map_version_ = int64_t(ev.version);
  if (ev.under_replicated > 0 && under_replicated_ == 0)
    Mark("under-replicated: " + std::to_string(ev.under_replicated) + " shard(s)");
  else if (ev.under_replicated == 0 && under_replicated_ > 0)
    Mark("every shard has all its copies again");
  under_replicated_ = ev.under_replicated;
}

void RunLog::On(const std::string& from, const events::ControllerLeader& ev) {
  if (!controller_leader_.empty() && controller_leader_ != from)
    Mark("new controller leader " + from);
  controller_leader_ = from;
  controller_term_ = int64_t(ev.term);
  if (kill_unix_ms_ > 0 && controller_failover_ms_ < 0 && from != killed_)
    controller_failover_ms_ = UnixMs(*o_.clock) - kill_unix_ms_;
}

// A trainer's start: which epoch it goes on at.
void RunLog::On(const std::string& /*from*/, const events::Resumed& ev) {
  // The first trainer to start where the checkpoints are; not a trainer restarted mid-run
  // (it too starts where the job is, after this run's own epochs). Another trainer may have
  // finished this run's first epoch before a start is read: epochs it ended are not held. Any
  // trainer's start counts, not only trainer 0's: one that starts after another ended the
  // run's first epoch joins at the next (the servers' epoch count is the job's), one past what
  // the checkpoints held, so the first start read is the one that names them.
  const int held = ev.epochs;
  if (resumed_epochs_ < 0 && (epoch_loss_.empty() || held < epoch_loss_.begin()->first)) {
    resumed_epochs_ = held;
    last_epoch_ = std::max(last_epoch_, held);
    evaluated_epoch_ = std::max(evaluated_epoch_, held);
    std::fprintf(stderr, "adam run: resuming: the checkpoints in %s hold %d of %d epochs%s\n",
                 state_root_.c_str(), resumed_epochs_, job_.training.epochs,
                 resumed_epochs_ < job_.training.epochs ? "" : " (nothing left to train)");
    Mark("resumed after epoch " + std::to_string(resumed_epochs_));
  }
}

// A trainer read a shard at a lower version than it had read before: updates the servers lost.
void RunLog::On(const std::string& from, const events::ShardFellBack& ev) {
  const auto updates = int64_t(ev.updates);
  if (fell_back_ == 0)
    std::fprintf(stderr,
                 "adam run: %s read shard %u from ps-%lld at version %llu, %lld updates under "
                 "what it read before: the servers no longer hold them\n",
                 from.c_str(), ev.shard, static_cast<long long>(ev.server),
                 static_cast<unsigned long long>(ev.version), static_cast<long long>(updates));
  ++fell_back_;
  fell_back_largest_ = std::max(fell_back_largest_, updates);
  fell_back_updates_[from] += updates;
}

// Elastic servers: a resize, the rebalance it ended with, a server that left.
void RunLog::On(const std::string& /*from*/, const events::ServersResized& ev) {
  std::fprintf(stderr, "adam run: parameter servers %d -> %d: the controller moves copies\n",
               ev.from, ev.to);
  Mark("parameter servers " + std::to_string(ev.from) + " -> " + std::to_string(ev.to));
  resized_at_ = TrainSeconds();
}

void RunLog::On(const std::string& /*from*/, const events::Rebalanced& ev) {
  std::fprintf(stderr,
               "adam run: rebalanced over %d parameter servers in %.2f s: %llu of %llu "
               "copies moved, %llu primaries handed off\n",
               ev.servers, ev.seconds, static_cast<unsigned long long>(ev.copies_moved),
               static_cast<unsigned long long>(ev.copies),
               static_cast<unsigned long long>(ev.handoffs));
  Mark("rebalanced over " + std::to_string(ev.servers) + " servers");
  rebalances_.push_back({{"from", ev.from},
                         {"servers", ev.servers},
                         {"copies_moved", ev.copies_moved},
                         {"copies", ev.copies},
                         {"handoffs", ev.handoffs},
                         {"seconds", ev.seconds},
                         {"at_train_seconds", resized_at_}});
}

void RunLog::On(const std::string& from, const events::Retired& /*ev*/) {
  std::fprintf(stderr, "adam run: %s retired: its copies moved to the other servers\n",
               from.c_str());
  Mark(from + " retired");
}

void RunLog::On(const std::string& /*from*/, const events::Epoch& ev) {
  CountImages(ev.trainer, ev.images_total);
  const int epoch = ev.epoch;
  epoch_loss_[epoch].push_back(ev.loss);
  if (ev.trainer != 0) return;
  const auto now = o_.clock->Now();
  int64_t total = 0;
  for (const auto& [_, v] : images_total_) total += v;
  const auto since = last_line_ ? *last_line_ : train_start_;
  const double dt = std::chrono::duration<double>(now - since).count();
  const double ips = dt > 0 ? double(total - last_total_) / dt : 0;
  last_line_ = now;
  last_total_ = total;
  double loss = 0;
  for (double l : epoch_loss_[epoch]) loss += l;
  loss /= double(epoch_loss_[epoch].size());
  last_accuracy_ = ev.test_accuracy.value_or(-1.0);
  last_epoch_ = epoch;
  evaluated_epoch_ = epoch;
  last_loss_ = loss;
  record_.epochs.push_back(
      {epoch, std::chrono::duration<double>(now - train_start_).count(), loss, last_accuracy_});
  std::fprintf(stderr, "epoch %3d/%-3d  loss %.4f  test acc %6.2f%%  %9s img/s  %s\n", epoch,
               job_.training.epochs, loss, 100 * last_accuracy_, Thousands(ips).c_str(),
               Clock2(std::chrono::duration<double>(now - start_).count()).c_str());
  std::fflush(stderr);
}

double RunLog::TrainSeconds() const { return o_.clock->SecondsSince(train_start_); }

void RunLog::Mark(const std::string& what) { record_.marks.push_back({TrainSeconds(), what}); }

// Throughput for the report: every second, the trainers' images over the last 5 s (trainers
// report their counts every few seconds, so a shorter window would alternate 0 and spikes).
void RunLog::SampleRate() {
  if (o_.report_dir.empty()) return;
  const auto now = o_.clock->Now();
  if (rate_at_ && now - *rate_at_ < std::chrono::seconds(1)) return;
  rate_at_ = now;
  int64_t total = 0;
  for (const auto& [_, v] : images_total_) total += v;
  rate_window_.push_back({now, total});
  while (rate_window_.size() > 1 && now - rate_window_.front().first > std::chrono::seconds(5))
    rate_window_.pop_front();
  const auto& [t0, n0] = rate_window_.front();
  const double dt = std::chrono::duration<double>(now - t0).count();
  if (dt >= 1.0) record_.rates.push_back({TrainSeconds(), double(total - n0) / dt});
}

void RunLog::TakeClasses(const std::vector<events::ClassCount>& classes) {
  if (classes.empty()) return;
  record_.classes.clear();
  for (const auto& c : classes) record_.classes.push_back({c.name, c.images, c.correct});
}

// Writes DIR/index.html; false (after saying why) when it cannot.
bool RunLog::WriteReport(int code) {
  int64_t images = 0;
  for (const auto& [_, v] : images_total_) images += v;
  record_.job = job_.name;
  record_.summary = {
      {"result", code == 0 ? "completed" : "failed (exit " + std::to_string(code) + ")"},
      {"epochs", std::to_string(last_epoch_) + " of " + std::to_string(job_.training.epochs)},
      {"test accuracy", last_accuracy_ >= 0 ? Percent(last_accuracy_) : "-"},
      {"images", Thousands(double(images))},
      {"wall time", Clock2(o_.clock->SecondsSince(start_))},
      {"trainers", std::to_string(job_.roles.trainer.replicas) + " x " +
                       std::to_string(job_.roles.trainer.threads) + " threads"},
      {"parameter servers", std::to_string(job_.roles.parameter_server.replicas) + " (copies " +
                                std::to_string(job_.roles.parameter_server.copies) + ")"}};
  if (first_failover_ms_ >= 0)
    record_.summary.push_back({"failover (kill to first update on the new primary)",
                               std::to_string(first_failover_ms_) + " ms"});
  if (controller_failover_ms_ >= 0)
    record_.summary.push_back(
        {"controller failover", std::to_string(controller_failover_ms_) + " ms"});
  if (o_.chaos_seconds > 0)
    record_.summary.push_back({"chaos faults", std::to_string(chaos_faults_)});
  if (failovers_ > 0)
    record_.summary.push_back({"parameter-server failovers", std::to_string(failovers_)});
  if (map_version_ > 0)
    record_.summary.push_back(
        {"shards under-replicated at the end", std::to_string(under_replicated_)});
  std::error_code ec;
  std::filesystem::create_directories(o_.report_dir, ec);
  const std::string path = o_.report_dir + "/index.html";
  std::ofstream out(path);
  out << RenderReportHtml(record_);
  out.close();
  if (!out) {
    std::fprintf(stderr, "adam run: cannot write the report %s\n", path.c_str());
    return false;
  }
  std::fprintf(stderr, "adam run: report written to %s\n", path.c_str());
  return true;
}

// The JSON summary (--output json): the run's figures, its faults and trainer 0's evaluations.
nlohmann::json RunLog::SummaryJson(int64_t images, double ips, double train, double wall) const {
  nlohmann::json j = {{"job", job_.name},
                      {"test_accuracy", last_accuracy_},
                      {"train_loss", last_loss_},
                      {"epochs", last_epoch_},
                      {"images", images},
                      {"images_per_second", ips},
                      {"train_seconds", train},
                      {"wall_seconds", wall},
                      {"trainers", job_.roles.trainer.replicas},
                      {"threads_per_trainer", job_.roles.trainer.threads},
                      {"parameter_servers", job_.roles.parameter_server.replicas}};
  AddFaultFields(&j);
  if (!rebalances_.empty()) j["rebalances"] = rebalances_;
  if (!model_written_.empty()) j["model"] = model_written_;
  if (resumed_epochs_ > 0) j["resumed_after_epoch"] = resumed_epochs_;
  AddTrainingFields(&j);
  return j;
}

// The summary's faults: kills and failovers, the controller and shard map, chaos, and pulls that
// fell back.
void RunLog::AddFaultFields(nlohmann::json* out) const {
  nlohmann::json& j = *out;
  if (kill_unix_ms_ > 0) {
    j["killed"] = killed_;
    if (first_failover_ms_ >= 0) {
      j["failover_ms"] = failover_ms_;
      j["failover_first_ms"] = first_failover_ms_;
      j["shards_promoted"] = promoted_;
    }
    if (controller_failover_ms_ >= 0) j["controller_failover_ms"] = controller_failover_ms_;
  }
  if (!controller_leader_.empty())
    j["controller"] = {{"leader", controller_leader_}, {"term", controller_term_}};
  if (map_version_ > 0)
    j["shard_map"] = {{"version", map_version_}, {"under_replicated", under_replicated_}};
  if (o_.chaos_seconds > 0) j["chaos_faults"] = chaos_faults_;
  if (failovers_ > 0) j["failovers"] = failovers_;
  if (fell_back_ > 0) {
    int64_t most = 0;  // one trainer's count: the trainers see the same updates missing
    for (const auto& [_, n] : fell_back_updates_) most = std::max(most, n);
    j["pulls_fell_back"] = {
        {"count", fell_back_}, {"largest", fell_back_largest_}, {"updates", most}};
  }
}

// The summary's training record: per class, trainer 0's evaluation after each epoch (as the
// progress lines show it), and what the finished trainers sent and received per image.
void RunLog::AddTrainingFields(nlohmann::json* out) const {
  nlohmann::json& j = *out;
  if (!record_.classes.empty()) {
    nlohmann::json classes = nlohmann::json::array();
    for (const auto& c : record_.classes)
      classes.push_back({{"name", c.name},
                         {"images", c.images},
                         {"correct", c.correct},
                         {"accuracy", c.images > 0 ? double(c.correct) / double(c.images) : 0.0}});
    j["classes"] = std::move(classes);
  }
  nlohmann::json history = nlohmann::json::array();
  for (const auto& p : record_.epochs) {
    nlohmann::json e = {{"epoch", p.epoch}, {"seconds", p.seconds}, {"loss", p.loss}};
    if (p.accuracy >= 0) e["test_accuracy"] = p.accuracy;
    history.push_back(std::move(e));
  }
  j["history"] = std::move(history);
  int64_t done_images = 0, push = 0, pull = 0;
  for (const auto& [_, ev] : done_) {
    done_images += ev.images_total;
    push += int64_t(ev.push_bytes);
    pull += int64_t(ev.pull_bytes);
  }
  if (done_images > 0) {
    j["push_bytes_per_image"] = double(push) / double(done_images);
    j["pull_bytes_per_image"] = double(pull) / double(done_images);
  }
}

void RunLog::PrintSummary() {
  int64_t images = 0;
  for (const auto& [_, v] : images_total_) images += v;
  const double wall = o_.clock->SecondsSince(start_);
  const double train = std::chrono::duration<double>(train_end_ - train_start_).count();
  const double ips = train > 0 ? double(images) / train : 0;
  if (o_.json) {
    std::printf("%s\n", FiniteJson(SummaryJson(images, ips, train, wall)).dump().c_str());
  } else {
    const std::string resumed =
        resumed_epochs_ > 0 ? " (resumed after " + std::to_string(resumed_epochs_) + ")" : "";
    std::printf("%s: %d epochs%s, test accuracy %.2f%%, %s images in %s (%s img/s), wall %s\n",
                job_.name.c_str(), last_epoch_, resumed.c_str(), 100 * last_accuracy_,
                Thousands(double(images)).c_str(), Clock2(train).c_str(), Thousands(ips).c_str(),
                Clock2(wall).c_str());
    if (first_failover_ms_ >= 0)
      std::printf(
          "failover after kill -9 %s: %d shards moved; first update accepted by a new "
          "primary after %lld ms, the last after %lld ms\n",
          killed_.c_str(), promoted_, static_cast<long long>(first_failover_ms_),
          static_cast<long long>(failover_ms_));
    if (controller_failover_ms_ >= 0)
      std::printf("failover after kill -9 %s: a new controller leader after %lld ms\n",
                  killed_.c_str(), static_cast<long long>(controller_failover_ms_));
    if (fell_back_ > 0)
      std::printf(
          "pulls that read a shard at a lower version than before: %d (the largest %lld "
          "updates under it)\n",
          fell_back_, static_cast<long long>(fell_back_largest_));
    if (!record_.classes.empty()) {
      size_t width = 5;
      for (const auto& c : record_.classes) width = std::max(width, c.name.size());
      std::printf("per class of the test set:\n  %-*s %8s %8s\n", int(width), "class", "images",
                  "accuracy");
      for (const auto& c : record_.classes)
        std::printf("  %-*s %8lld %8s\n", int(width), c.name.c_str(),
                    static_cast<long long>(c.images),
                    c.images > 0 ? Percent(double(c.correct) / double(c.images)).c_str() : "-");
    }
    if (!model_written_.empty()) std::printf("model: %s (ONNX)\n", model_written_.c_str());
  }
  std::fflush(stdout);
}

}  // namespace adam::launcher
