#include "harness/report.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <pugixml.hpp>
#include <sstream>
#include <utility>

#include "core/display_text.h"
#include "core/errors.h"
#include "harness/probe_compare.h"
#include "harness/trace_compare.h"

namespace bitparity {

int ExitCodeOf(const std::vector<CheckResult>& checks) {
  bool failed = false, errored = false;
  for (const CheckResult& c : checks) {
    failed |= c.verdict == Verdict::kFail;
    errored |= c.verdict == Verdict::kError;
  }
  return errored ? kExitInfrastructure : failed ? kExitCheckFailed : kExitPass;
}

const char* ResultWord(int exit_code) { return ConsoleWord(VerdictOfExitCode(exit_code)); }

ArmRunReport SummarizeRun(const Trace& trace, const std::string& trace_path, double seconds,
                          int64_t index) {
  ArmRunReport run;
  run.index = index;
  run.trace_path = trace_path;
  run.seconds = seconds;
  const std::vector<IterationRecord>& iterations = trace.ranks.at(0).iterations;
  for (size_t i = 0; i < iterations.size(); ++i) {
    run.loss.push_back(iterations[i].loss);
    run.step_seconds.push_back(iterations[i].step_seconds);
    int64_t peak = 0;
    for (const RankTrace& rank : trace.ranks) peak = std::max(peak, rank.iterations[i].peak_bytes);
    run.peak_bytes.push_back(peak);
  }
  run.peak_bytes_max = PeakBytes(trace);
  for (const RankTrace& rank : trace.ranks) {
    run.memory.push_back({rank.rank, RankPeakBytes(rank), PredictedPeakBytes(rank)});
  }
  run.all_to_all = AllToAllTimeOf(trace);
  run.throughput = ThroughputOf(trace);
  run.all_to_all_breakdown = AllToAllBreakdownOf(trace);
  run.records_digest = RecordsDigest(trace);
  for (const IterationRecord& r : iterations) run.grad_norm.push_back(r.grad_norm);
  const RankTrace& first = trace.ranks.at(0);
  if (!first.memory_timeline.empty()) {
    const int64_t last = first.memory_timeline.back().iteration;
    for (const MemorySample& s : first.memory_timeline) {
      if (s.iteration == last) run.memory_timeline.push_back(s);
    }
  }
  for (const RankTrace& rank : trace.ranks) {
    if (!rank.schedule_timeline.empty()) run.schedule_timeline.push_back(rank.schedule_timeline);
  }
  return run;
}

DifferenceMap MapDifferences(const std::string& title, const Trace& a, const Trace& b) {
  DifferenceMap map;
  map.title = title;
  const size_t ranks = std::min(a.ranks.size(), b.ranks.size());
  if (ranks == 0) return map;
  const size_t iterations = std::min(a.ranks[0].iterations.size(), b.ranks[0].iterations.size());
  for (size_t i = 0; i < iterations; ++i)
    map.iterations.push_back(a.ranks[0].iterations[i].iteration);
  for (size_t r = 0; r < ranks; ++r) {
    const RankTrace& x = a.ranks[r];
    const RankTrace& y = b.ranks[r];
    if (x.param_names != y.param_names) continue;  // another layout: nothing to map per name
    for (size_t p = 0; p < x.param_names.size(); ++p) {
      std::vector<uint8_t> row(iterations, 0);
      bool any = false;
      for (size_t i = 0; i < iterations && i < x.iterations.size() && i < y.iterations.size();
           ++i) {
        const IterationRecord& u = x.iterations[i];
        const IterationRecord& v = y.iterations[i];
        const bool differs = (p < u.grad_digests.size() && p < v.grad_digests.size() &&
                              u.grad_digests[p] != v.grad_digests[p]) ||
                             (p < u.param_digests.size() && p < v.param_digests.size() &&
                              u.param_digests[p] != v.param_digests[p]);
        row[i] = differs ? 1 : 0;
        any = any || differs;
      }
      if (!any) continue;
      ++map.differing_parameters;
      if (map.rows.size() >= kDifferenceMapRows) continue;
      map.rows.push_back("rank " + std::to_string(x.rank) + ": " + x.param_names[p]);
      map.cells.push_back(std::move(row));
    }
  }
  return map;
}

namespace {

nlohmann::json DifferenceJson(const Difference& d) {
  nlohmann::json where = {
      {"iteration", d.iteration}, {"rank", d.rank}, {"record", d.record}, {"parameter", d.param}};
  if (d.tensor) {
    where["element"] = d.tensor->first_index;
    where["position"] = d.tensor->first_position;
    where["value_a"] = d.tensor->first_a;
    where["value_b"] = d.tensor->first_b;
    where["ulps"] = d.tensor->first_ulps;
    where["differing_elements"] = d.tensor->differing;
    where["max_abs_diff"] = d.tensor->max_abs_diff;
    nlohmann::json histogram = nlohmann::json::object();
    for (const auto& [bucket, count] : d.tensor->ulp_histogram) histogram[bucket] = count;
    where["ulp_histogram"] = histogram;
  }
  return where;
}

nlohmann::json AllToAllJson(const ArmRunReport& r) {
  nlohmann::json j = {{"count", r.all_to_all.count},
                      {"in_flight_seconds", r.all_to_all.in_flight_seconds},
                      {"exposed_seconds", r.all_to_all.exposed_seconds},
                      {"hidden_fraction", r.all_to_all.hidden_fraction()}};
  const AllToAllBreakdown& b = r.all_to_all_breakdown;
  if (b.shares.empty()) return j;
  nlohmann::json shares = nlohmann::json::array();
  for (const AllToAllShare& s : b.shares) {
    shares.push_back({{"node", s.node},
                      {"phase", s.phase},
                      {"count", s.count},
                      {"in_flight_seconds", s.in_flight_seconds},
                      {"waited_seconds", s.waited_seconds}});
  }
  j["last_iteration"] = {{"exposed_seconds", b.exposed_seconds},
                         {"waited_seconds", b.waited_seconds},
                         {"count_exchange_seconds", b.count_exchange_seconds},
                         {"other_exposed_seconds", b.other_exposed_seconds()},
                         {"shares", shares}};
  return j;
}

nlohmann::json ThroughputJson(const Throughput& t) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankThroughput& r : t.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"iterations", r.iterations},
                     {"seconds", r.seconds},
                     {"model_flops", r.model_flops},
                     {"replay_flops", r.replay_flops},
                     {"model_tflops", r.model_flops_per_second() / 1e12},
                     {"hardware_tflops", r.hardware_flops_per_second() / 1e12},
                     {"ceiling_tflops", r.ceiling_flops_per_second / 1e12},
                     {"measured_ceiling_tflops", r.measured_ceiling_flops_per_second / 1e12},
                     {"mfu", r.mfu()}});
  }
  return {{"model_tflops_per_rank", t.model_flops_per_second_per_rank() / 1e12},
          {"hardware_tflops_per_rank", t.hardware_flops_per_second_per_rank() / 1e12},
          {"mfu", t.mfu()},
          {"flops_per_iteration",
           {{"forward", t.forward_flops},
            {"replay", t.replay_flops},
            {"backward", t.backward_flops},
            {"attention", t.attention_flops},
            {"dense", t.dense_flops},
            {"expert", t.expert_flops},
            {"head", t.head_flops},
            {"other", t.other_flops}}},
          {"ranks", ranks}};
}

}  // namespace

void NonFiniteAsText(nlohmann::json* value) {
  if (value->is_number_float()) {
    const double x = value->get<double>();
    if (std::isnan(x)) *value = "NaN";
    if (std::isinf(x)) *value = x > 0 ? "Infinity" : "-Infinity";
    return;
  }
  if (value->is_structured()) {
    for (nlohmann::json& child : *value) NonFiniteAsText(&child);
  }
}

nlohmann::json JsonReport(const RunReport& report) {
  nlohmann::json j;
  j["recipe"] = {{"name", report.recipe_name}, {"path", report.recipe_path}};
  j["fingerprint"] = {{"key", report.fingerprint.key}, {"fields", report.fingerprint.fields}};
  j["baseline"] = report.baseline;
  j["golden"] = {{"path", report.golden_path}, {"present", report.golden_present}};
  j["repeats"] = report.repeats;
  if (!report.developer_switches.empty()) j["developer_switches"] = report.developer_switches;
  j["seconds"] = report.seconds;
  j["exit_code"] = report.exit_code;
  j["verdict"] = ToString(VerdictOfExitCode(report.exit_code));
  j["arms"] = nlohmann::json::object();
  for (const ArmReport& arm : report.arms) {
    nlohmann::json a;
    a["engine"] = arm.engine;
    a["runs"] = nlohmann::json::array();
    for (const ArmRunReport& r : arm.runs) {
      nlohmann::json ranks = nlohmann::json::array();
      for (const RankMemoryReport& m : r.memory) {
        ranks.push_back({{"rank", m.rank},
                         {"peak_bytes", m.peak_bytes},
                         {"predicted_peak_bytes", m.predicted_peak_bytes}});
      }
      a["runs"].push_back({{"trace", r.trace_path},
                           {"throughput", ThroughputJson(r.throughput)},
                           {"seconds", r.seconds},
                           {"loss", r.loss},
                           {"step_seconds", r.step_seconds},
                           {"peak_bytes", r.peak_bytes},
                           {"peak_bytes_max", r.peak_bytes_max},
                           {"records_digest", r.records_digest},
                           {"memory", ranks},
                           {"all_to_all", AllToAllJson(r)}});
    }
    j["arms"][arm.name] = a;
  }
  j["checks"] = nlohmann::json::array();
  for (const CheckResult& c : report.checks) {
    nlohmann::json check = {{"kind", ToString(c.kind)}, {"arm", c.arm},
                            {"name", c.name},           {"verdict", ToString(c.verdict)},
                            {"summary", c.summary},     {"details", c.details},
                            {"figures", c.AllFigures()}};
    if (c.difference) check["first_difference"] = DifferenceJson(*c.difference);
    j["checks"].push_back(check);
  }
  NonFiniteAsText(&j);
  return j;
}

namespace {

// A loss for the console: "%.6f", or NaN, +inf and -inf as the words report.html uses (printf's
// "-nan" would make a sign bit look like a second kind of NaN).
std::string LossText(float loss) {
  if (std::isnan(loss)) return "     NaN";
  if (std::isinf(loss)) return loss > 0 ? "    +inf" : "    -inf";
  char text[32];
  std::snprintf(text, sizeof(text), "%.6f", loss);
  return text;
}

}  // namespace

std::string ConsoleReport(const RunReport& report) {
  std::ostringstream out;
  char line[200];
  std::snprintf(line, sizeof(line), "%.1f", report.seconds);
  out << "\nrecipe " << EscapedText(report.recipe_name, false) << " ("
      << EscapedText(report.recipe_path, false) << "), fingerprint " << report.fingerprint.key
      << ", " << line << " s\n";
  for (const std::string& s : report.developer_switches) {
    out << "  developer switch active: " << s << "\n";
  }
  out << "  arm                runs  loss first -> last        peak MiB  model MiB  "
         "s/iteration  a2a hidden  TFLOP/s/rank    MFU\n";
  for (const ArmReport& arm : report.arms) {
    if (arm.runs.empty()) continue;
    const ArmRunReport& first = arm.runs.front();
    double step = 0;
    for (double s : first.step_seconds) step += s;
    int64_t predicted = -1;  // -1: no rank carries a prediction (a pipeline)
    for (const RankMemoryReport& m : first.memory) {
      predicted = std::max(predicted, m.predicted_peak_bytes);
    }
    char model[16] = "       -";
    if (predicted >= 0) std::snprintf(model, sizeof(model), "%8.2f", predicted / 1048576.0);
    char hidden[16] = "-";  // no all-to-all (ep = 1)
    if (first.all_to_all.count > 0) {
      std::snprintf(hidden, sizeof(hidden), "%.1f%%", 100.0 * first.all_to_all.hidden_fraction());
    }
    char mfu[16] = "-";  // no measured ceiling
    if (first.throughput.mfu() > 0) {
      std::snprintf(mfu, sizeof(mfu), "%.1f%%", 100.0 * first.throughput.mfu());
    }
    const size_t n = first.loss.size();
    std::snprintf(
        line, sizeof(line), "  %-18s %4zu  %s -> %s    %8.2f   %s   %8.3f  %10s  %12.4f %6s\n",
        arm.name.c_str(), arm.runs.size(), LossText(n ? first.loss.front() : 0.0f).c_str(),
        LossText(n ? first.loss.back() : 0.0f).c_str(), first.peak_bytes_max / 1048576.0, model,
        n ? step / n : 0.0, hidden, first.throughput.model_flops_per_second_per_rank() / 1e12, mfu);
    out << line;
  }
  out << "checks:\n" << FormatChecks(report.checks);
  for (const CheckResult& c : report.checks) {
    if (c.verdict == Verdict::kFail || c.verdict == Verdict::kError) {
      out << "\n" << c.name << ":\n  " << c.summary << "\n";
      std::istringstream details(c.details);
      std::string detail;
      while (std::getline(details, detail)) out << "  " << detail << "\n";
    }
  }
  out << "result: " << ResultWord(report.exit_code) << " (exit " << report.exit_code
      << "); reports: " << report.out_dir << "/junit.xml, " << report.out_dir << "/report.json, "
      << report.out_dir << "/report.html\n";
  return out.str();
}

namespace {

// `text` as XML 1.0 may carry it (core/display_text.h): a control character XML forbids (a
// character reference to one is forbidden too) and a byte outside valid UTF-8 become "\xNN".
std::string XmlText(const std::string& text) { return EscapedText(text, /*keep_whitespace=*/true); }

// One check as a JUnit testcase: its verdict element with the summary and details, and the first
// divergent operations in its system-out.
void AppendTestcase(pugi::xml_node suite_node, const RunReport& suite, const CheckResult& c) {
  pugi::xml_node t = suite_node.append_child("testcase");
  t.append_attribute("classname") = XmlText("bitparity." + suite.name).c_str();
  t.append_attribute("name") = XmlText(c.name).c_str();
  t.append_attribute("time") = c.seconds;
  // The first divergent operations where a CI page shows them without opening the failure's
  // text: the testcase's system-out (JUnit's testcase has no properties), one line each.
  std::string operations;
  if (c.first_divergent_operations) {
    const std::vector<std::string>& sentences = *c.first_divergent_operations;
    for (const std::string& sentence : sentences) {
      operations += "first_divergent_operation: " + sentence + "\n";
    }
    if (sentences.empty()) {
      operations += std::string("first_divergent_operation: ") + kProbesAllEqual + "\n";
    }
  }
  const std::string body = c.details.empty() ? c.summary : c.summary + "\n" + c.details;
  if (c.verdict == Verdict::kFail) {
    pugi::xml_node f = t.append_child("failure");
    f.append_attribute("message") = XmlText(c.summary).c_str();
    f.append_attribute("type") = "bitparity.mismatch";
    f.append_child(pugi::node_pcdata).set_value(XmlText(body).c_str());
  } else if (c.verdict == Verdict::kError) {
    pugi::xml_node e = t.append_child("error");
    e.append_attribute("message") = XmlText(c.summary).c_str();
    e.append_attribute("type") = "bitparity.infrastructure";
    e.append_child(pugi::node_pcdata).set_value(XmlText(body).c_str());
  } else if (c.verdict == Verdict::kSkipped) {
    t.append_child("skipped").append_attribute("message") = XmlText(c.summary).c_str();
  } else {
    operations = operations.empty() ? body : body + "\n" + operations;
  }
  if (!operations.empty()) {
    t.append_child("system-out")
        .append_child(pugi::node_pcdata)
        .set_value(XmlText(operations).c_str());
  }
}

// The suite's properties: the recipe, the fingerprint and the baseline (a matrix cell that could
// not run has none), and a developer_switch for each switch the ranks ran under.
void AppendSuiteProperties(pugi::xml_node s, const RunReport& suite) {
  if (suite.recipe_path.empty()) return;
  std::vector<std::pair<std::string, std::string>> properties = {
      {"recipe", suite.recipe_path},
      {"fingerprint", suite.fingerprint.Describe()},
      {"baseline", suite.baseline}};
  for (const std::string& active : suite.developer_switches) {
    properties.emplace_back("developer_switch", active);
  }
  pugi::xml_node props = s.append_child("properties");
  for (const auto& [key, value] : properties) {
    pugi::xml_node p = props.append_child("property");
    p.append_attribute("name") = key.c_str();
    p.append_attribute("value") = XmlText(value).c_str();
  }
}

}  // namespace

std::string JunitReport(const std::vector<RunReport>& reports) {
  pugi::xml_document doc;
  auto decl = doc.append_child(pugi::node_declaration);
  decl.append_attribute("version") = "1.0";
  decl.append_attribute("encoding") = "UTF-8";
  pugi::xml_node root = doc.append_child("testsuites");
  root.append_attribute("name") = "bitparity";
  int tests = 0, failures = 0, errors = 0, skipped = 0;
  double seconds = 0;
  for (const RunReport& suite : reports) {
    pugi::xml_node s = root.append_child("testsuite");
    int s_failures = 0, s_errors = 0, s_skipped = 0;
    for (const CheckResult& c : suite.checks) {
      s_failures += c.verdict == Verdict::kFail;
      s_errors += c.verdict == Verdict::kError;
      s_skipped += c.verdict == Verdict::kSkipped;
    }
    s.append_attribute("name") = XmlText(suite.name).c_str();
    s.append_attribute("tests") = static_cast<int>(suite.checks.size());
    s.append_attribute("failures") = s_failures;
    s.append_attribute("errors") = s_errors;
    s.append_attribute("skipped") = s_skipped;
    s.append_attribute("time") = suite.seconds;
    s.append_attribute("timestamp") = XmlText(suite.timestamp).c_str();
    AppendSuiteProperties(s, suite);
    for (const CheckResult& c : suite.checks) AppendTestcase(s, suite, c);
    tests += static_cast<int>(suite.checks.size());
    failures += s_failures;
    errors += s_errors;
    skipped += s_skipped;
    seconds += suite.seconds;
  }
  root.append_attribute("tests") = tests;
  root.append_attribute("failures") = failures;
  root.append_attribute("errors") = errors;
  root.append_attribute("skipped") = skipped;
  root.append_attribute("time") = seconds;
  std::ostringstream out;
  doc.save(out, "  ", pugi::format_default, pugi::encoding_utf8);
  return out.str();
}

std::string FormatChecks(const std::vector<CheckResult>& checks) {
  size_t width = 5;
  for (const CheckResult& c : checks) width = std::max(width, c.name.size());
  std::ostringstream out;
  char line[64];
  for (const CheckResult& c : checks) {
    std::snprintf(line, sizeof(line), "  %-5s  ", ConsoleWord(c.verdict));
    out << line << c.name << std::string(width - c.name.size(), ' ') << "  " << c.summary << "\n";
  }
  return out.str();
}

}  // namespace bitparity
