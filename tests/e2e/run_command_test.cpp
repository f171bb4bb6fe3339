// `bitparity run`, the job CI gates on: the default recipe passes end to end with a JUnit file
// that parses and validates and a report.json with the figures; one-ulp perturbations are
// caught and localized by the right checks; goldens are recorded, matched, skipped for other
// fingerprints and never overwritten when unusable; a crashed rank is an error, not a failure.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <pugixml.hpp>
#include <regex>
#include <thread>

#include "config/recipe.h"
#include "core/temporary_mark.h"
#include "harness/process.h"
#include "tests/support/junit_reader.h"
#include "tests/support/small_recipe_run.h"
#include "tests/support/test_support.h"
#include "trace/trace.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

using testing::ExpectValidJunit;
using testing::ReadJunit;
using testing::SmallRecipeTest;

TEST(RunCommand, DefaultRecipePassesEndToEnd) {
  testing::TempDir dir;
  testing::CommandResult r = testing::RunBitparity(
      {"run", testing::SourceDir() + "/recipes/default.toml", "--out", dir.File("out")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("result: PASS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("reference    run 2/2  iteration 20/20"), std::string::npos) << r.output;

  const std::string junit_path = dir.File("out/junit.xml");
  ExpectValidJunit(junit_path);
  auto junit = ReadJunit(junit_path);
  for (const char* name :
       {"reference reproduces itself", "overlap reproduces itself", "overlap vs reference: loss",
        "overlap vs reference: gradients", "overlap vs reference: parameters",
        "reference resumes bit-identically", "overlap resumes bit-identically",
        "overlap resumes bit-identically from reference", "overlap vs reference: peak memory"}) {
    ASSERT_TRUE(junit->cases.count(name)) << name;
    EXPECT_EQ(junit->cases[name].first, "pass") << name;
  }
  ASSERT_TRUE(junit->cases.count("golden: reference"));
  EXPECT_NE(junit->cases["golden: reference"].first, "failure");
  EXPECT_STREQ(junit->doc.child("testsuites").child("testsuite").attribute("name").value(),
               "default");

  nlohmann::json report = nlohmann::json::parse(testing::ReadFile(dir.File("out/report.json")));
  EXPECT_EQ(report["verdict"], "pass");
  EXPECT_EQ(report["exit_code"], 0);
  EXPECT_FALSE(report["fingerprint"]["key"].get<std::string>().empty());
  for (const char* arm : {"reference", "overlap"}) {
    const auto& runs = report["arms"][arm]["runs"];
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[0]["loss"].size(), 20u);
    EXPECT_EQ(runs[0]["step_seconds"].size(), 20u);
    EXPECT_GT(runs[0]["peak_bytes_max"].get<int64_t>(), 0);
    EXPECT_TRUE(fs::exists(runs[0]["trace"].get<std::string>()));
    // Throughput: counted FLOPs over the step, against the ceiling each rank measured.
    const auto& throughput = runs[0]["throughput"];
    const auto& flops = throughput["flops_per_iteration"];
    EXPECT_GT(flops["forward"].get<double>(), 0) << arm;
    EXPECT_EQ(flops["backward"].get<double>(), 2 * flops["forward"].get<double>()) << arm;
    EXPECT_GT(flops["replay"].get<double>(), 0) << arm;  // full recompute
    EXPECT_GT(throughput["model_tflops_per_rank"].get<double>(), 0) << arm;
    EXPECT_GT(throughput["mfu"].get<double>(), 0) << arm;
    EXPECT_LT(throughput["mfu"].get<double>(), 1) << arm;
    for (const auto& rank : throughput["ranks"]) {
      EXPECT_GT(rank["ceiling_tflops"].get<double>(), 0) << arm;
    }
  }
  // Both arms do the same arithmetic: the same counted FLOPs.
  EXPECT_EQ(report["arms"]["reference"]["runs"][0]["throughput"]["flops_per_iteration"],
            report["arms"]["overlap"]["runs"][0]["throughput"]["flops_per_iteration"]);
  EXPECT_NE(r.output.find("TFLOP/s/rank    MFU"), std::string::npos) << r.output;
  EXPECT_GE(report["checks"].size(), 6u);
}

TEST_F(SmallRecipeTest, OneUlpInOneRunFailsSelfReproductionAtThatElement) {
  testing::CommandResult r =
      Run("perturbed", {"--perturb",
                        "overlap:2:rank=1,iteration=2,param=layers.1.attention.qkv,"
                        "element=17"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  auto junit = ReadJunit(dir_.File("perturbed/junit.xml"));
  const auto& [verdict, message] = junit->cases["overlap reproduces itself"];
  EXPECT_EQ(verdict, "failure");
  // Iteration 2 is not dumped: the harness reruns both runs with dumps to name the element.
  EXPECT_NE(message.find("iteration 2, rank 1: main grad of layers.1.attention.qkv"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("first differing element 17 [0, 17]"), std::string::npos) << message;
  EXPECT_NE(message.find("(1 ulp)"), std::string::npos) << message;
  // The switch is the difference: no reruns to attribute it.
  const nlohmann::json report =
      nlohmann::json::parse(testing::ReadFile(dir_.File("perturbed/report.json")));
  for (const nlohmann::json& c : report["checks"]) {
    if (c["name"] != "overlap reproduces itself") continue;
    const std::string details = c["details"];
    EXPECT_NE(details.find("attribution: not run: run 2 of overlap carries --perturb"),
              std::string::npos)
        << details;
    EXPECT_FALSE(c["figures"].contains("attribution")) << c.dump(2);
  }
  EXPECT_EQ(junit->cases["reference reproduces itself"].first, "pass");
  EXPECT_EQ(junit->cases["overlap vs reference: loss"].first, "pass");
}

TEST_F(SmallRecipeTest, RanksTrainTheRecipeTextTheLauncherRead) {
  const std::string text = testing::ReadFile(recipe_);
  testing::CommandResult r = Run("once", {"--arms", "reference", "--repeats", "1", "--no-golden"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Trace trace = ReadTrace(dir_.File("once/reference/run1/trace.h5"));
  EXPECT_EQ(trace.attribute(trace_keys::kRecipe), text);
  EXPECT_EQ(trace.attribute(trace_keys::kRecipeDigest), RecipeDigest(text));
  // The path is the recipe's own, not the launcher's snapshot (gone with the parts folder).
  const std::string origin = fs::absolute(recipe_).lexically_normal().string();
  int paths = 0;
  if (!trace.attribute(trace_keys::kRecipePath).empty()) {
    EXPECT_EQ(trace.attribute(trace_keys::kRecipePath), origin);
    ++paths;
  }
  for (const RankTrace& rank : trace.ranks) {
    if (!rank.attributes.count(trace_keys::kRecipePath)) continue;
    EXPECT_EQ(rank.attributes.at(trace_keys::kRecipePath), origin);
    ++paths;
  }
  EXPECT_GT(paths, 0) << "the trace names where its recipe came from";
  // A rank handed a recipe whose digest is not the launcher's refuses it (bad input).
  testing::CommandResult worker =
      testing::RunBitparity({"worker", "--recipe", recipe_, "--arm", "reference", "--out-dir",
                             dir_.File("."), "--recipe-digest", "0123456789abcdef"},
                            {{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(worker.exit_code, 2) << worker.output;
  EXPECT_NE(worker.output.find("the recipe changed after the run started"), std::string::npos)
      << worker.output;
}

TEST_F(SmallRecipeTest, ExportedDeveloperSwitchesAreRecordedAndKeepGoldensOut) {
  const std::vector<std::pair<std::string, std::string>> env = {
      {"BITPARITY_PERTURB", "rank=0,iteration=1,param=head,element=0"}};
  testing::CommandResult refused = Run("switch_golden", {"--update-golden"}, env);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_EQ(refused.output.rfind("warning: developer switch active: BITPARITY_PERTURB=", 0), 0u)
      << "the first line says so: " << refused.output;
  EXPECT_NE(refused.output.find("--update-golden with developer switches set"), std::string::npos)
      << refused.output;
  EXPECT_FALSE(fs::exists(dir_.File("golden/small")));

  testing::CommandResult r =
      Run("switch", {"--arms", "reference", "--repeats", "1", "--no-golden"}, env);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json report = nlohmann::json::parse(testing::ReadFile(dir_.File("switch/report.json")));
  ASSERT_EQ(report["developer_switches"].size(), 1u) << report.dump();
  EXPECT_EQ(report["developer_switches"][0],
            "BITPARITY_PERTURB=rank=0,iteration=1,param=head,element=0");
  const Trace trace = ReadTrace(dir_.File("switch/reference/run1/trace.h5"));
  EXPECT_EQ(trace.attribute(trace_keys::kDeveloperSwitches),
            "BITPARITY_PERTURB=rank=0,iteration=1,param=head,element=0");
  // Without one, neither the report nor the trace mentions any.
  ASSERT_EQ(Run("clean", {"--arms", "reference", "--repeats", "1", "--no-golden"}).exit_code, 0);
  nlohmann::json clean = nlohmann::json::parse(testing::ReadFile(dir_.File("clean/report.json")));
  EXPECT_FALSE(clean.contains("developer_switches"));
  EXPECT_EQ(ReadTrace(dir_.File("clean/reference/run1/trace.h5"))
                .attributes.count(trace_keys::kDeveloperSwitches),
            0u);
}

TEST_F(SmallRecipeTest, ASecondProcessIsRefusedTheOutputFolderOfAFirst) {
  // Another process holds the folder's lock (as a running bitparity does).
  fs::create_directories(dir_.File("busy"));
  const std::string lock_path = dir_.File("busy/.bitparity.lock");
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  ASSERT_EQ(::write(fd, "4242\n", 5), 5);
  for (const std::string command : {"run", "matrix"}) {
    std::vector<std::string> args = {command, recipe_, "--out", dir_.File("busy"), "--quiet"};
    if (command == "matrix") {
      args[1] = dir_.Write("m.toml",
                           "[matrix]\nbase = \"small.toml\"\n[matrix.axes]\nmtp_layers = [0]\n");
      args.pop_back();
    }
    testing::CommandResult r = testing::RunBitparity(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("another bitparity process (pid 4242) is writing here"),
              std::string::npos)
        << r.output;
  }
  EXPECT_FALSE(fs::exists(dir_.File("busy/report.json")));
  ::close(fd);  // the holder ends: the folder is free again
  EXPECT_EQ(Run("busy", {"--arms", "reference", "--repeats", "1", "--no-golden"}).exit_code, 0);
}

// A lock path that is a symbolic link, a hard link or a file of other content is not opened
// through, truncated or written: exit 2 naming it, and its target as it was.
TEST_F(SmallRecipeTest, ALockThatIsNotOursIsLeftAlone) {
  const std::string target = dir_.Write("precious.txt", "the user's data\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"symlink", "is a symbolic link"},
      {"hardlink", "is not a bitparity lock (it has other names (a hard link))"},
      {"content", "is not a bitparity lock (it holds something else)"}};
  for (const auto& [kind, reason] : cases) {
    const std::string out = dir_.File("lock_" + kind);
    fs::create_directories(out);
    const std::string lock = out + "/.bitparity.lock";
    if (kind == "symlink") fs::create_symlink(target, lock);
    if (kind == "hardlink") fs::create_hard_link(target, lock);
    if (kind == "content") dir_.Write("lock_content/.bitparity.lock", "notes, not a pid\n");
    testing::CommandResult r =
        Run("lock_" + kind, {"--arms", "reference", "--repeats", "1", "--no-golden"});
    EXPECT_EQ(r.exit_code, 2) << kind << ": " << r.output;
    EXPECT_NE(r.output.find(lock + " " + reason), std::string::npos) << r.output;
    EXPECT_EQ(testing::ReadFile(target), "the user's data\n") << kind;
    EXPECT_FALSE(fs::exists(out + "/report.json")) << kind;
  }
  EXPECT_EQ(testing::ReadFile(dir_.File("lock_content/.bitparity.lock")), "notes, not a pid\n");
}

TEST_F(SmallRecipeTest, OnATerminalEachRunsProgressIsOneLineRewrittenInPlace) {
  // util-linux's script(1) gives the run a terminal; in a pipe (every other test) progress is one
  // line per iteration.
  ProcessOptions process;
  process.executable = "script";
  process.arguments = {"-qfec",
                       testing::BitparityBinary() + " run " + recipe_ + " --out " +
                           dir_.File("tty") + " --arms reference --repeats 1 --no-golden",
                       "/dev/null"};
  process.output_path = dir_.File("tty.log");
  int exit_code = -1;
  try {
    exit_code = RunProcess(process);
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no script(1) to give the run a terminal: " << e.what();
  }
  ASSERT_EQ(exit_code, 0) << testing::ReadFile(dir_.File("tty.log"));
  const std::string out = testing::ReadFile(dir_.File("tty.log"));
  const size_t first = out.find("\r  reference    run 1/1  iteration 1/4");
  ASSERT_NE(first, std::string::npos) << out;
  const size_t last = out.find("iteration 4/4", first);
  ASSERT_NE(last, std::string::npos) << out;
  // Four updates, one line: no newline between the first and the last.
  EXPECT_EQ(out.substr(first, last - first).find('\n'), std::string::npos) << out;
  EXPECT_NE(out.find("\x1b[K", first), std::string::npos) << out;
  // In a pipe: a line per iteration.
  testing::CommandResult piped =
      testing::RunBitparity({"run", recipe_, "--out", dir_.File("pipe"), "--arms", "reference",
                             "--repeats", "1", "--no-golden"});
  EXPECT_EQ(piped.output.find('\r'), std::string::npos);
  EXPECT_NE(piped.output.find("iteration 2/4  loss"), std::string::npos) << piped.output;
}

TEST_F(SmallRecipeTest, AGoldenIsUpdatedByOneProcessAtATime) {
  // Another process updates this recipe's golden (holds its folder of the store).
  fs::create_directories(dir_.File("golden/small"));
  const int fd = ::open(dir_.File("golden/small/.bitparity.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  ASSERT_EQ(::write(fd, "4343\n", 5), 5);
  testing::CommandResult update = Run("update", {"--arms", "reference", "--update-golden"});
  EXPECT_EQ(update.exit_code, 2) << update.output;
  EXPECT_NE(update.output.find(dir_.File("golden/small") +
                               ": another bitparity process (pid 4343) is writing here; wait for "
                               "its --update-golden to finish"),
            std::string::npos)
      << update.output;
  EXPECT_FALSE(fs::exists(dir_.File("update/report.json")));
  // A run that only checks the golden reads it without the lock.
  EXPECT_EQ(Run("check", {"--arms", "reference", "--repeats", "1"}).exit_code, 0);
  ::close(fd);
  testing::CommandResult again = Run("update", {"--arms", "reference", "--update-golden"});
  EXPECT_EQ(again.exit_code, 0) << again.output;
  int goldens = 0;
  for (const auto& entry : fs::directory_iterator(dir_.File("golden/small"))) {
    goldens += entry.path().extension() == ".h5";
  }
  EXPECT_EQ(goldens, 1);
}

// Starts bitparity with `args` (output to `log`), interrupts it with `signal` once `log` shows
// `marker` (by default a training iteration), and returns its exit code.
int InterruptedExitCode(const std::vector<std::string>& args, const std::string& log, int signal,
                        const std::string& marker = "iteration 1/") {
  const pid_t child = ::fork();
  if (child == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<std::string> argv_strings = {testing::BitparityBinary()};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         testing::ReadFile(log).find(marker) == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(child, signal);
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_F(SmallRecipeTest, AnInterruptedRunEndsItsRanksCleansUpAndReports) {
  // A long recipe, so that the signal lands in the middle of a run.
  const std::string long_recipe = dir_.Write(
      "long.toml", std::regex_replace(testing::ReadFile(recipe_), std::regex("iterations = \\d+"),
                                      "iterations = 400"));
  // Debris of a process of this machine that no longer runs, in the run's folders: removed by
  // the next run. What carries no mark of bitparity's (a user's folder and file named like old
  // temporaries), and a mark of another machine or container (a live run there), stay.
  const std::string dead = ThisMachineMark() + "-999999999-1";
  fs::create_directories(dir_.File("int/reference/run1/trace.h5.parts." + dead));
  dir_.Write("int/junit.xml.tmp." + dead, "stale\n");
  const std::vector<std::string> kept = {"int/notes.parts.4242/mine.txt", "int/notes.tmp.4242",
                                         "int/other.parts.0123456789abcdef-999999999-1/x"};
  for (const std::string& file : kept) {
    fs::create_directories(fs::path(dir_.File(file)).parent_path());
    dir_.Write(file, "not bitparity's to remove\n");
  }
  for (const auto& [signal, code] :
       std::vector<std::pair<int, int>>{{SIGINT, 130}, {SIGTERM, 143}}) {
    const std::string log = dir_.File("int." + std::to_string(signal) + ".log");
    const int exit_code = InterruptedExitCode(
        {"run", long_recipe, "--out", dir_.File("int"), "--no-golden"}, log, signal);
    EXPECT_EQ(exit_code, code) << testing::ReadFile(log);
    nlohmann::json report = nlohmann::json::parse(testing::ReadFile(dir_.File("int/report.json")));
    EXPECT_EQ(report["exit_code"], code);
    EXPECT_EQ(report["verdict"], "error");
    bool interrupted = false;
    for (const auto& check : report["checks"]) {
      EXPECT_EQ(check["verdict"], "error") << check.dump();
      interrupted |=
          check["summary"].get<std::string>().find("interrupted by SIG") != std::string::npos;
    }
    EXPECT_TRUE(interrupted) << report.dump();
    ExpectValidJunit(dir_.File("int/junit.xml"));
    // No temporaries of any bitparity process of this machine left, and no rank still running.
    for (const std::string& file : kept) EXPECT_TRUE(fs::exists(dir_.File(file))) << file;
    for (const auto& entry : fs::recursive_directory_iterator(dir_.File("int"))) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("notes.", 0) == 0 || name.rfind("other.", 0) == 0 || name == "mine.txt" ||
          name == "x") {
        continue;
      }
      EXPECT_EQ(name.find(".parts."), std::string::npos) << entry.path();
      EXPECT_EQ(name.find(".tmp."), std::string::npos) << entry.path();
    }
    EXPECT_TRUE(testing::ProcessesMentioning(long_recipe).empty());
  }
}

// A signal while `run` reruns a failing pair to localize it: the reruns stop, every check is
// errored "interrupted" (the verdict it had kept in its text), and the exit code is 128 + signal.
TEST_F(SmallRecipeTest, AnInterruptDuringLocalizingRerunsIsAnInterrupt) {
  const std::string long_recipe = dir_.Write(
      "long.toml", std::regex_replace(testing::ReadFile(recipe_), std::regex("iterations = \\d+"),
                                      "iterations = 40"));
  const std::string log = dir_.File("rerun.log");
  const int exit_code = InterruptedExitCode(
      {"run", long_recipe, "--out", dir_.File("rerun"), "--no-golden", "--arms", "overlap",
       "--perturb", "overlap:2:rank=1,iteration=40,param=layers.1.attention.qkv,element=17"},
      log, SIGINT, "localizing: rerunning");
  EXPECT_EQ(exit_code, 130) << testing::ReadFile(log);
  const nlohmann::json report =
      nlohmann::json::parse(testing::ReadFile(dir_.File("rerun/report.json")));
  EXPECT_EQ(report["exit_code"], 130);
  bool kept = false;
  for (const auto& check : report["checks"]) {
    if (check["verdict"] == "skipped") continue;
    EXPECT_EQ(check["verdict"], "error") << check.dump();
    EXPECT_NE(check["summary"].get<std::string>().find("interrupted by SIGINT"), std::string::npos)
        << check.dump();
    kept |=
        check["details"].get<std::string>().find("before the signal: fail") != std::string::npos;
  }
  EXPECT_TRUE(kept) << report.dump(2);
  ExpectValidJunit(dir_.File("rerun/junit.xml"));
  // No rerun started after the signal: one localizing line per rerun started, at most two.
  const std::string output = testing::ReadFile(log);
  size_t reruns = 0;
  for (size_t at = output.find("localizing: rerunning"); at != std::string::npos;
       at = output.find("localizing: rerunning", at + 1)) {
    ++reruns;
  }
  EXPECT_LE(reruns, 1u) << output;
  EXPECT_TRUE(testing::ProcessesMentioning(long_recipe).empty());
}

// A developer switch that cannot apply is bad input before any rank trains: exit 2, the switch
// and the reason named, no output folder. What only the target rank can tell (its parameters)
// it tells when the arm's ranks start once to check the switches against their model.
TEST_F(SmallRecipeTest, DeveloperSwitchesThatCannotApplyAreRefusedBeforeAnyTraining) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::pair<std::string, std::string>> env;
    std::string message;
  };
  const std::string qkv = "param=layers.1.attention.qkv";
  const std::vector<Case> before_ranks = {
      {{}, {{"BITPARITY_FAULT", "crash,rank=7"}}, "BITPARITY_FAULT: rank 7 is outside the world"},
      {{},
       {{"BITPARITY_PERTURB", "rank=0,iteration=999," + qkv + ",element=1"}},
       "BITPARITY_PERTURB: iteration 999 is outside the run's iterations 1..4"},
      {{}, {{"BITPARITY_INJECT_BUG", "thread_order_reduction"}}, "the ranks run one thread"},
      {{}, {{"BITPARITY_INJECT_BUG", "mhc_bridge_from_chunk_state"}}, "does not use mHC"},
      {{"--arms", "reference", "--repeats", "1"},
       {{"BITPARITY_INJECT_BUG", "synchronous_all_to_all"}},
       "no arm of this run is an overlap arm"},
      {{"--perturb", "overlap:1:rank=0,iteration=2," + qkv},
       {},
       "--perturb 'overlap:1:rank=0,iteration=2," + qkv + "': BITPARITY_PERTURB: 'element='"},
      {{"--perturb", "overlap:2:rank=5,iteration=2," + qkv + ",element=1"},
       {},
       "rank 5 is outside the world of 2"},
  };
  int index = 0;
  for (const Case& c : before_ranks) {
    const std::string out = "refused" + std::to_string(index++);
    testing::CommandResult r = Run(out, c.args, c.env);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.message << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_.File(out))) << r.output;
  }
  for (const auto& [spec, message] : std::vector<std::pair<std::string, std::string>>{
           {"overlap:1:rank=1,iteration=2," + qkv + ",element=99999999",
            "element 99999999 is out of range for layers.1.attention.qkv"},
           {"overlap:1:rank=0,iteration=2,param=no.such.weight,element=1",
            "rank 0 has no parameter named 'no.such.weight'"}}) {
    testing::CommandResult r = Run("target", {"--perturb", spec});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("error: --perturb '" + spec + "' cannot apply to arm 'overlap': rank"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << message << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_.File("target"))) << r.output;
  }
}

TEST_F(SmallRecipeTest, ArmRefusesToReplaceAnInputOrAFileThatIsNoTrace) {
  const std::string text = testing::ReadFile(recipe_);
  const std::string notes = dir_.Write("notes.txt", "mine\n");
  for (const std::string& out : {recipe_, notes}) {
    testing::CommandResult r =
        testing::RunBitparity({"arm", recipe_, "--arm", "reference", "--out", out, "--quiet"});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("refusing to"), std::string::npos) << r.output;
  }
  EXPECT_EQ(testing::ReadFile(recipe_), text);
  EXPECT_EQ(testing::ReadFile(notes), "mine\n");
  // A trace may be replaced by a new one.
  const std::string trace = dir_.File("t.h5");
  for (int i = 0; i < 2; ++i) {
    testing::CommandResult r =
        testing::RunBitparity({"arm", recipe_, "--arm", "reference", "--out", trace, "--quiet"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
}

TEST_F(SmallRecipeTest, CrashedRankIsAJunitErrorNamingTheRank) {
  testing::CommandResult r = Run("crash", {}, {{"BITPARITY_FAULT", "crash,rank=1,iteration=2"}});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  ExpectValidJunit(dir_.File("crash/junit.xml"));
  auto junit = ReadJunit(dir_.File("crash/junit.xml"));
  const auto& [verdict, message] = junit->cases["reference run 1"];
  EXPECT_EQ(verdict, "error");
  EXPECT_NE(message.find("rank 1 was killed by signal 6"), std::string::npos) << message;
  // Every check the run would have made is a testcase too, errored with the reason.
  for (const char* name : {"reference reproduces itself", "overlap reproduces itself",
                           "overlap vs reference: loss", "overlap vs reference: gradients",
                           "overlap vs reference: parameters", "golden: reference"}) {
    ASSERT_EQ(junit->cases.count(name), 1u) << name;
    EXPECT_EQ(junit->cases[name].first, "error") << name;
    EXPECT_NE(junit->cases[name].second.find("not run: "), std::string::npos) << name;
  }
}

TEST_F(SmallRecipeTest, SubsetsOfArmsAndRepeats) {
  testing::CommandResult r = Run("one", {"--arms", "overlap", "--repeats", "1", "--no-golden"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto junit = ReadJunit(dir_.File("one/junit.xml"));
  EXPECT_EQ(junit->cases["overlap reproduces itself"].first, "skipped");
  EXPECT_EQ(junit->cases["golden: reference"].first, "skipped");
  const auto& [verdict, message] = junit->cases["overlap vs reference: peak memory"];
  EXPECT_EQ(verdict, "skipped");
  EXPECT_NE(message.find("arm 'reference' was not run"), std::string::npos) << message;
  EXPECT_EQ(Run("bad", {"--arms", "nope"}).exit_code, 2);
  for (const char* perturb : {"overlap:9:rank=0", "nope:1:rank=0", "overlap"}) {
    EXPECT_EQ(Run("bad", {"--perturb", perturb}).exit_code, 2) << perturb;
    EXPECT_FALSE(fs::exists(dir_.File("bad"))) << perturb << ": nothing written, nothing locked";
  }
  // Refused with the reason before anything trains.
  for (const auto& [extra, reason] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--arms", "reference,reference"}, "--arms names 'reference' twice"},
           {{"--update-golden", "--no-golden"}, "--update-golden with --no-golden"},
           {{"--update-golden", "--repeats", "1"}, "--update-golden needs --repeats >= 2"},
           {{"--update-golden", "--arms", "overlap"},
            "--update-golden records the baseline arm 'reference' ([compare] baseline), which "
            "--arms leaves out"}}) {
    testing::CommandResult refused = Run("refused", extra);
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_NE(refused.output.find(reason), std::string::npos) << refused.output;
    EXPECT_FALSE(fs::exists(dir_.File("refused"))) << "bad input writes nothing";
  }
}

TEST_F(SmallRecipeTest, OutputPathsThatCannotTakeTheRunAreBadInputBeforeTraining) {
  // --out is a file; an arm's folder is a file; the golden store is a file: each is refused
  // before any rank starts (exit 2, not an abort or an error after the training).
  const std::string file = dir_.Write("a_file", "x\n");
  fs::create_directories(dir_.File("arm_is_file"));
  dir_.Write("arm_is_file/reference", "x\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run", recipe_, "--out", file, "--quiet"}, "--out is a file"},
      {{"run", recipe_, "--out", dir_.File("arm_is_file"), "--quiet"},
       "cannot create the run's output directory"},
      {{"run", recipe_, "--out", dir_.File("g"), "--golden-dir", file, "--quiet"},
       "the golden store is not a directory"},
      {{"run", recipe_, "--out", "/proc/bitparity-out", "--quiet"},
       "cannot create the output directory"}};
  for (const auto& [args, reason] : cases) {
    testing::CommandResult r = testing::RunBitparity(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(reason), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("iteration"), std::string::npos) << "nothing trained: " << r.output;
  }
  EXPECT_EQ(testing::ReadFile(file), "x\n");
}

}  // namespace
}  // namespace bitparity
