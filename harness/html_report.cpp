#include "harness/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

namespace bitparity {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                    "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};
constexpr int kChartWidth = 820;
constexpr int kChartHeight = 280;
constexpr int kMarginLeft = 78, kMarginRight = 170, kMarginTop = 30, kMarginBottom = 40;

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
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
      default:
        out += c;
    }
  }
  return out;
}

std::string Number(double v) {
  char buffer[64];
  const double a = std::fabs(v);
  if (a != 0 && (a < 1e-3 || a >= 1e6)) {
    std::snprintf(buffer, sizeof(buffer), "%.3g", v);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.4g", v);
  }
  return buffer;
}

std::string Coordinate(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.1f", v);
  return buffer;
}

// What a non-finite value is, in the words report.json and the console use.
const char* NonFiniteWord(double v) { return std::isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf"; }

const char* Color(size_t i) { return kPalette[i % (sizeof(kPalette) / sizeof(kPalette[0]))]; }

struct Series {
  std::string name;
  std::string color;
  bool dashed = false;
  std::vector<std::pair<double, double>> points;
};

// A line chart with axes, five ticks per axis and a legend on the right.
std::string LineChart(const std::string& id, const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<Series>& series) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& s : series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x);  // a non-finite y still has its place on x
      if (std::isfinite(y)) y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1;
  if (!std::isfinite(y0)) y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  const double w = kChartWidth - kMarginLeft - kMarginRight;
  const double h = kChartHeight - kMarginTop - kMarginBottom;
  auto px = [&](double x) { return kMarginLeft + (x - x0) / (x1 - x0) * w; };
  auto py = [&](double y) { return kMarginTop + (1 - (y - y0) / (y1 - y0)) * h; };
  std::ostringstream svg;
  svg << "<svg class=\"chart\" id=\"" << id << "\" width=\"" << kChartWidth << "\" height=\""
      << kChartHeight << "\" viewBox=\"0 0 " << kChartWidth << " " << kChartHeight
      << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  svg << "<text x=\"" << kMarginLeft << "\" y=\"18\" class=\"title\">" << Escape(title)
      << "</text>\n";
  svg << "<rect x=\"" << kMarginLeft << "\" y=\"" << kMarginTop << "\" width=\"" << w
      << "\" height=\"" << h << "\" class=\"plot\"/>\n";
  for (int t = 0; t <= 4; ++t) {
    const double xv = x0 + (x1 - x0) * t / 4, yv = y0 + (y1 - y0) * t / 4;
    svg << "<line x1=\"" << Coordinate(px(xv)) << "\" y1=\"" << kMarginTop + h << "\" x2=\""
        << Coordinate(px(xv)) << "\" y2=\"" << kMarginTop + h + 4 << "\" class=\"axis\"/>"
        << "<text x=\"" << Coordinate(px(xv)) << "\" y=\"" << kMarginTop + h + 16
        << "\" class=\"tick\" text-anchor=\"middle\">" << Number(xv) << "</text>\n";
    svg << "<line x1=\"" << kMarginLeft << "\" y1=\"" << Coordinate(py(yv)) << "\" x2=\""
        << kMarginLeft + w << "\" y2=\"" << Coordinate(py(yv)) << "\" class=\"grid\"/>"
        << "<text x=\"" << kMarginLeft - 6 << "\" y=\"" << Coordinate(py(yv) + 4)
        << "\" class=\"tick\" text-anchor=\"end\">" << Number(yv) << "</text>\n";
  }
  svg << "<text x=\"" << Coordinate(kMarginLeft + w / 2) << "\" y=\"" << kChartHeight - 6
      << "\" class=\"label\" text-anchor=\"middle\">" << Escape(x_label) << "</text>\n";
  svg << "<text x=\"14\" y=\"" << Coordinate(kMarginTop + h / 2)
      << "\" class=\"label\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
      << Coordinate(kMarginTop + h / 2) << ")\">" << Escape(y_label) << "</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    std::string points;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      points += Coordinate(px(x)) + "," + Coordinate(py(y)) + " ";
    }
    svg << "<polyline class=\"series\" fill=\"none\" stroke=\"" << s.color
        << "\" stroke-width=\"2\"" << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << " points=\""
        << points << "\"><title>" << Escape(s.name) << "</title></polyline>\n";
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || std::isfinite(y)) continue;
      // +inf at the plot's top edge, -inf at its bottom edge, NaN across its middle.
      const double mark_y = std::isnan(y) ? kMarginTop + h / 2
                            : y > 0       ? kMarginTop + 10
                                          : kMarginTop + h - 4;
      svg << "<text class=\"non-finite\" x=\"" << Coordinate(px(x)) << "\" y=\""
          << Coordinate(mark_y) << "\" fill=\"" << s.color << "\" text-anchor=\"middle\">"
          << NonFiniteWord(y) << "<title>" << Escape(s.name) << " at " << Number(x) << ": "
          << NonFiniteWord(y) << "</title></text>\n";
    }
    const double ly = kMarginTop + 8 + 18.0 * static_cast<double>(i);
    svg << "<line x1=\"" << kMarginLeft + w + 12 << "\" y1=\"" << ly << "\" x2=\""
        << kMarginLeft + w + 36 << "\" y2=\"" << ly << "\" stroke=\"" << s.color
        << "\" stroke-width=\"2\"" << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>"
        << "<text x=\"" << kMarginLeft + w + 42 << "\" y=\"" << ly + 4 << "\" class=\"legend\">"
        << Escape(s.name) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

std::string Section(const std::string& title, const std::string& body) {
  return "<section><h2>" + Escape(title) + "</h2>\n" + body + "</section>\n";
}

std::string Note(const std::string& text) { return "<p class=\"note\">" + Escape(text) + "</p>\n"; }

std::string LossChart(const RunReport& report, const std::string& id) {
  std::vector<Series> series;
  size_t color = 0;
  for (const ArmReport& arm : report.arms) {
    for (const ArmRunReport& run : arm.runs) {
      Series s{arm.name + " run " + std::to_string(run.index), Color(color), run.index > 1, {}};
      for (size_t i = 0; i < run.loss.size(); ++i) {
        s.points.emplace_back(static_cast<double>(i + 1), run.loss[i]);
      }
      series.push_back(std::move(s));
    }
    ++color;
  }
  return LineChart(id, "loss of every arm and run", "iteration", "loss", series);
}

const ArmReport* Baseline(const RunReport& report) {
  for (const ArmReport& arm : report.arms) {
    if (arm.name == report.baseline) return &arm;
  }
  return nullptr;
}

bool SameBits(double x, double y) {
  uint64_t a = 0, b = 0;
  std::memcpy(&a, &x, sizeof(a));
  std::memcpy(&b, &y, sizeof(b));
  return a == b;
}

std::string GradNormDifferenceChart(const RunReport& report) {
  const ArmReport* base = Baseline(report);
  if (base == nullptr || base->runs.empty()) {
    return Note("No baseline arm ran: nothing to compare the grad norms with.");
  }
  std::vector<Series> series;
  std::string notes;
  size_t color = 1;
  for (const ArmReport& arm : report.arms) {
    if (&arm == base || arm.runs.empty()) continue;
    const std::vector<double>& a = arm.runs.front().grad_norm;
    const std::vector<double>& b = base->runs.front().grad_norm;
    Series s{arm.name + " - " + base->name, Color(color++), false, {}};
    bool identical = true;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      // NaN equals NaN of the same bits, and so does an infinity: their difference is 0, not NaN.
      const bool same = SameBits(a[i], b[i]);
      s.points.emplace_back(static_cast<double>(i + 1), same ? 0.0 : a[i] - b[i]);
      identical = identical && same;
    }
    notes += Note(arm.name + " vs " + base->name + ": " +
                  (identical ? "the grad norms are bit-identical at every iteration."
                             : "the grad norms differ."));
    series.push_back(std::move(s));
  }
  if (series.empty()) return Note("Only the baseline arm ran.");
  return LineChart("grad-norm-difference-chart",
                   "grad norm of each arm minus the baseline's (run 1, rank 0)", "iteration",
                   "difference", series) +
         notes;
}

std::string HeatMap(const DifferenceMap& map, size_t index) {
  constexpr int kCell = 14, kLabel = 300, kTop = 40;
  const int columns = static_cast<int>(map.iterations.size());
  const int rows = static_cast<int>(map.rows.size());
  const int width = std::max(kChartWidth, kLabel + std::max(1, columns) * kCell + 20);
  const int height = kTop + rows * kCell + 30;
  std::ostringstream svg;
  svg << "<svg class=\"chart heatmap\" id=\"difference-heatmap-" << index << "\" width=\"" << width
      << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height
      << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  svg << "<text x=\"4\" y=\"18\" class=\"title\">" << Escape(map.title)
      << ": differing parameters x iterations</text>\n";
  for (int c = 0; c < columns; ++c) {
    if (columns <= 40 || c % 5 == 0) {
      svg << "<text x=\"" << kLabel + c * kCell + kCell / 2 << "\" y=\"" << kTop - 4
          << "\" class=\"tick\" text-anchor=\"middle\">" << map.iterations[c] << "</text>";
    }
  }
  svg << "\n";
  for (int r = 0; r < rows; ++r) {
    const int y = kTop + r * kCell;
    svg << "<text x=\"" << kLabel - 6 << "\" y=\"" << y + kCell - 3
        << "\" class=\"tick\" text-anchor=\"end\">" << Escape(map.rows[r]) << "</text>";
    for (int c = 0; c < columns; ++c) {
      const bool differs = map.cells[r][c] != 0;
      svg << "<rect class=\"" << (differs ? "cell differs" : "cell equal") << "\" x=\""
          << kLabel + c * kCell << "\" y=\"" << y << "\" width=\"" << kCell - 1 << "\" height=\""
          << kCell - 1 << "\"><title>" << Escape(map.rows[r]) << ", iteration " << map.iterations[c]
          << ": " << (differs ? "differs" : "equal") << "</title></rect>";
    }
    svg << "\n";
  }
  svg << "<text x=\"4\" y=\"" << height - 8 << "\" class=\"tick\">" << map.differing_parameters
      << " parameter(s) differ"
      << (map.differing_parameters > rows ? "; the first " + std::to_string(rows) + " shown" : "")
      << " (a grad or parameter digest differs)</text>\n</svg>\n";
  return svg.str();
}

std::string MemoryCharts(const RunReport& report) {
  std::vector<Series> series;
  size_t color = 0;
  for (const ArmReport& arm : report.arms) {
    if (arm.runs.empty()) {
      ++color;
      continue;
    }
    const ArmRunReport& run = arm.runs.front();
    Series measured{arm.name + " measured", Color(color), false, {}};
    for (size_t i = 0; i < run.peak_bytes.size(); ++i) {
      measured.points.emplace_back(static_cast<double>(i + 1), run.peak_bytes[i] / 1048576.0);
    }
    series.push_back(std::move(measured));
    int64_t predicted = -1;
    for (const RankMemoryReport& m : run.memory)
      predicted = std::max(predicted, m.predicted_peak_bytes);
    if (predicted > 0 && !run.peak_bytes.empty()) {
      series.push_back({arm.name + " model",
                        Color(color),
                        true,
                        {{1.0, predicted / 1048576.0},
                         {static_cast<double>(run.peak_bytes.size()), predicted / 1048576.0}}});
    }
    ++color;
  }
  std::string out = LineChart("memory-peak-chart",
                              "peak memory per iteration (largest rank, run 1) and the model's "
                              "prediction (dashed)",
                              "iteration", "MiB", series);
  // The last iteration's live bytes at every phase mark, with --memory-timeline.
  std::vector<Series> timeline;
  std::string labels;
  color = 0;
  for (const ArmReport& arm : report.arms) {
    if (arm.runs.empty() || arm.runs.front().memory_timeline.empty()) {
      ++color;
      continue;
    }
    const ArmRunReport& run = arm.runs.front();
    Series live{arm.name + " live", Color(color), false, {}};
    for (size_t i = 0; i < run.memory_timeline.size(); ++i) {
      live.points.emplace_back(static_cast<double>(i),
                               run.memory_timeline[i].current_bytes / 1048576.0);
    }
    int64_t predicted = -1;
    for (const RankMemoryReport& m : run.memory) {
      if (m.rank == 0) predicted = m.predicted_peak_bytes;
    }
    timeline.push_back(std::move(live));
    if (predicted > 0) {
      timeline.push_back(
          {arm.name + " model peak",
           Color(color),
           true,
           {{0.0, predicted / 1048576.0},
            {static_cast<double>(run.memory_timeline.size() - 1), predicted / 1048576.0}}});
    }
    labels += "<details><summary>" + Escape(arm.name) +
              ": phases of the last iteration</summary><ol start=\"0\">";
    for (const MemorySample& s : run.memory_timeline) {
      labels += "<li>" + Escape(s.label) + ": " + Number(s.current_bytes / 1048576.0) + " MiB</li>";
    }
    labels += "</ol></details>\n";
    ++color;
  }
  if (timeline.empty()) {
    out += Note(
        "No memory timeline was recorded (run with --memory-timeline to chart the live "
        "bytes of every phase).");
  } else {
    out += LineChart("memory-timeline-chart",
                     "live bytes at every phase mark of the last iteration (rank 0, run 1)",
                     "phase mark", "MiB", timeline) +
           labels;
  }
  return out;
}

std::string ScheduleGantt(const std::string& arm, const ArmRunReport& run, size_t index) {
  constexpr int kLane = 16, kRankGap = 14, kLabel = 90, kTop = 34;
  const int width = kChartWidth;
  int64_t end = 1;
  for (const auto& rank : run.schedule_timeline) {
    for (const ScheduleInterval& e : rank) end = std::max(end, e.end_ns);
  }
  const int ranks = static_cast<int>(run.schedule_timeline.size());
  const int height = kTop + ranks * (2 * kLane + kRankGap) + 30;
  const double w = width - kLabel - 20;
  auto px = [&](int64_t ns) {
    return kLabel + static_cast<double>(ns) / static_cast<double>(end) * w;
  };
  std::ostringstream svg;
  svg << "<svg class=\"chart gantt\" id=\"overlap-timeline-" << index << "\" width=\"" << width
      << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height
      << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  svg << "<text x=\"4\" y=\"18\" class=\"title\">" << Escape(arm)
      << ": compute and all-to-all intervals of the last iteration, per rank (run 1; color: "
         "microbatch)</text>\n";
  for (int r = 0; r < ranks; ++r) {
    const int y = kTop + r * (2 * kLane + kRankGap);
    svg << "<text x=\"4\" y=\"" << y + kLane - 4 << "\" class=\"tick\">rank " << r
        << " compute</text><text x=\"4\" y=\"" << y + 2 * kLane - 4 << "\" class=\"tick\">rank "
        << r << " a2a</text>\n";
    for (const ScheduleInterval& e : run.schedule_timeline[static_cast<size_t>(r)]) {
      const double x0 = px(e.begin_ns), x1 = std::max(px(e.end_ns), x0 + 0.5);
      svg << "<rect class=\"" << (e.comm ? "interval comm" : "interval compute") << "\" x=\""
          << Coordinate(x0) << "\" y=\"" << (e.comm ? y + kLane : y) << "\" width=\""
          << Coordinate(x1 - x0) << "\" height=\"" << kLane - 2 << "\" fill=\""
          << Color(static_cast<size_t>(e.microbatch)) << "\""
          << (e.comm ? " fill-opacity=\"0.55\"" : "") << "><title>" << Escape(e.node) << " mb"
          << e.microbatch << ": " << Number((e.end_ns - e.begin_ns) / 1e6) << " ms</title></rect>";
    }
    svg << "\n";
  }
  svg << "<text x=\"" << kLabel << "\" y=\"" << height - 8 << "\" class=\"tick\">0 ms</text>"
      << "<text x=\"" << width - 20 << "\" y=\"" << height - 8
      << "\" class=\"tick\" text-anchor=\"end\">" << Number(end / 1e6) << " ms</text>\n</svg>\n";
  return svg.str();
}

std::string OverlapSection(const RunReport& report) {
  std::string out;
  size_t index = 0;
  for (const ArmReport& arm : report.arms) {
    if (arm.runs.empty()) continue;
    const ArmRunReport& run = arm.runs.front();
    char line[200];
    std::snprintf(line, sizeof(line), "%s: %.1f%% of all-to-all time hidden under compute (run 1).",
                  arm.name.c_str(), 100 * run.all_to_all.hidden_fraction());
    out += Note(line);
    if (!run.schedule_timeline.empty()) out += ScheduleGantt(arm.name, run, index++);
  }
  if (index == 0) out += Note("No arm ran a schedule of nodes: no overlap timeline.");
  return out;
}

std::string CheckTable(const std::vector<CheckResult>& checks) {
  std::ostringstream html;
  html << "<table class=\"checks\" id=\"check-table\"><tr><th>verdict</th><th>check</th>"
          "<th>summary</th></tr>\n";
  for (const CheckResult& c : checks) {
    html << "<tr class=\"" << HtmlClass(c.verdict) << "\"><td class=\"verdict\">"
         << ToString(c.verdict) << "</td><td>" << Escape(c.name) << "</td><td>"
         << Escape(c.summary);
    std::string sentences;
    if (c.first_divergent_operations) {
      for (const std::string& s : *c.first_divergent_operations) {
        sentences += "<li>" + Escape(s) + "</li>";
      }
    }
    if (!sentences.empty()) html << "<ul class=\"divergence\">" << sentences << "</ul>";
    if (c.attribution) {
      html << "<p class=\"attribution\">attribution: " << Escape(c.attribution->Explain())
           << "</p>";
    }
    if (!c.details.empty() && c.verdict != Verdict::kPass) {
      html << "<details><summary>details</summary><pre>" << Escape(c.details) << "</pre></details>";
    }
    html << "</td></tr>\n";
  }
  html << "</table>\n";
  return html.str();
}

std::string Page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" +
         Escape(title) +
         "</title>\n<style>\n"
         "body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}\n"
         "h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ccc}\n"
         ".result{font-size:18px;font-weight:bold;padding:6px 10px;display:inline-block}\n"
         ".result.pass{background:#d7f5dd}.result.fail,.result.error{background:#f9d6d5}\n"
         "svg.chart{background:#fff;display:block;margin:8px 0}\n"
         ".plot{fill:#fafafa;stroke:#888}.grid{stroke:#e4e4e4}.axis{stroke:#888}\n"
         ".title{font-size:13px;font-weight:bold}.tick,.legend{font-size:11px}.label{font-size:"
         "12px}\n"
         ".non-finite{font-size:11px;font-weight:bold}\n"
         ".cell.differs{fill:#d62728}.cell.equal{fill:#e8e8e8}\n"
         "table.checks{border-collapse:collapse;width:100%}\n"
         "table.checks td,table.checks th{border:1px solid #ddd;padding:4px 6px;"
         "vertical-align:top;font-size:13px;text-align:left}\n"
         "tr.pass td.verdict{background:#d7f5dd}tr.fail td.verdict{background:#f9d6d5}\n"
         "tr.error td.verdict{background:#f4b6b4}tr.skip td.verdict{background:#eee}\n"
         "pre{white-space:pre-wrap;font-size:12px}.note{font-size:13px;color:#444}\n"
         "</style></head>\n<body>\n" +
         body + "</body></html>\n";
}

}  // namespace

std::string HtmlReport(const RunReport& report) {
  std::ostringstream body;
  body << "<h1>bitparity run: " << Escape(report.name) << "</h1>\n";
  body << "<p><span class=\"result " << (report.exit_code == 0 ? "pass" : "fail") << "\">"
       << ResultWord(report.exit_code) << " (exit " << report.exit_code << ")</span></p>\n";
  body << "<p class=\"note\">recipe " << Escape(report.recipe_path) << ", fingerprint "
       << Escape(report.fingerprint.key) << ", " << report.repeats << " run(s) per arm, "
       << Number(report.seconds) << " s, started " << Escape(report.timestamp) << " UTC";
  if (!report.developer_switches.empty()) {
    body << "; developer switches:";
    for (const std::string& s : report.developer_switches) body << " " << Escape(s);
  }
  body << "</p>\n";
  body << Section("Checks", CheckTable(report.checks));
  body << Section("Loss", LossChart(report, "loss-chart"));
  body << Section("Gradient norm against the baseline", GradNormDifferenceChart(report));
  std::string maps;
  for (size_t i = 0; i < report.difference_maps.size(); ++i) {
    maps += HeatMap(report.difference_maps[i], i);
  }
  if (maps.empty()) maps = Note("No comparison of two runs failed: nothing differs.");
  body << Section("What differs", maps);
  body << Section("Memory", MemoryCharts(report));
  body << Section("Overlap", OverlapSection(report));
  return Page("bitparity: " + report.name, body.str());
}

std::string HtmlMatrixReport(const std::string& title, const std::vector<RunReport>& cells) {
  std::ostringstream body;
  int exit_code = 0;
  for (const RunReport& cell : cells) exit_code = std::max(exit_code, cell.exit_code);
  body << "<h1>bitparity matrix: " << Escape(title) << "</h1>\n";
  body << "<p><span class=\"result " << (exit_code == 0 ? "pass" : "fail") << "\">"
       << ResultWord(exit_code) << "</span> " << cells.size() << " cell(s)</p>\n";
  std::vector<std::string> switches;  // each cell's, once
  for (const RunReport& cell : cells) {
    for (const std::string& s : cell.developer_switches) {
      if (std::find(switches.begin(), switches.end(), s) == switches.end()) switches.push_back(s);
    }
  }
  for (const std::string& s : switches) body << Note("developer switch active: " + s);
  std::ostringstream table;
  table << "<table class=\"checks\" id=\"cell-table\"><tr><th>result</th><th>cell</th>"
           "<th>checks</th><th>first failure</th></tr>\n";
  std::vector<Series> losses;
  for (size_t i = 0; i < cells.size(); ++i) {
    const RunReport& cell = cells[i];
    int passed = 0;
    std::string failure;
    for (const CheckResult& c : cell.checks) {
      if (c.verdict == Verdict::kPass) ++passed;
      if (failure.empty() && (c.verdict == Verdict::kFail || c.verdict == Verdict::kError)) {
        failure = c.name + ": " + c.summary;
      }
    }
    table << "<tr class=\"" << (cell.exit_code == 0 ? "pass" : "fail")
          << "\"><td class=\"verdict\">" << ResultWord(cell.exit_code) << "</td><td>"
          << Escape(cell.name) << "</td><td>" << passed << " of " << cell.checks.size()
          << " passed</td><td>" << Escape(failure) << "</td></tr>\n";
    const ArmReport* base = Baseline(cell);
    if (base != nullptr && !base->runs.empty()) {
      Series s{cell.name, Color(i), false, {}};
      const std::vector<float>& loss = base->runs.front().loss;
      for (size_t k = 0; k < loss.size(); ++k)
        s.points.emplace_back(static_cast<double>(k + 1), loss[k]);
      losses.push_back(std::move(s));
    }
  }
  table << "</table>\n";
  body << Section("Cells", table.str());
  body << Section("Loss",
                  LineChart("matrix-loss-chart", "the baseline arm's loss in every cell (run 1)",
                            "iteration", "loss", losses));
  return Page("bitparity matrix: " + title, body.str());
}

}  // namespace bitparity
