// RenderReportHtml: SVG line charts in one HTML page.
#include "launcher/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace adam::launcher {
namespace {

std::string Num(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `ticks` ticks over `span`.
double TickStep(double span, int ticks) {
  if (!(span > 0)) return 1;
  const double raw = span / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / mag;
  return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  std::vector<RunRecord::Mark> marks;  // vertical lines at x
  int y_decimals = 2;
  bool y_from_zero = false;
  bool x_integer = false;  // ticks at whole numbers only (epochs)
};

constexpr int kWidth = 720, kHeight = 280, kLeft = 70, kRight = 20, kTop = 36, kBottom = 46;

// A numbered badge over the fault lines marks[first..last] (0-based; shown 1-based).
struct Badge {
  size_t first = 0, last = 0;
  std::string label;
  double left = 0, width = 0;
};

// Badge width for a label of digits and a dash at font-size 10 (digits are about 5.6 px wide in
// the sans-serif fonts browsers use; 7 leaves room), with 4 px padding on each side.
double BadgeWidth(const std::string& label) { return 8 + 7.0 * double(label.size()); }

// One row of badges, left to right without overlap: each starts at its first line (or just
// after the previous badge), and a line that falls under the badge being built joins it. A
// last badge that would leave the plot is merged into the one before it.
template <typename XFn>
std::vector<Badge> LayOutBadges(const std::vector<RunRecord::Mark>& marks, XFn X, double lo,
                                double hi) {
  constexpr double kGap = 2;
  std::vector<Badge> out;
  auto label = [](size_t first, size_t last) {
    return first == last ? std::to_string(first + 1)
                         : std::to_string(first + 1) + "-" + std::to_string(last + 1);
  };
  for (size_t i = 0; i < marks.size(); ++i) {
    const double x = X(marks[i].seconds);
    if (!out.empty()) {
      Badge& b = out.back();
      const double w = BadgeWidth(label(b.first, i));
      if (x <= b.left + w + kGap) {
        b.last = i;
        b.label = label(b.first, i);
        b.width = w;
        continue;
      }
    }
    Badge b{i, i, label(i, i), 0, 0};
    b.width = BadgeWidth(b.label);
    b.left = std::max(
        {lo, x - b.width / 2, out.empty() ? lo : out.back().left + out.back().width + kGap});
    out.push_back(b);
  }
  while (out.size() > 1 && out.back().left + out.back().width > hi) {
    const size_t last = out.back().last;
    out.pop_back();
    out.back().last = last;
    out.back().label = label(out.back().first, last);
    out.back().width = BadgeWidth(out.back().label);
  }
  if (!out.empty() && out.back().left + out.back().width > hi)
    out.back().left = std::max(lo, hi - out.back().width);
  return out;
}

// A chart's plot area: its data ranges (rounded out to whole ticks) and where a point lands.
struct Frame {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  double xstep = 1, ystep = 1;
  double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  double X(double x) const { return kLeft + (x - x0) / (x1 - x0) * pw; }
  double Y(double y) const { return kTop + ph - (y - y0) / (y1 - y0) * ph; }
};

// The frame that holds every point and mark of `c`; false when there is none.
bool FrameOf(const Chart& c, Frame* f) {
  for (const auto& s : c.series)
    for (const auto& [x, y] : s.points) {
      f->x0 = std::min(f->x0, x);
      f->x1 = std::max(f->x1, x);
      f->y0 = std::min(f->y0, y);
      f->y1 = std::max(f->y1, y);
    }
  for (const auto& m : c.marks) {
    f->x0 = std::min(f->x0, m.seconds);
    f->x1 = std::max(f->x1, m.seconds);
  }
  if (!std::isfinite(f->x0) || !std::isfinite(f->y0)) return false;
  if (c.y_from_zero) f->y0 = std::min(0.0, f->y0);
  if (f->x1 <= f->x0) f->x1 = f->x0 + 1;
  if (f->y1 <= f->y0) f->y1 = f->y0 + (f->y0 == 0 ? 1 : std::fabs(f->y0) * 0.1);
  f->ystep = TickStep(f->y1 - f->y0, 5);
  f->y0 = std::floor(f->y0 / f->ystep) * f->ystep;
  f->y1 = std::ceil(f->y1 / f->ystep) * f->ystep;
  f->xstep = c.x_integer ? std::max(1.0, TickStep(f->x1 - f->x0, 8)) : TickStep(f->x1 - f->x0, 8);
  return true;
}

// Grid, ticks, the plot's border and the axis labels.
std::string Axes(const Chart& c, const Frame& f) {
  std::string svg;
  for (double y = f.y0; y <= f.y1 + f.ystep / 2; y += f.ystep) {
    svg += "<line x1=\"" + Num(kLeft, 1) + "\" y1=\"" + Num(f.Y(y), 1) + "\" x2=\"" +
           Num(kLeft + f.pw, 1) + "\" y2=\"" + Num(f.Y(y), 1) + "\" stroke=\"#e4e4e4\"/>\n";
    svg += "<text x=\"" + Num(kLeft - 6, 1) + "\" y=\"" + Num(f.Y(y) + 4, 1) +
           "\" text-anchor=\"end\" font-size=\"11\" fill=\"#444\">" + Num(y, c.y_decimals) +
           "</text>\n";
  }
  for (double x = std::ceil(f.x0 / f.xstep) * f.xstep; x <= f.x1 + f.xstep / 1000; x += f.xstep) {
    svg += "<line x1=\"" + Num(f.X(x), 1) + "\" y1=\"" + Num(kTop + f.ph, 1) + "\" x2=\"" +
           Num(f.X(x), 1) + "\" y2=\"" + Num(kTop + f.ph + 4, 1) + "\" stroke=\"#444\"/>\n";
    svg += "<text x=\"" + Num(f.X(x), 1) + "\" y=\"" + Num(kTop + f.ph + 17, 1) +
           "\" text-anchor=\"middle\" font-size=\"11\" fill=\"#444\">" +
           Num(x, f.xstep < 1 ? 1 : 0) + "</text>\n";
  }
  svg += "<rect x=\"" + Num(kLeft, 1) + "\" y=\"" + Num(kTop, 1) + "\" width=\"" + Num(f.pw, 1) +
         "\" height=\"" + Num(f.ph, 1) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  svg += "<text x=\"" + Num(kLeft + f.pw / 2, 1) + "\" y=\"" + Num(kHeight - 8, 1) +
         "\" text-anchor=\"middle\" font-size=\"12\" fill=\"#222\">" + HtmlEscape(c.x_label) +
         "</text>\n";
  svg += "<text x=\"14\" y=\"" + Num(kTop + f.ph / 2, 1) +
         "\" text-anchor=\"middle\" font-size=\"12\" "
         "fill=\"#222\" transform=\"rotate(-90 14 " +
         Num(kTop + f.ph / 2, 1) + ")\">" + HtmlEscape(c.y_label) + "</text>\n";
  return svg;
}

// Faults: a dashed vertical line each, numbered as in the faults table. Numbers whose badges
// would touch share one ("4-9"), so that a chaos run's dozens of faults stay readable.
std::string Marks(const Chart& c, const Frame& f) {
  std::string svg;
  for (const auto& m : c.marks)
    svg += "<line class=\"mark-line\" x1=\"" + Num(f.X(m.seconds), 1) + "\" y1=\"" + Num(kTop, 1) +
           "\" x2=\"" + Num(f.X(m.seconds), 1) + "\" y2=\"" + Num(kTop + f.ph, 1) +
           "\" stroke=\"#d62728\" stroke-width=\"1.5\" stroke-dasharray=\"5,3\"><title>" +
           HtmlEscape(m.what) + " at " + Num(m.seconds, 1) + " s</title></line>\n";
  const auto X = [&f](double x) { return f.X(x); };
  for (const auto& b : LayOutBadges(c.marks, X, kLeft, kLeft + f.pw)) {
    std::string title;
    for (size_t i = b.first; i <= b.last; ++i)
      title += (title.empty() ? "" : "; ") + std::to_string(i + 1) + ": " + c.marks[i].what;
    svg += "<g class=\"mark\"><title>" + HtmlEscape(title) +
           "</title><rect class=\"mark-badge\" x=\"" + Num(b.left, 1) + "\" y=\"" +
           Num(kTop + 2, 1) + "\" width=\"" + Num(b.width, 1) +
           "\" height=\"14\" rx=\"3\" fill=\"#ffffff\" stroke=\"#d62728\"/><text "
           "class=\"mark-label\" x=\"" +
           Num(b.left + b.width / 2, 1) + "\" y=\"" + Num(kTop + 13, 1) +
           "\" text-anchor=\"middle\" font-size=\"10\" fill=\"#d62728\">" + b.label +
           "</text></g>\n";
  }
  return svg;
}

// Series: a polyline and a dot per point; then the legend.
std::string Lines(const Chart& c, const Frame& f) {
  std::string svg;
  for (const auto& s : c.series) {
    if (s.points.empty()) continue;
    std::string pts;
    for (const auto& [x, y] : s.points) pts += Num(f.X(x), 1) + "," + Num(f.Y(y), 1) + " ";
    svg += "<polyline class=\"series\" fill=\"none\" stroke=\"" + s.color +
           "\" stroke-width=\"2\" points=\"" + pts + "\"/>\n";
    if (s.points.size() <= 30)  // dots for per-epoch series; a long time series is a line
      for (const auto& [x, y] : s.points)
        svg += "<circle cx=\"" + Num(f.X(x), 1) + "\" cy=\"" + Num(f.Y(y), 1) +
               "\" r=\"3\" fill=\"" + s.color + "\"><title>" + HtmlEscape(s.name) + ": " +
               Num(y, c.y_decimals + 1) + "</title></circle>\n";
  }
  double lx = kLeft + 8;
  for (const auto& s : c.series) {
    svg += "<rect x=\"" + Num(lx, 1) + "\" y=\"10\" width=\"12\" height=\"12\" fill=\"" + s.color +
           "\"/>";
    svg += "<text x=\"" + Num(lx + 16, 1) + "\" y=\"20\" font-size=\"12\" fill=\"#222\">" +
           HtmlEscape(s.name) + "</text>\n";
    lx += 24 + 7.0 * double(s.name.size());
  }
  return svg;
}

std::string RenderChart(const Chart& c) {
  std::string svg = "<figure><figcaption>" + HtmlEscape(c.title) + "</figcaption>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" width=\"" +
         std::to_string(kWidth) + "\" height=\"" + std::to_string(kHeight) + "\" viewBox=\"0 0 " +
         std::to_string(kWidth) + " " + std::to_string(kHeight) + "\">\n";
  svg += "<rect x=\"0\" y=\"0\" width=\"" + std::to_string(kWidth) + "\" height=\"" +
         std::to_string(kHeight) + "\" fill=\"#ffffff\"/>\n";
  Frame f;
  if (!FrameOf(c, &f)) {
    svg += "<text x=\"" + std::to_string(kWidth / 2) + "\" y=\"" + std::to_string(kHeight / 2) +
           "\" text-anchor=\"middle\" fill=\"#666\">no data</text>\n</svg></figure>\n";
    return svg;
  }
  svg += Axes(c, f) + Marks(c, f) + Lines(c, f);
  svg += "</svg></figure>\n";
  return svg;
}

}  // namespace

std::string HtmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

namespace {

// The three charts: accuracy and loss per epoch, throughput over time with `marks` numbered.
std::string RenderCharts(const RunRecord& r, const std::vector<RunRecord::Mark>& marks) {
  Chart accuracy{
      "Test accuracy after each epoch", "epoch", "test accuracy (%)", {}, {}, 2, false, true};
  Chart loss{"Training loss (mean over trainers)", "epoch", "loss", {}, {}, 3, false, true};
  Series acc{"test accuracy", "#1f77b4", {}};
  Series lo{"training loss", "#ff7f0e", {}};
  for (const auto& e : r.epochs) {
    if (e.accuracy >= 0) acc.points.push_back({double(e.epoch), 100 * e.accuracy});
    lo.points.push_back({double(e.epoch), e.loss});
  }
  accuracy.series.push_back(acc);
  loss.series.push_back(lo);
  Chart rate{"Throughput over time (faults numbered as in the table below)",
             "seconds since training started",
             "images/s",
             {},
             marks,
             0,
             true,
             false};
  Series rs{"images/s", "#2ca02c", {}};
  for (const auto& p : r.rates) rs.points.push_back({p.seconds, p.images_per_second});
  rate.series.push_back(rs);
  return RenderChart(accuracy) + RenderChart(loss) + RenderChart(rate);
}

// The tables below the charts: epochs, classes (when known) and faults (when any).
std::string RenderTables(const RunRecord& r, const std::vector<RunRecord::Mark>& marks) {
  std::string html =
      "<h2>Epochs</h2>\n<table class=\"epochs\"><tr><th>epoch</th><th>time (s)</th><th>loss</th>"
      "<th>test accuracy</th></tr>\n";
  for (const auto& e : r.epochs)
    html += "<tr><td>" + std::to_string(e.epoch) + "</td><td>" + Num(e.seconds, 1) + "</td><td>" +
            Num(e.loss, 4) + "</td><td>" +
            (e.accuracy >= 0 ? Num(100 * e.accuracy, 2) + "%" : "-") + "</td></tr>\n";
  html += "</table>\n";
  if (!r.classes.empty()) {
    html +=
        "<h2>Classes</h2>\n<table class=\"classes\"><tr><th>class</th><th>test images</th>"
        "<th>right</th><th>accuracy</th></tr>\n";
    for (const auto& c : r.classes)
      html += "<tr><td>" + HtmlEscape(c.name) + "</td><td>" + std::to_string(c.images) +
              "</td><td>" + std::to_string(c.correct) + "</td><td>" +
              (c.images > 0 ? Num(100.0 * double(c.correct) / double(c.images), 2) + "%" : "-") +
              "</td></tr>\n";
    html += "</table>\n";
  }
  if (!marks.empty()) {
    html +=
        "<h2>Faults</h2>\n<table class=\"marks\"><tr><th>#</th><th>time "
        "(s)</th><th>event</th></tr>\n";
    for (size_t i = 0; i < marks.size(); ++i)
      html += "<tr><td>" + std::to_string(i + 1) + "</td><td>" + Num(marks[i].seconds, 1) +
              "</td><td>" + HtmlEscape(marks[i].what) + "</td></tr>\n";
    html += "</table>\n";
  }
  return html;
}

}  // namespace

std::string RenderReportHtml(const RunRecord& r) {
  // Faults in time order: the chart's badge numbers are the table's row numbers.
  std::vector<RunRecord::Mark> marks = r.marks;
  std::stable_sort(
      marks.begin(), marks.end(),
      [](const RunRecord::Mark& a, const RunRecord::Mark& b) { return a.seconds < b.seconds; });
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>Adam run: " +
      HtmlEscape(r.job) +
      "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222;background:#fff}"
      "table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px 10px;"
      "text-align:left}figure{margin:18px 0}figcaption{font-weight:bold;margin-bottom:4px}"
      "</style></head><body>\n<h1>Adam run: " +
      HtmlEscape(r.job) + "</h1>\n<table class=\"summary\">\n";
  for (const auto& [k, v] : r.summary)
    html += "<tr><th>" + HtmlEscape(k) + "</th><td>" + HtmlEscape(v) + "</td></tr>\n";
  html += "</table>\n" + RenderCharts(r, marks) + RenderTables(r, marks);
  html += "</body></html>\n";
  return html;
}

}  // namespace adam::launcher
