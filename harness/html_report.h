#ifndef BITPARITY_HARNESS_HTML_REPORT_H_
#define BITPARITY_HARNESS_HTML_REPORT_H_

// report.html: a reporter over the same plain results as the JSON, console and JUnit reporters
// (harness/report.h), for people. One self-contained page (inline SVG and CSS, no script, no
// network): the loss curves of every arm and run on one chart, the per-iteration grad-norm
// difference of each arm against the baseline, a heat map of the parameters x iterations that
// differ when a comparison of two runs failed, peak memory per iteration with the memory model's
// prediction and (with --memory-timeline) the last iteration's live bytes per phase, the overlap
// timeline per rank (compute and all-to-all intervals of the last iteration, Gantt style), and
// the check table with the first-divergence sentences. Every chart is an <svg class="chart">
// with an id the browser test looks for (tests/e2e/html_report_test.cpp).

#include <string>
#include <vector>

#include "harness/report.h"

namespace bitparity {

// The page of one `bitparity run`.
std::string HtmlReport(const RunReport& report);

// The page of one `bitparity matrix`: a table of its cells (verdict, checks, failures' first
// sentences) and every cell's loss curves on one chart.
std::string HtmlMatrixReport(const std::string& title, const std::vector<RunReport>& cells);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_HTML_REPORT_H_
