#include "bench_chart.h"

#include <algorithm>
#include <cstdio>

namespace gearbox::cli {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string value_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), v >= 100 ? "%.1f" : (v >= 1 ? "%.3f" : "%.4f"), v);
  return buf;
}

}  // namespace

std::string bar_chart_svg(const std::string& title, const std::vector<ChartPanel>& panels) {
  constexpr double kWidth = 760, kLabel = 220, kBarMax = 420, kRow = 26, kPanelGap = 40, kTop = 50;
  double height = kTop;
  for (const ChartPanel& p : panels) height += kPanelGap + kRow * static_cast<double>(p.bars.size());
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" +
                    num(height + 10) + "\" font-family=\"sans-serif\" font-size=\"13\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"10\" y=\"26\" font-size=\"16\" font-weight=\"bold\">" + escape(title) + "</text>\n";
  double y = kTop;
  for (const ChartPanel& p : panels) {
    svg += "<text x=\"10\" y=\"" + num(y + 18) + "\" font-weight=\"bold\">" + escape(p.title) + "</text>\n";
    y += kPanelGap - 10;
    double top = 0;
    for (const ChartBar& b : p.bars) top = std::max({top, b.value, b.p90});
    if (top <= 0) top = 1;
    for (const ChartBar& b : p.bars) {
      const double w = kBarMax * std::max(0.0, b.value) / top;
      svg += "<text x=\"10\" y=\"" + num(y + 15) + "\">" + escape(b.label) + "</text>\n";
      svg += "<rect x=\"" + num(kLabel) + "\" y=\"" + num(y + 3) + "\" width=\"" + num(w) +
             "\" height=\"16\" fill=\"#4878a8\"/>\n";
      if (b.p10 >= 0 && b.p90 >= 0) {
        const double x10 = kLabel + kBarMax * b.p10 / top, x90 = kLabel + kBarMax * b.p90 / top;
        svg += "<line x1=\"" + num(x10) + "\" y1=\"" + num(y + 11) + "\" x2=\"" + num(x90) + "\" y2=\"" + num(y + 11) +
               "\" stroke=\"black\"/>\n";
      }
      const double end = b.p90 >= 0 ? std::max(w, kBarMax * b.p90 / top) : w;  // past the whisker
      svg += "<text x=\"" + num(kLabel + end + 6) + "\" y=\"" + num(y + 15) + "\">" + value_text(b.value) + "</text>\n";
      y += kRow;
    }
    y += 10;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace gearbox::cli
