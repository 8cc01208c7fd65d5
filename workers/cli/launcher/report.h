// The training report of a local run (`adam run --report DIR`): one self-contained HTML page
// with the loss and test-accuracy curves per epoch, images/s over time, and the run's faults
// (kills, restarts, failovers, under-replication) as numbered lines on the time axis and rows
// of a table. Charts are inline SVG: no script, no
// network, readable offline and in a CI artifact. Pure and thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace adam::launcher {

struct RunRecord {
  std::string job;
  struct EpochPoint {
    int epoch = 0;
    double seconds = 0;    // since training started
    double loss = 0;       // mean training loss over the trainers
    double accuracy = -1;  // test accuracy (trainer 0); < 0 when not measured
  };
  struct RatePoint {
    double seconds = 0;
    double images_per_second = 0;
  };
  struct Mark {
    double seconds = 0;
    std::string
        what;  // "kill -9 ps-0", "restart ps-0", "failover: ps-0 lost, 3 shard(s) moved", ...
  };
  std::vector<EpochPoint> epochs;
  std::vector<RatePoint> rates;
  std::vector<Mark> marks;
  // The final model per class of the test set (the data set's class names), in label order.
  struct ClassRow {
    std::string name;
    int64_t images = 0;
    int64_t correct = 0;
  };
  std::vector<ClassRow> classes;
  // Summary rows shown under the title: label -> value, in order.
  std::vector<std::pair<std::string, std::string>> summary;
};

// The report page.
std::string RenderReportHtml(const RunRecord& record);

// Escapes &, <, >, " and ' for HTML text and attributes.
std::string HtmlEscape(const std::string& text);

}  // namespace adam::launcher
