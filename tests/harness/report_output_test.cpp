// The reporters' output, pinned line by line (Google Benchmark's output tests): a report built
// by hand from hand-built traces, with the real checks and the localizer, turned into the
// console summary, report.json and junit.xml. A change of any reporter's output is a change of
// this file.

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/display_text.h"
#include "core/errors.h"
#include "harness/checks.h"
#include "harness/html_report.h"
#include "harness/localizer.h"
#include "harness/report.h"
#include "tests/support/junit_reader.h"
#include "tests/support/test_support.h"
#include "tests/support/trace_builder.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// Compares `actual` with `expected` line by line and names the first line that differs.
// A leading newline of `expected` (after the raw string's opening) is not part of it.
void ExpectLines(const std::string& actual, const std::string& expected) {
  const std::vector<std::string> a = Lines(actual);
  const std::vector<std::string> e =
      Lines(!expected.empty() && expected[0] == '\n' ? expected.substr(1) : expected);
  for (size_t i = 0; i < std::min(a.size(), e.size()); ++i) {
    ASSERT_EQ(a[i], e[i]) << "line " << i + 1 << " differs; the whole output:\n" << actual;
  }
  ASSERT_EQ(a.size(), e.size()) << "the whole output:\n" << actual;
}

// Flips the lowest bit of one element of a dumped main grad (one ulp) and its digest.
void PerturbGrad(Trace& trace, int64_t rank, int64_t iteration) {
  IterationRecord& record = trace.ranks[rank].iterations[iteration - 1];
  record.grad_digests[0] ^= 1;
  auto dumps = trace.ranks[rank].grad_dumps.find(iteration);
  if (dumps != trace.ranks[rank].grad_dumps.end()) {
    float& v = dumps->second[0].values[5];
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    bits ^= 1;
    std::memcpy(&v, &bits, sizeof(bits));
  }
}

// What went wrong in the hand-built runs.
enum class Scenario {
  // The overlap arm's gradient of "w" on rank 1 differs by one ulp in element 5 at iteration 3,
  // where no dump was stored; the localizer's rerun (dumps at 3) names the element.
  kGradientOneUlp,
  // The overlap arm's loss at iteration 2 is 1e-4 off, beyond the recipe's 1e-6 tolerance, and
  // its second run could not finish.
  kLossAndCrash,
};

// Two arms on two ranks, two runs each.
RunReport MakeReport(Scenario scenario) {
  const Trace reference = testing::MakeTrace(2, 3);
  Trace overlap = reference;
  // The overlap arm's memory: measured (not compared) and predicted by the memory model.
  for (RankTrace& rank : overlap.ranks) {
    rank.attributes[trace_keys::kMemoryModelPredictedPeakBytes] = "5242880";  // 5 MiB
    for (IterationRecord& record : rank.iterations) record.peak_bytes += (rank.rank + 2) << 20;
    // Counted GEMM FLOPs and the measured ceiling: 300 GFLOP of model work in 0.5 s per
    // iteration, against 1.2 TFLOP/s, is 0.6 TFLOP/s and MFU 50%.
    rank.attributes[trace_keys::kGemmCeilingFlopsPerSecond] = "1.2e+12";
    for (IterationRecord& record : rank.iterations) {
      record.gemm_flops_forward = 100'000'000'000;
      record.gemm_flops_replay = 50'000'000'000;
      record.gemm_flops_backward = 200'000'000'000;
      record.gemm_flops_attention = 100'000'000'000;
      record.gemm_flops_expert = 200'000'000'000;
      record.gemm_flops_head = 50'000'000'000;
    }
  }
  Tolerance loss_policy;
  if (scenario == Scenario::kGradientOneUlp) {
    PerturbGrad(overlap, 1, 3);
  } else {
    for (RankTrace& rank : overlap.ranks) rank.iterations[1].loss += 1e-4f;
    loss_policy.kind = Tolerance::Kind::kAbsRel;
    loss_policy.atol = 1e-6;
  }

  RunReport report;
  report.name = "tiny";
  report.recipe_name = "tiny";
  report.recipe_path = "/recipes/tiny.toml";
  report.fingerprint.fields = {{"device", "cpu"}, {"threads", "1"}, {"world_size", "2"}};
  report.fingerprint.key = "cpu-0123456789ab";
  report.baseline = "reference";
  report.golden_path = "/golden/tiny/cpu-0123456789ab.h5";
  report.golden_present = false;
  report.repeats = 2;
  report.arms = {{"reference",
                  "reference",
                  {SummarizeRun(reference, "/out/reference/run1/trace.h5", 1.5, 1),
                   SummarizeRun(reference, "/out/reference/run2/trace.h5", 1.25, 2)}},
                 {"overlap",
                  "overlap",
                  {SummarizeRun(overlap, "/out/overlap/run1/trace.h5", 1.0, 1),
                   SummarizeRun(overlap, "/out/overlap/run2/trace.h5", 1.0, 2)}}};
  std::vector<std::vector<ComparedRun>> compared;
  report.checks.push_back(CheckReproduces("reference", {&reference, &reference}));
  compared.push_back({{"reference", 1}, {"reference", 2}});
  if (scenario == Scenario::kLossAndCrash) {
    report.arms[1].runs.pop_back();
    CheckResult crash;
    crash.kind = CheckKind::kRun;
    crash.arm = "overlap";
    crash.name = "overlap run 2";
    crash.verdict = Verdict::kError;
    crash.summary = "rank 1 was killed by signal 9 (Killed) (arm 'overlap', 2 rank(s), after 2 s)";
    crash.details = "  rank 0 exited with code 3\n";
    report.checks.push_back(crash);
  } else {
    report.checks.push_back(CheckReproduces("overlap", {&overlap, &overlap}));
  }
  compared.push_back({{"overlap", 1}, {"overlap", 2}});
  report.checks.push_back(CheckLosses("overlap", overlap, "reference", reference, loss_policy));
  compared.push_back({{"overlap", 1}, {"reference", 1}});
  report.checks.push_back(CheckGradients("overlap", overlap, "reference", reference, Tolerance{}));
  compared.push_back({{"overlap", 1}, {"reference", 1}});
  report.checks.push_back(
      CheckGolden("reference", reference, nullptr, "no golden for this machine's fingerprint"));
  compared.push_back({{"reference", 1}, {"", 0}});

  LocalizeFailures(report.checks, compared, nullptr,
                   [&](const ComparedRun& run, int64_t iteration, const std::string&) {
                     Trace rerun = testing::MakeTrace(2, 3);
                     for (RankTrace& rank : rerun.ranks) {
                       rank.grad_dumps[iteration] = rank.grad_dumps.at(2);
                     }
                     if (run.arm == "overlap") PerturbGrad(rerun, 1, iteration);
                     return std::optional<Trace>(rerun);
                   });
  report.seconds = 4.75;
  report.timestamp = "2026-12-01T12:00:00";
  report.out_dir = "/out";
  report.exit_code = ExitCodeOf(report.checks);
  return report;
}

TEST(ReportOutput, ExitCodeIsTheWorstVerdict) {
  EXPECT_EQ(MakeReport(Scenario::kGradientOneUlp).exit_code, kExitCheckFailed);
  EXPECT_EQ(MakeReport(Scenario::kLossAndCrash).exit_code, kExitInfrastructure);
  CheckResult error;
  error.verdict = Verdict::kError;
  CheckResult failed;
  failed.verdict = Verdict::kFail;
  EXPECT_EQ(ExitCodeOf({failed, error}), kExitInfrastructure);
  EXPECT_EQ(ExitCodeOf({}), kExitPass);
}

TEST(ReportOutput, ConsoleSummaryIsPinned) {
  ExpectLines(ConsoleReport(MakeReport(Scenario::kGradientOneUlp)), R"pinned(

recipe tiny (/recipes/tiny.toml), fingerprint cpu-0123456789ab, 4.8 s
  arm                runs  loss first -> last        peak MiB  model MiB  s/iteration  a2a hidden  TFLOP/s/rank    MFU
  reference             2  5.000000 -> 1.666667        0.00          -      0.500           -        0.0000      -
  overlap               2  5.000000 -> 1.666667        3.00       5.00      0.500           -        0.6000  50.0%
checks:
  PASS   reference reproduces itself      bit-identical: 60 records in each of 2 runs
  PASS   overlap reproduces itself        bit-identical: 60 records in each of 2 runs
  PASS   overlap vs reference: loss       bit-identical: 24 loss records (loss, lm, mtp, aux)
  FAIL   overlap vs reference: gradients  first difference at iteration 3, rank 1: main grad of w differs (digest 0x6e448086c6e2ecc9 vs 0x6e448086c6e2ecc8); first differing element 5 [1, 1]: 0.0180000011 vs 0.0179999992 (1 ulp); 1 of 12 elements differ, max |diff| 1.86264515e-09, max 1 ulp; ulp histogram: 1:1
  SKIP   golden: reference                no golden for this machine's fingerprint

overlap vs reference: gradients:
  first difference at iteration 3, rank 1: main grad of w differs (digest 0x6e448086c6e2ecc9 vs 0x6e448086c6e2ecc8); first differing element 5 [1, 1]: 0.0180000011 vs 0.0179999992 (1 ulp); 1 of 12 elements differ, max |diff| 1.86264515e-09, max 1 ulp; ulp histogram: 1:1
  1 of 18 records differ
  localized by rerun: first differing element 5 [1, 1]: 0.0180000011 vs 0.0179999992 (1 ulp); 1 of 12 elements differ, max |diff| 1.86264515e-09, max 1 ulp; ulp histogram: 1:1
result: FAIL (exit 1); reports: /out/junit.xml, /out/report.json, /out/report.html
)pinned");
}

TEST(ReportOutput, JsonReportIsPinned) {
  // One arm's run and one check of each verdict (the reproduction of the reference, the
  // localized gradients, the skipped golden) keep the pinned text short.
  RunReport report = MakeReport(Scenario::kGradientOneUlp);
  report.arms.erase(report.arms.begin());  // the overlap arm only
  report.arms[0].runs.resize(1);
  report.checks.erase(report.checks.begin() + 1, report.checks.begin() + 3);
  ExpectLines(JsonReport(report).dump(2), R"pinned(
{
  "arms": {
    "overlap": {
      "engine": "overlap",
      "runs": [
        {
          "all_to_all": {
            "count": 0,
            "exposed_seconds": 0.0,
            "hidden_fraction": 0.0,
            "in_flight_seconds": 0.0
          },
          "loss": [
            5.0,
            2.5,
            1.6666666269302368
          ],
          "memory": [
            {
              "peak_bytes": 2098155,
              "predicted_peak_bytes": 5242880,
              "rank": 0
            },
            {
              "peak_bytes": 3146731,
              "predicted_peak_bytes": 5242880,
              "rank": 1
            }
          ],
          "peak_bytes": [
            3146729,
            3146730,
            3146731
          ],
          "peak_bytes_max": 3146731,
          "records_digest": "0x2e487cad9e43009a",
          "seconds": 1.0,
          "step_seconds": [
            0.5,
            0.5,
            0.5
          ],
          "throughput": {
            "flops_per_iteration": {
              "attention": 200000000000.0,
              "backward": 400000000000.0,
              "dense": 0.0,
              "expert": 400000000000.0,
              "forward": 200000000000.0,
              "head": 100000000000.0,
              "other": 0.0,
              "replay": 100000000000.0
            },
            "hardware_tflops_per_rank": 0.7,
            "mfu": 0.5,
            "model_tflops_per_rank": 0.6,
            "ranks": [
              {
                "ceiling_tflops": 1.2,
                "hardware_tflops": 0.7,
                "iterations": 2,
                "measured_ceiling_tflops": 1.2,
                "mfu": 0.5,
                "model_flops": 600000000000.0,
                "model_tflops": 0.6,
                "rank": 0,
                "replay_flops": 100000000000.0,
                "seconds": 1.0
              },
              {
                "ceiling_tflops": 1.2,
                "hardware_tflops": 0.7,
                "iterations": 2,
                "measured_ceiling_tflops": 1.2,
                "mfu": 0.5,
                "model_flops": 600000000000.0,
                "model_tflops": 0.6,
                "rank": 1,
                "replay_flops": 100000000000.0,
                "seconds": 1.0
              }
            ]
          },
          "trace": "/out/overlap/run1/trace.h5"
        }
      ]
    }
  },
  "baseline": "reference",
  "checks": [
    {
      "arm": "reference",
      "details": "",
      "figures": {
        "compared_records": 60,
        "differing_records": 0,
        "run_digests": [
          "0x171ed91c5d98874d",
          "0x171ed91c5d98874d"
        ],
        "runs": 2
      },
      "kind": "reproduces",
      "name": "reference reproduces itself",
      "summary": "bit-identical: 60 records in each of 2 runs",
      "verdict": "pass"
    },
    {
      "arm": "overlap",
      "details": "1 of 18 records differ\nlocalized by rerun: first differing element 5 [1, 1]: 0.0180000011 vs 0.0179999992 (1 ulp); 1 of 12 elements differ, max |diff| 1.86264515e-09, max 1 ulp; ulp histogram: 1:1\n",
      "figures": {
        "compared_records": 18,
        "differing_elements": 1,
        "differing_records": 1,
        "first_element": 5,
        "max_abs_diff": 1.862645149230957e-09,
        "max_ulps": 1,
        "policy": "bitwise"
      },
      "first_difference": {
        "differing_elements": 1,
        "element": 5,
        "iteration": 3,
        "max_abs_diff": 1.862645149230957e-09,
        "parameter": "w",
        "position": [
          1,
          1
        ],
        "rank": 1,
        "record": "grad_digest",
        "ulp_histogram": {
          "1": 1
        },
        "ulps": 1,
        "value_a": 0.018000001087784767,
        "value_b": 0.017999999225139618
      },
      "kind": "gradients",
      "name": "overlap vs reference: gradients",
      "summary": "first difference at iteration 3, rank 1: main grad of w differs (digest 0x6e448086c6e2ecc9 vs 0x6e448086c6e2ecc8); first differing element 5 [1, 1]: 0.0180000011 vs 0.0179999992 (1 ulp); 1 of 12 elements differ, max |diff| 1.86264515e-09, max 1 ulp; ulp histogram: 1:1",
      "verdict": "fail"
    },
    {
      "arm": "reference",
      "details": "",
      "figures": {},
      "kind": "golden",
      "name": "golden: reference",
      "summary": "no golden for this machine's fingerprint",
      "verdict": "skipped"
    }
  ],
  "exit_code": 1,
  "fingerprint": {
    "fields": {
      "device": "cpu",
      "threads": "1",
      "world_size": "2"
    },
    "key": "cpu-0123456789ab"
  },
  "golden": {
    "path": "/golden/tiny/cpu-0123456789ab.h5",
    "present": false
  },
  "recipe": {
    "name": "tiny",
    "path": "/recipes/tiny.toml"
  },
  "repeats": 2,
  "seconds": 4.75,
  "verdict": "fail"
}
)pinned");
}

// Control characters and bytes that are not UTF-8 in a path, a name or a message reach the
// JUnit file as visible "\xNN" text, never as characters or references XML 1.0 forbids; the
// file stays well-formed and valid against tests/data/junit.xsd.
TEST(ReportOutput, JunitReportCarriesNoCharacterXmlForbids) {
  RunReport report = MakeReport(Scenario::kLossAndCrash);
  report.recipe_path = std::string(
      "/recipes/a\x01"
      "b\x1b[31mred\xff\xc3(.toml");
  report.checks[0].name += std::string("\x02");
  report.checks[0].summary += std::string(
      " \x07"
      "bell, caf\xc3\xa9");
  const std::string xml = JunitReport({report});
  for (const char* forbidden : {"&#1;", "&#2;", "&#7;", "&#27;", "&#x1;", "\x01", "\x1b", "\xff"}) {
    EXPECT_EQ(xml.find(forbidden), std::string::npos) << forbidden << "\n" << xml;
  }
  EXPECT_NE(xml.find("/recipes/a\\x01b\\x1b[31mred\\xff\\xc3(.toml"), std::string::npos) << xml;
  EXPECT_NE(xml.find("\\x07bell, caf\xc3\xa9"), std::string::npos) << xml;
  testing::TempDir dir;
  const std::string path = dir.Write("junit.xml", xml);
  testing::ExpectValidJunit(path);
}

// Whether `text` is valid UTF-8 carrying no character XML 1.0 forbids (a C0 control other than
// tab, newline and carriage return), as itself or as a character reference.
bool XmlSafe(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      if (byte < 0x20 && byte != '\t' && byte != '\n' && byte != '\r') return false;
      if (text.compare(i, 2, "&#") == 0) {  // only to a tab, newline or carriage return
        const size_t end = text.find(';', i);
        if (end == std::string::npos) return false;
        const std::string digits = text.substr(i + 2, end - i - 2);
        const bool hex = !digits.empty() && digits[0] == 'x';
        const long code = std::strtol(digits.c_str() + (hex ? 1 : 0), nullptr, hex ? 16 : 10);
        if (code != '\t' && code != '\n' && code != '\r') return false;
      }
      ++i;
      continue;
    }
    const size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC2 ? 2 : 0;
    if (length == 0 || byte > 0xF4 || i + length > text.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

// Valid UTF-8 is kept; what is not (an overlong form, a surrogate, past U+10FFFF, a truncated
// sequence) and U+FFFE / U+FFFF, which XML 1.0 has no character for, become "\xNN" (the seeded
// fuzzing below found the overlong E0 93 B9 reaching junit.xml).
TEST(ReportOutput, EscapedTextKeepsOnlyWhatXmlCanCarry) {
  EXPECT_EQ(EscapedText("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", true),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(EscapedText("\xe0\x93\xb9", true), "\\xe0\\x93\\xb9");
  EXPECT_EQ(EscapedText("\xed\xa0\x80", true), "\\xed\\xa0\\x80");
  EXPECT_EQ(EscapedText("\xf4\x90\x80\x80", true), "\\xf4\\x90\\x80\\x80");
  EXPECT_EQ(EscapedText("\xf0\x8f\xbf\xbf", true), "\\xf0\\x8f\\xbf\\xbf");
  EXPECT_EQ(EscapedText("\xef\xbf\xbe\xef\xbf\xbd", true), "\\xef\\xbf\\xbe\xef\xbf\xbd");
  EXPECT_EQ(EscapedText("a\tb\x01", true), "a\tb\\x01");
  EXPECT_EQ(EscapedText("a\tb", false), "a\\x09b");
}

// Seeded fuzzing of every string that reaches junit.xml (suite name, recipe path, baseline,
// check names, summaries, details, first divergent operations): arbitrary bytes, each file
// well-formed, free of what XML 1.0 forbids, and valid against tests/data/junit.xsd.
TEST(ReportOutput, ArbitraryBytesInEveryJunitStringStayValidXml) {
  std::mt19937_64 random(20261207);
  auto bytes = [&](size_t most) {
    std::string text(random() % (most + 1), '\0');
    for (char& c : text) c = static_cast<char>(random() % 256);
    return text;
  };
  testing::TempDir dir;
  for (int document = 0; document < 20; ++document) {
    RunReport report = MakeReport(Scenario::kLossAndCrash);
    report.name = bytes(24);
    report.recipe_path = bytes(40);
    report.baseline = bytes(12);
    for (CheckResult& check : report.checks) {
      check.name = bytes(30);
      check.summary = bytes(60);
      check.details = bytes(80);
      check.first_divergent_operations = std::vector<std::string>{bytes(40), bytes(40)};
    }
    const std::string xml = JunitReport({report});
    EXPECT_TRUE(XmlSafe(xml)) << "document " << document << ":\n" << xml;
    const std::string path = dir.Write("junit" + std::to_string(document) + ".xml", xml);
    testing::ExpectValidJunit(path);
  }
}

// NaN and infinities are shown as what they are: report.json writes them as "NaN", "Infinity"
// and "-Infinity" (not null), and report.html calls bit-identical NaN grad norms bit-identical.
TEST(ReportOutput, NonFiniteValuesAreShownAsWhatTheyAre) {
  RunReport report;
  report.name = "nan";
  report.baseline = "reference";
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const char* name : {"reference", "overlap"}) {
    ArmReport arm;
    arm.name = name;
    arm.engine = name;
    ArmRunReport run;
    run.loss = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                -std::numeric_limits<float>::infinity(), 2.5f};
    run.grad_norm = {nan, inf, 1.0};
    run.step_seconds = {1.0, 1.0, 1.0, 1.0};
    arm.runs.push_back(run);
    report.arms.push_back(arm);
  }
  const nlohmann::json json = JsonReport(report);
  const nlohmann::json& loss = json["arms"]["overlap"]["runs"][0]["loss"];
  EXPECT_EQ(loss, nlohmann::json::parse(R"(["NaN", "Infinity", "-Infinity", 2.5])")) << loss;
  EXPECT_EQ(json.dump().find("null"), std::string::npos) << json.dump();
  const std::string html = HtmlReport(report);
  EXPECT_NE(html.find("overlap vs reference: the grad norms are bit-identical at every iteration"),
            std::string::npos);
  EXPECT_EQ(html.find("the grad norms differ"), std::string::npos);
  // The loss chart marks each non-finite point where its iteration is, with what it is.
  for (const char* mark : {">NaN<title>overlap run 1 at 1: NaN</title>",
                           ">+inf<title>overlap run 1 at 2: +inf</title>",
                           ">-inf<title>reference run 1 at 3: -inf</title>"}) {
    EXPECT_NE(html.find(mark), std::string::npos) << mark;
  }
  // Bit-identical NaN and infinite grad norms differ by 0: the difference chart marks nothing.
  const size_t difference_chart = html.find("grad-norm-difference-chart");
  ASSERT_NE(difference_chart, std::string::npos);
  EXPECT_EQ(html.find("non-finite", difference_chart), std::string::npos);
  EXPECT_NE(ConsoleReport(report).find("     NaN -> 2.500000"), std::string::npos)
      << ConsoleReport(report);
}

TEST(ReportOutput, JunitReportIsPinned) {
  // The matrix's form: one testsuite per report; a cell that could not run has no properties.
  RunReport cell;
  cell.name = "matrix.flex-mtp1-mxfp8-uniform2";
  cell.timestamp = "2026-12-01T12:00:05";
  CheckResult skipped;
  skipped.kind = CheckKind::kCell;
  skipped.name = "cell";
  skipped.verdict = Verdict::kSkipped;
  skipped.summary = "cannot run: recipe.toml: [recompute] num_layers must be 1 when mtp_layers > 0";
  cell.checks.push_back(skipped);
  ExpectLines(JunitReport({MakeReport(Scenario::kLossAndCrash), cell}), R"pinned(
<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="bitparity" tests="6" failures="1" errors="1" skipped="2" time="4.75">
  <testsuite name="tiny" tests="5" failures="1" errors="1" skipped="1" time="4.75" timestamp="2026-12-01T12:00:00">
    <properties>
      <property name="recipe" value="/recipes/tiny.toml" />
      <property name="fingerprint" value="cpu-0123456789ab (device=cpu, threads=1, world_size=2)" />
      <property name="baseline" value="reference" />
    </properties>
    <testcase classname="bitparity.tiny" name="reference reproduces itself" time="0">
      <system-out>bit-identical: 60 records in each of 2 runs</system-out>
    </testcase>
    <testcase classname="bitparity.tiny" name="overlap run 2" time="0">
      <error message="rank 1 was killed by signal 9 (Killed) (arm 'overlap', 2 rank(s), after 2 s)" type="bitparity.infrastructure">rank 1 was killed by signal 9 (Killed) (arm 'overlap', 2 rank(s), after 2 s)
  rank 0 exited with code 3
</error>
    </testcase>
    <testcase classname="bitparity.tiny" name="overlap vs reference: loss" time="0">
      <failure message="first difference at iteration 2, rank 0: loss differs: 2.5000999 vs 2.5 (419 ulp); policy atol 1e-06, rtol 0" type="bitparity.mismatch">first difference at iteration 2, rank 0: loss differs: 2.5000999 vs 2.5 (419 ulp); policy atol 1e-06, rtol 0</failure>
    </testcase>
    <testcase classname="bitparity.tiny" name="overlap vs reference: gradients" time="0">
      <system-out>bit-identical: 18 gradient records (norm, every main grad)</system-out>
    </testcase>
    <testcase classname="bitparity.tiny" name="golden: reference" time="0">
      <skipped message="no golden for this machine's fingerprint" />
    </testcase>
  </testsuite>
  <testsuite name="matrix.flex-mtp1-mxfp8-uniform2" tests="1" failures="0" errors="0" skipped="1" time="0" timestamp="2026-12-01T12:00:05">
    <testcase classname="bitparity.matrix.flex-mtp1-mxfp8-uniform2" name="cell" time="0">
      <skipped message="cannot run: recipe.toml: [recompute] num_layers must be 1 when mtp_layers > 0" />
    </testcase>
  </testsuite>
</testsuites>
)pinned");
}

}  // namespace
}  // namespace bitparity
