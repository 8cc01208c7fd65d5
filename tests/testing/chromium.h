// Headless Chromium for the report's tests: where it is installed, and what its layout engine
// says about a page's fault badges (their boxes as the browser draws them, not as we meant them).
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>

#include "testing/tmp_dir.h"
#include "testing/wait.h"

namespace adam::testing {

inline std::string Chromium() {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (std::ifstream(c).good()) return c;
  return "";
}

// Loads `html` (plus a probe script) in headless Chromium and returns one line per chart
// ("chart N: M lines, K badges") followed by a line per problem: a label wider than its badge,
// a badge outside its chart, two badges that overlap, a fault line no badge numbers or one that
// two badges number. Empty with `*error` set when Chromium did not run.
inline std::string BadgeLayout(const std::string& chromium, const std::string& html,
                               const TmpDir& dir, std::string* error) {
  const std::string probe = R"(<script>
(function () {
  const out = [];
  document.querySelectorAll('svg').forEach((svg, n) => {
    const lines = svg.querySelectorAll('.mark-line').length;
    const box = svg.getBoundingClientRect();
    const badges = [...svg.querySelectorAll('g.mark')].map(g => ({
      r: g.querySelector('rect').getBoundingClientRect(),
      t: g.querySelector('text').getBoundingClientRect(),
      label: g.querySelector('text').textContent}));
    out.push('chart ' + n + ': ' + lines + ' lines, ' + badges.length + ' badges');
    const covered = new Array(lines + 1).fill(0);
    badges.forEach((b, i) => {
      if (b.t.left < b.r.left - 0.5 || b.t.right > b.r.right + 0.5)
        out.push('label ' + b.label + ' is wider than its badge');
      if (b.r.left < box.left || b.r.right > box.right || b.r.top < box.top || b.r.bottom > box.bottom)
        out.push('badge ' + b.label + ' is outside its chart');
      for (let j = i + 1; j < badges.length; ++j) {
        const o = badges[j].r;
        if (b.r.left < o.right && o.left < b.r.right && b.r.top < o.bottom && o.top < b.r.bottom)
          out.push('badges ' + b.label + ' and ' + badges[j].label + ' overlap');
      }
      const m = /^(\d+)(?:-(\d+))?$/.exec(b.label);
      if (!m) { out.push('badge label ' + b.label + ' is not a number or a range'); return; }
      for (let k = +m[1]; k <= +(m[2] || m[1]) && k <= lines; ++k) covered[k]++;
    });
    for (let k = 1; k <= lines; ++k)
      if (covered[k] !== 1) out.push('fault ' + k + ' is numbered by ' + covered[k] + ' badges');
  });
  const pre = document.createElement('pre');
  pre.id = 'badge-layout';
  pre.textContent = 'BEGIN\n' + out.join('\n') + '\nEND';
  document.body.appendChild(pre);
})();
</script>)";
  std::string page = html;
  const size_t body = page.rfind("</body>");
  page.insert(body == std::string::npos ? page.size() : body, probe);
  const std::string file = dir.File("probe.html"), dom = dir.File("probe.dom");
  std::ofstream(file) << page;
  const std::string cmd = chromium +
                          " --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir=" +
                          dir.File("probe-profile") + " --window-size=800,1200 --dump-dom file://" +
                          file + " > " + dom + " 2> " + dir.File("probe.log");
  if (std::system(cmd.c_str()) != 0) {
    *error = "chromium failed: " + ReadText(dir.File("probe.log"));
    return "";
  }
  const std::string text = ReadText(dom);
  const size_t begin = text.find("BEGIN\n"), end = text.find("\nEND");
  if (begin == std::string::npos || end == std::string::npos || end < begin) {
    *error = "the probe did not run; the DOM was:\n" + text.substr(0, 2000);
    return "";
  }
  return text.substr(begin + 6, end - begin - 6);
}

}  // namespace adam::testing
