// The training report: its HTML and SVG, and the page as headless Chromium renders it (a
// screenshot that must show the charts, not a blank page).
#include "launcher/report.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "testing/chromium.h"
#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam::launcher {
namespace {

RunRecord Sample() {
  RunRecord r;
  r.job = "tiny <job> & co";
  for (int e = 1; e <= 6; ++e) r.epochs.push_back({e, 10.0 * e, 0.9 / e, 0.7 + 0.03 * e});
  for (int t = 1; t <= 60; ++t) r.rates.push_back({double(t), t == 31 ? 1200.0 : 5000.0 + 10 * t});
  r.marks.push_back({30.0, "kill -9 ps-0"});
  r.marks.push_back({30.6, "failover: ps-0 lost, 3 shard(s) moved"});
  r.summary = {{"result", "completed"}, {"test accuracy", "88.00%"}};
  r.classes = {{"T-shirt/top", 100, 91}, {"<odd> & name", 50, 0}};
  return r;
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(Report, ChartsEveryEpochAndMarksEveryFault) {
  const std::string html = RenderReportHtml(Sample());
  EXPECT_EQ(Count(html, "<svg"), 3u);
  EXPECT_EQ(Count(html, "<polyline class=\"series\""), 3u);
  EXPECT_EQ(Count(html, "<line class=\"mark-line\""), 2u);
  // 0.6 s apart on a 60 s axis: one badge numbers both lines, and the table has a row each.
  EXPECT_EQ(Count(html, "<g class=\"mark\">"), 1u);
  EXPECT_NE(html.find(">1-2</text>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>1</td><td>30.0</td><td>kill -9 ps-0</td></tr>"), std::string::npos);
  EXPECT_NE(
      html.find("<tr><td>2</td><td>30.6</td><td>failover: ps-0 lost, 3 shard(s) moved</td></tr>"),
      std::string::npos);
  // One dot per epoch on the accuracy and loss charts (the 60-point rate line has none).
  EXPECT_EQ(Count(html, "<circle"), 12u);
  EXPECT_NE(html.find("<td>6</td><td>60.0</td><td>0.1500</td><td>88.00%</td>"), std::string::npos);
  // The final model per class, by name.
  EXPECT_NE(html.find("<tr><td>T-shirt/top</td><td>100</td><td>91</td><td>91.00%</td></tr>"),
            std::string::npos);
  EXPECT_NE(html.find("<tr><td>&lt;odd&gt; &amp; name</td><td>50</td><td>0</td><td>0.00%</td>"),
            std::string::npos);
  // Escaped, self-contained: no script, nothing fetched.
  EXPECT_NE(html.find("tiny &lt;job&gt; &amp; co"), std::string::npos);
  EXPECT_EQ(html.find("<job>"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

TEST(Report, EmptyRunSaysNoData) {
  RunRecord r;
  r.job = "empty";
  const std::string html = RenderReportHtml(r);
  EXPECT_EQ(Count(html, ">no data<"), 3u);
}

// A minimal PNG reader (8-bit RGB or RGBA, no interlace): enough to look at a screenshot.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3
};

uint32_t Be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}

bool DecodePng(const std::string& file, Image* img, std::string* error) {
  const std::string data = testing::ReadText(file);
  const auto* d = reinterpret_cast<const uint8_t*>(data.data());
  if (data.size() < 8 || data.compare(1, 3, "PNG") != 0) return *error = "not a PNG", false;
  size_t pos = 8;
  int depth = 0, color = 0;
  std::string idat;
  while (pos + 12 <= data.size()) {
    const uint32_t len = Be32(d + pos);
    const std::string type = data.substr(pos + 4, 4);
    if (pos + 12 + len > data.size()) return *error = "truncated chunk", false;
    const uint8_t* body = d + pos + 8;
    if (type == "IHDR") {
      img->width = int(Be32(body));
      img->height = int(Be32(body + 4));
      depth = body[8];
      color = body[9];
      if (body[12] != 0) return *error = "interlaced", false;
    } else if (type == "IDAT") {
      idat.append(reinterpret_cast<const char*>(body), len);
    }
    pos += 12 + len;
  }
  if (depth != 8 || (color != 2 && color != 6)) return *error = "unsupported PNG format", false;
  const int bpp = color == 6 ? 4 : 3;
  const size_t stride = size_t(img->width) * bpp;
  std::vector<uint8_t> raw((stride + 1) * size_t(img->height));
  uLongf out_len = raw.size();
  if (uncompress(raw.data(), &out_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) !=
          Z_OK ||
      out_len != raw.size())
    return *error = "bad image data", false;
  std::vector<uint8_t> prev(stride, 0), cur(stride);
  img->rgb.resize(size_t(img->width) * img->height * 3);
  for (int y = 0; y < img->height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* line = &raw[y * (stride + 1) + 1];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= size_t(bpp) ? cur[i - bpp] : 0, b = prev[i],
                c = i >= size_t(bpp) ? prev[i - bpp] : 0;
      int v = line[i];
      switch (filter) {
        case 1:
          v += a;
          break;
        case 2:
          v += b;
          break;
        case 3:
          v += (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          v += (pa <= pb && pa <= pc) ? a : pb <= pc ? b : c;
          break;
        }
        default:
          break;
      }
      cur[i] = uint8_t(v);
    }
    for (int x = 0; x < img->width; ++x)
      for (int k = 0; k < 3; ++k)
        img->rgb[(size_t(y) * img->width + x) * 3 + k] = cur[size_t(x) * bpp + k];
    prev.swap(cur);
  }
  return true;
}

TEST(Report, HeadlessChromiumShowsTheCharts) {
  const std::string chromium = testing::Chromium();
  if (chromium.empty())
    GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  testing::TmpDir dir;
  const std::string page = dir.File("index.html");
  std::ofstream(page) << RenderReportHtml(Sample());
  const std::string shot = dir.File("shot.png");
  const std::string cmd = chromium +
                          " --headless --no-sandbox --disable-gpu --hide-scrollbars "
                          "--no-first-run --user-data-dir=" +
                          dir.File("profile") + " --window-size=800,1200 --screenshot=" + shot +
                          " file://" + page + " > " + dir.File("chromium.log") + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << testing::ReadText(dir.File("chromium.log"));
  Image img;
  std::string error;
  ASSERT_TRUE(DecodePng(shot, &img, &error)) << error;
  EXPECT_EQ(img.width, 800);
  EXPECT_EQ(img.height, 1200);
  size_t non_white = 0, series_pixels = 0;
  std::set<uint32_t> colors;
  for (size_t i = 0; i < img.rgb.size(); i += 3) {
    const uint8_t r = img.rgb[i], g = img.rgb[i + 1], b = img.rgb[i + 2];
    if (r < 245 || g < 245 || b < 245) ++non_white;
    colors.insert(uint32_t(r) << 16 | uint32_t(g) << 8 | b);
    // The accuracy line's blue (#1f77b4) and the throughput line's green (#2ca02c), roughly.
    if ((std::abs(r - 0x1f) < 30 && std::abs(g - 0x77) < 30 && std::abs(b - 0xb4) < 30) ||
        (std::abs(r - 0x2c) < 30 && std::abs(g - 0xa0) < 30 && std::abs(b - 0x2c) < 30))
      ++series_pixels;
  }
  const size_t pixels = img.rgb.size() / 3;
  EXPECT_GT(non_white, pixels / 100) << "the page looks blank";
  EXPECT_GT(series_pixels, 500u) << "no chart lines drawn";
  EXPECT_GT(colors.size(), 20u);
}

// A chaos run's faults, as a --chaos 40 run has them: a kill every 1-2 s, its restart, the
// failover and the under-replication it causes, some within a few pixels of each other, out of
// time order as the launcher may record them. Chromium's layout shows every badge readable
// (its label inside it, none overlapping, all inside the chart), every line numbered exactly
// once, and the table a row per fault in time order.
TEST(Report, ChaosFaultsAreNumberedReadablyInTheBrowser) {
  const std::string chromium = testing::Chromium();
  if (chromium.empty())
    GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  RunRecord r = Sample();
  r.marks.clear();
  int failovers = 0;
  for (double t = 1.0; t < 41.0; t += 1.0 + 0.37 * double(int(t) % 3)) {
    const std::string victim = "ps-" + std::to_string(int(t) % 3);
    r.marks.push_back({t, "kill -9 " + victim});
    r.marks.push_back({t + 0.5, "failover: " + victim + " lost, 4 shard(s) moved"});
    ++failovers;
    r.marks.push_back({t + 0.6, "under-replicated: 4 shard(s)"});
    r.marks.push_back({t + 0.9, "restart " + victim});
  }
  r.marks.push_back({58.0, "every shard has all its copies again"});
  std::swap(r.marks[3], r.marks[4]);  // recorded out of order
  const size_t n = r.marks.size();
  ASSERT_GT(n, 100u);
  const std::string html = RenderReportHtml(r);
  testing::TmpDir dir;
  std::string error;
  const std::string layout = testing::BadgeLayout(chromium, html, dir, &error);
  ASSERT_TRUE(error.empty()) << error;
  // The throughput chart (the third) has every line; the layout names no problem.
  EXPECT_NE(layout.find("chart 2: " + std::to_string(n) + " lines, "), std::string::npos) << layout;
  EXPECT_EQ(Count(layout, "\n"), 2u) << layout;
  // Badges are grouped, not one per line, and not one for all.
  const size_t badges = Count(html, "<g class=\"mark\">");
  EXPECT_GT(badges, 5u);
  EXPECT_LT(badges, n);
  // A row per fault, failovers included, numbered in time order.
  EXPECT_EQ(Count(html, "</td><td>failover: ps-"), size_t(failovers));
  EXPECT_EQ(Count(html, "<tr><td>"), r.epochs.size() + r.classes.size() + n);
  EXPECT_NE(html.find("<tr><td>1</td><td>1.0</td><td>kill -9 ps-1</td></tr>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>" + std::to_string(n) + "</td><td>58.0</td>"), std::string::npos);
}

}  // namespace
}  // namespace adam::launcher
