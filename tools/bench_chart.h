// The chart of `gearbox bench --svg`: one panel of horizontal bars per measurement group
// (decode ms/token per profile, prefill ms per length, round ms switching vs prefill-only),
// each panel on its own scale, as a self-contained SVG file.
#pragma once

#include <string>
#include <vector>

namespace gearbox::cli {

struct ChartBar {
  std::string label;
  double value = 0;  ///< drawn length (>= 0)
  double p10 = -1;   ///< whisker from p10 to p90 when both are >= 0
  double p90 = -1;
};

struct ChartPanel {
  std::string title;  ///< e.g. "decode, ms/token (lower is better)"
  std::vector<ChartBar> bars;
};

/// The SVG document. Labels and titles are escaped.
std::string bar_chart_svg(const std::string& title, const std::vector<ChartPanel>& panels);

}  // namespace gearbox::cli
