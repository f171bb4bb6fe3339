// Goldens across a fleet of machines: recorded (with node probes) from a passing run and
// matched; pinned to the recipe's CPU level, so that any host of that level compares them; a
// golden of another fingerprint is a skip that explains the difference, or a failure where
// goldens are required (CI); the baseline's peak memory is held to its golden's; an unusable
// golden is bad input and never overwritten; an environment that unpins a library is bad input.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/temporary_mark.h"
#include "harness/probe_compare.h"
#include "tests/support/junit_reader.h"
#include "tests/support/small_recipe_run.h"
#include "tests/support/test_support.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;
using testing::ExpectValidJunit;
using testing::ReadJunit;
using testing::SmallRecipeTest;

// The one golden file of the recipe "small" in `store`.
std::string GoldenIn(const std::string& store) {
  std::string golden;
  for (const auto& e : fs::directory_iterator(store + "/small")) {
    if (e.path().extension() == ".h5") golden = e.path().string();  // beside the update's lock
  }
  return golden;
}

TEST_F(SmallRecipeTest, GoldenLifecycle) {
  // An interrupted update's temporary in the golden store: the next update removes it.
  const std::string debris =
      dir_.File("golden/small/cpu-000000000000.h5.tmp." + ThisMachineMark() + "-999999999-1");
  fs::create_directories(dir_.File("golden/small"));
  dir_.Write("golden/small/" + fs::path(debris).filename().string(), "partial\n");
  // Record a golden from a clean run, then a clean run matches it.
  testing::CommandResult update = Run("update", {"--update-golden"});
  ASSERT_EQ(update.exit_code, 0) << update.output;
  EXPECT_FALSE(fs::exists(debris));
  std::vector<fs::path> goldens;
  for (const auto& e : fs::directory_iterator(dir_.File("golden/small"))) {
    if (e.path().extension() == ".h5") goldens.push_back(e.path());  // beside the update's lock
  }
  ASSERT_EQ(goldens.size(), 1u);
  const std::string golden = goldens[0].string();
  Trace recorded = ReadTrace(golden);
  EXPECT_FALSE(recorded.attribute("golden.git_revision").empty());
  EXPECT_NE(recorded.attribute("golden.command_line").find("--update-golden"), std::string::npos);
  EXPECT_FALSE(recorded.attribute("golden.created_utc").empty());
  EXPECT_EQ(recorded.ranks[0].attributes["provenance.cpu_isa"], "avx2");
  EXPECT_TRUE(HasProbes(recorded)) << "goldens are recorded with node probes";

  testing::CommandResult clean = Run("clean");
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_EQ(ReadJunit(dir_.File("clean/junit.xml"))->cases["golden: reference"].first, "pass");
  EXPECT_EQ(ReadJunit(dir_.File("clean/junit.xml"))->cases["golden memory: reference"].first,
            "pass");

  // The same perturbation in both runs of the baseline: it reproduces itself, but disagrees with
  // the other arm and with the golden, both localized to the same element.
  testing::CommandResult both =
      Run("both", {"--perturb",
                   "reference:all:rank=0,iteration=4,param=layers.2.mlp.router,"
                   "element=5,ulps=2"});
  EXPECT_EQ(both.exit_code, 1) << both.output;
  auto junit = ReadJunit(dir_.File("both/junit.xml"));
  EXPECT_EQ(junit->cases["reference reproduces itself"].first, "pass");
  for (const char* check : {"overlap vs reference: gradients", "golden: reference"}) {
    const auto& [verdict, message] = junit->cases[check];
    EXPECT_EQ(verdict, "failure") << check;
    EXPECT_NE(message.find("iteration 4, rank 0: main grad of layers.2.mlp.router"),
              std::string::npos)
        << check << ": " << message;
    EXPECT_NE(message.find("first differing element 5 [0, 5]"), std::string::npos) << message;
    EXPECT_NE(message.find("(2 ulp)"), std::string::npos) << message;
  }

  // --update-golden from a run in which another check failed is refused, and the golden stays.
  const std::string matching = testing::ReadFile(golden);
  testing::CommandResult refused =
      Run("refused", {"--update-golden", "--perturb",
                      "overlap:2:rank=1,iteration=2,param=layers.1.attention.qkv,element=17"});
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  {
    auto junit = ReadJunit(dir_.File("refused/junit.xml"));
    const auto& [verdict, message] = junit->cases["golden: reference"];
    EXPECT_EQ(verdict, "failure");
    EXPECT_NE(message.find("not updated: 1 other check(s) failed"), std::string::npos) << message;
    EXPECT_EQ(testing::ReadFile(golden), matching) << "a failing run must not write the golden";
  }

  // Replacing a golden that differs (every other check passing) is allowed, but the report says
  // what the replaced golden disagreed on.
  testing::CommandResult replaced =
      Run("replaced", {"--update-golden", "--arms", "reference", "--perturb",
                       "reference:all:rank=0,iteration=4,param=layers.2.mlp.router,element=5"});
  EXPECT_EQ(replaced.exit_code, 0) << replaced.output;
  {
    EXPECT_EQ(ReadJunit(dir_.File("replaced/junit.xml"))->cases["golden: reference"].first, "pass");
    EXPECT_NE(replaced.output.find("the golden it replaced differed"), std::string::npos)
        << replaced.output;
    EXPECT_NE(testing::ReadFile(golden), matching);
    nlohmann::json report =
        nlohmann::json::parse(testing::ReadFile(dir_.File("replaced/report.json")));
    bool flagged = false;
    for (const auto& check : report["checks"]) {
      if (check["name"] == "golden: reference") {
        flagged = check["figures"]["replaced_a_differing_golden"].get<bool>();
        EXPECT_NE(check["summary"].get<std::string>().find("main grad of layers.2.mlp.router"),
                  std::string::npos)
            << check["summary"];
      }
    }
    EXPECT_TRUE(flagged);
  }

  // A golden of another fingerprint does not apply: skipped, with the reason and how the nearest
  // golden differs (the one just replaced, perturbed at iteration 4).
  Trace other = ReadTrace(golden);
  for (RankTrace& rank : other.ranks) rank.attributes["provenance.blas"] = "/opt/other/libblas.so";
  fs::remove(golden);
  WriteTrace(dir_.File("golden/small/cpu-000000000000.h5"), other);
  testing::CommandResult skipped = Run("skipped");
  EXPECT_EQ(skipped.exit_code, 0) << skipped.output;
  auto skipped_junit = ReadJunit(dir_.File("skipped/junit.xml"));
  const auto& [verdict, message] = skipped_junit->cases["golden: reference"];
  EXPECT_EQ(verdict, "skipped");
  EXPECT_NE(message.find("cpu-000000000000.h5 (differs in blas)"), std::string::npos) << message;
  EXPECT_NE(message.find("the nearest golden (cpu-"), std::string::npos) << message;
  EXPECT_NE(message.find(") first differs at iteration 4, rank 0: grad_digest of "
                         "layers.2.mlp.router"),
            std::string::npos)
      << message;

  // In CI (--require-golden) the same run fails its golden check instead, naming the command
  // that records one; the JUnit file says failure, and stays valid.
  testing::CommandResult required = Run("required", {"--require-golden"});
  EXPECT_EQ(required.exit_code, 1) << required.output;
  ExpectValidJunit(dir_.File("required/junit.xml"));
  auto required_junit = ReadJunit(dir_.File("required/junit.xml"));
  const auto& [required_verdict, required_message] = required_junit->cases["golden: reference"];
  EXPECT_EQ(required_verdict, "failure");
  EXPECT_EQ(required_message.rfind("goldens are required (--require-golden): no golden for this "
                                   "machine's fingerprint",
                                   0),
            0u)
      << required_message;
  EXPECT_NE(required_message.find("record one with `bitparity run " + recipe_ +
                                  " --update-golden` on a machine of this fingerprint"),
            std::string::npos)
      << required_message;
  EXPECT_EQ(required_junit->cases["reference reproduces itself"].first, "pass");

  // A recipe without any golden has nothing to require: still a skip.
  fs::remove_all(dir_.File("golden/small"));
  testing::CommandResult none = Run("none", {"--require-golden"});
  EXPECT_EQ(none.exit_code, 0) << none.output;
  EXPECT_EQ(ReadJunit(dir_.File("none/junit.xml"))->cases["golden: reference"].first, "skipped");
}

TEST_F(SmallRecipeTest, CorruptGoldenIsBadInputAndLeftUnchanged) {
  ASSERT_EQ(Run("update", {"--update-golden"}).exit_code, 0);
  std::string golden;
  for (const auto& e : fs::directory_iterator(dir_.File("golden/small"))) {
    if (e.path().extension() == ".h5") golden = e.path().string();
  }
  fs::resize_file(golden, fs::file_size(golden) / 2);
  const std::string before = testing::ReadFile(golden);
  for (const char* out : {"corrupt", "corrupt_update"}) {
    std::vector<std::string> extra;
    if (std::string(out) == "corrupt_update") extra.push_back("--update-golden");
    testing::CommandResult r = Run(out, extra);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(golden), std::string::npos) << r.output;
    EXPECT_EQ(testing::ReadFile(golden), before) << "an unusable golden must never be overwritten";
    EXPECT_FALSE(fs::exists(dir_.File(out))) << "bad input writes nothing";
  }
}

// ci/gate requires goldens: a recipe whose only golden is of another fingerprint fails it, and
// the summary counts the golden checks.
TEST_F(SmallRecipeTest, CiGateFailsARecipeWithoutAGoldenForThisFingerprint) {
  ASSERT_EQ(Run("update", {"--update-golden", "--arms", "reference"}).exit_code, 0);
  Trace other = ReadTrace(GoldenIn(dir_.File("golden")));
  for (RankTrace& rank : other.ranks) rank.attributes["provenance.onednn_version"] = "0.0";
  fs::remove_all(dir_.File("golden/small"));
  fs::create_directories(dir_.File("golden/small"));
  WriteTrace(dir_.File("golden/small/cpu-000000000000.h5"), other);
  fs::create_directories(dir_.File("recipes"));
  const std::string recipe = dir_.Write("recipes/small.toml", testing::SmallRecipeToml());
  const std::string command = testing::SourceDir() + "/ci/gate --out " + dir_.File("gate") + " " +
                              recipe + " > " + dir_.File("gate.log") + " 2>&1";
  const int status = std::system(command.c_str());
  const std::string log = testing::ReadFile(dir_.File("gate.log"));
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 1) << log;
  EXPECT_NE(log.find("gate: 1 golden check(s): 0 passed, 1 failed, 0 skipped"), std::string::npos)
      << log;
  EXPECT_EQ(ReadJunit(dir_.File("gate/junit/small.xml"))->cases["golden: reference"].first,
            "failure");
}

TEST_F(SmallRecipeTest, GoldensHoldPeakMemoryToTheRecipesTolerance) {
  ASSERT_EQ(Run("update", {"--update-golden", "--arms", "reference"}).exit_code, 0);
  const std::string golden = GoldenIn(dir_.File("golden"));
  // A change that only keeps more alive: rank 1 peaks 25% above the golden at iteration 3.
  Trace edited = ReadTrace(golden);
  IterationRecord& record = edited.ranks[1].iterations[2];
  record.peak_bytes = record.peak_bytes * 4 / 5;
  WriteTrace(golden, edited);
  testing::CommandResult more = Run("more", {"--arms", "reference"});
  EXPECT_EQ(more.exit_code, 1) << more.output;
  auto junit = ReadJunit(dir_.File("more/junit.xml"));
  EXPECT_EQ(junit->cases["golden: reference"].first, "pass") << "the bits are the golden's";
  const auto& [verdict, message] = junit->cases["golden memory: reference"];
  EXPECT_EQ(verdict, "failure");
  EXPECT_EQ(message.rfind("peak memory differs from the golden's at iteration 3, rank 1: ", 0), 0u)
      << message;
  EXPECT_NE(message.find("MiB against the golden's "), std::string::npos) << message;
  EXPECT_NE(message.find("%, bound 5.0%)"), std::string::npos) << message;
  // The recipe states the tolerance ([compare] does not make a golden stale).
  const std::string loose =
      dir_.Write("small.toml", testing::SmallRecipeToml() + "[compare]\ngolden_memory = 0.3\n");
  ASSERT_EQ(loose, recipe_);
  testing::CommandResult within = Run("within", {"--arms", "reference"});
  EXPECT_EQ(within.exit_code, 0) << within.output;
  EXPECT_EQ(ReadJunit(dir_.File("within/junit.xml"))->cases["golden memory: reference"].first,
            "pass");
}

// A golden recorded at the default level (avx2) against a run at another pinned level (sse4_2:
// ATen's default kernels): a skip whose explanation names the fingerprint field, the first
// divergent record and, from the golden's probes and a rerun with probes, the first divergent
// operation; `bitparity diff --explain` says the same of the two traces.
TEST_F(SmallRecipeTest, AGoldenOfAnotherCpuLevelExplainsTheFirstDivergentOperation) {
  ASSERT_EQ(Run("update", {"--update-golden", "--arms", "reference"}).exit_code, 0);
  const std::string golden = GoldenIn(dir_.File("golden"));
  std::string text = testing::SmallRecipeToml();
  text.replace(text.find("ep = 2\n"), 7, "ep = 2\ncpu_isa = \"sse4_2\"\n");
  dir_.Write("small.toml", text);
  testing::CommandResult other = Run("other", {"--arms", "reference"});
  EXPECT_EQ(other.exit_code, 0) << other.output;
  const nlohmann::json report =
      nlohmann::json::parse(testing::ReadFile(dir_.File("other/report.json")));
  bool found = false;
  for (const nlohmann::json& check : report["checks"]) {
    if (check["name"] != "golden: reference") continue;
    found = true;
    EXPECT_EQ(check["verdict"], "skipped");
    const nlohmann::json& f = check["figures"];
    EXPECT_EQ(f["nearest_golden"], golden);
    EXPECT_EQ(f["fingerprint_differences"], nlohmann::json::array({"cpu_isa: avx2 vs sse4_2"}));
    EXPECT_EQ(f["identical_to_nearest"], false);
    EXPECT_EQ(f["first_difference"].get<std::string>().rfind("iteration 1, rank ", 0), 0u) << f;
    ASSERT_TRUE(f.contains("first_divergent_operations")) << check.dump(2);
    ASSERT_FALSE(f["first_divergent_operations"].empty()) << check.dump(2);
    EXPECT_NE(f["first_divergent_operations"][0].get<std::string>().find(
                  "first divergent operation: iteration 1, microbatch 0"),
              std::string::npos)
        << f["first_divergent_operations"];
  }
  EXPECT_TRUE(found) << report.dump(2);

  testing::CommandResult probed =
      testing::RunBitparity({"arm", recipe_, "--arm", "reference", "--out", dir_.File("sse4_2.h5"),
                             "--probes", "--quiet"});
  ASSERT_EQ(probed.exit_code, 0) << probed.output;
  testing::CommandResult explain =
      testing::RunBitparity({"diff", "--explain", golden, dir_.File("sse4_2.h5")});
  EXPECT_EQ(explain.exit_code, 1) << explain.output;
  EXPECT_NE(explain.output.find("cpu_isa: avx2 vs sse4_2"), std::string::npos) << explain.output;
  EXPECT_NE(explain.output.find("first difference: iteration 1, rank "), std::string::npos)
      << explain.output;
  EXPECT_NE(explain.output.find(": first divergent operation: iteration 1, microbatch 0"),
            std::string::npos)
      << explain.output;
  // Two runs at one level are identical for --explain too.
  testing::CommandResult same =
      testing::RunBitparity({"diff", "--explain", dir_.File("sse4_2.h5"), dir_.File("sse4_2.h5")});
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find("fingerprints: equal"), std::string::npos) << same.output;
}

TEST_F(SmallRecipeTest, AnEnvironmentThatUnpinsALibraryIsBadInputBeforeAnyRankStarts) {
  testing::CommandResult r = Run("unpinned", {}, {{"MKL_CBWR", "AVX2,STRICT"}});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("environment: MKL_CBWR=AVX2,STRICT conflicts with MKL_CBWR=COMPATIBLE "
                          "that bitparity pins"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_.File("unpinned"))) << "bad input writes nothing";
  // At "native" ATen runs the host's best kernels unless the user says otherwise.
  std::string text = testing::SmallRecipeToml();
  text.replace(text.find("ep = 2\n"), 7, "ep = 2\ncpu_isa = \"native\"\n");
  dir_.Write("small.toml", text);
  testing::CommandResult native =
      Run("native", {"--arms", "reference", "--repeats", "1", "--no-golden"},
          {{"ATEN_CPU_CAPABILITY", "default"}});
  EXPECT_EQ(native.exit_code, 0) << "native leaves ATen's kernels to the user: " << native.output;
}

}  // namespace
}  // namespace bitparity
