// The rank process runs under any launcher that sets the torchrun or Slurm variables: two
// workers started by hand and merged with `bitparity merge` give the same trace as
// `bitparity arm`. The torchrun case binds Gloo to the interface GLOO_SOCKET_IFNAME names; the
// Slurm case names the master by this host's name, so every rank binds to the address its own
// host name resolves to, as the ranks on a cluster's other nodes do. torchrun itself starts them
// in the third case.

#include <gtest/gtest.h>
#include <netdb.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "harness/launcher.h"
#include "harness/process.h"
#include "harness/trace_compare.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"
#include "tests/support/thread_world.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

std::string RecipeToml() {
  return testing::RecipeBuilder(2, 0)
      .Set("parallel.timeout_s", 60.0)
      .Batches(8, 2)
      .Arm("reference", "reference")
      .Text();
}

// Writes the recipe into `dir` and trains it once with the local launcher into
// dir/launcher.h5, the trace the hand-started workers must reproduce; returns the recipe's path.
std::string RecipeAndLauncherTrace(testing::TempDir& dir) {
  const std::string recipe = dir.Write("r.toml", RecipeToml());
  testing::CommandResult arm =
      testing::RunBitparity({"arm", recipe, "--out", dir.File("launcher.h5"), "--quiet"});
  EXPECT_EQ(arm.exit_code, 0) << arm.output;
  std::filesystem::create_directories(dir.File("parts"));
  return recipe;
}

// This host's name when it resolves (the way a cluster job names its master), else loopback.
std::string HostNameOrLoopback() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name, nullptr, &hints, &found) != 0) return "127.0.0.1";
  ::freeaddrinfo(found);
  return name;
}

void LaunchWorkersByHand(const std::string& recipe, const std::string& parts, bool slurm) {
  const int port = FreeLoopbackPort();
  std::vector<ChildProcess> ranks;
  for (int r = 0; r < 2; ++r) {
    ProcessOptions process;
    process.executable = testing::BitparityBinary();
    process.arguments = testing::WorkerArguments(recipe, "reference", parts);
    process.unset_environment = {"RANK",         "WORLD_SIZE",   "LOCAL_RANK",
                                 "SLURM_PROCID", "SLURM_NTASKS", "GLOO_SOCKET_IFNAME"};
    auto& env = process.set_environment;
    if (slurm) {
      env["SLURM_PROCID"] = std::to_string(r);
      env["SLURM_NTASKS"] = "2";
      env["MASTER_ADDR"] = HostNameOrLoopback();
    } else {
      env["RANK"] = std::to_string(r);
      env["WORLD_SIZE"] = "2";
      env["MASTER_ADDR"] = "127.0.0.1";
      env["GLOO_SOCKET_IFNAME"] = "lo";
    }
    env["MASTER_PORT"] = std::to_string(port);
    ranks.push_back(ChildProcess::Start(process));
  }
  for (ChildProcess& c : ranks) {
    c.Wait();
    EXPECT_EQ(c.exit_code(), 0);
  }
}

class ClusterLaunchTest : public ::testing::TestWithParam<bool> {};

TEST_P(ClusterLaunchTest, HandStartedWorkersMergeIntoTheLaunchersTrace) {
  testing::TempDir dir;
  const std::string recipe = RecipeAndLauncherTrace(dir);
  ASSERT_FALSE(::testing::Test::HasFailure());
  // The ranks create their --out-dir, as `run --out` does (each of them, at once).
  LaunchWorkersByHand(recipe, dir.File("parts/made_by_the_ranks"), GetParam());
  testing::CommandResult merge = testing::RunBitparity(
      {"merge", dir.File("parts/made_by_the_ranks"), "--out", dir.File("merged.h5")});
  ASSERT_EQ(merge.exit_code, 0) << merge.output;
  Trace merged = ReadTrace(dir.File("merged.h5"));
  EXPECT_EQ(merged.ranks[0].attributes.at("rank_source"), GetParam() ? "slurm" : "torchrun");
  TraceComparison c = CompareTraces(ReadTrace(dir.File("launcher.h5")), merged);
  EXPECT_TRUE(c.identical) << c.first->Describe();
}

INSTANTIATE_TEST_SUITE_P(Environments, ClusterLaunchTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "slurm" : "torchrun";
                         });

// PyTorch's own launcher: torchrun starts the two rank processes (its agent serves the c10d
// store; the ranks join it as clients), and their merged parts equal the local launcher's trace.
TEST(ClusterLaunch, TorchrunStartedWorkersMergeIntoTheLaunchersTrace) {
  const std::string torchrun = BITPARITY_TORCHRUN;
  if (torchrun.empty()) GTEST_SKIP() << "no torchrun next to this build's LibTorch";
  testing::TempDir dir;
  const std::string recipe = RecipeAndLauncherTrace(dir);
  ASSERT_FALSE(::testing::Test::HasFailure());
  ProcessOptions process;
  process.executable = torchrun;
  process.arguments = {"--no-python",
                       "--nproc-per-node",
                       "2",
                       "--master-addr",
                       "127.0.0.1",
                       "--master-port",
                       std::to_string(FreeLoopbackPort()),
                       testing::BitparityBinary()};
  const std::vector<std::string> worker =
      testing::WorkerArguments(recipe, "reference", dir.File("parts"));
  process.arguments.insert(process.arguments.end(), worker.begin(), worker.end());
  process.unset_environment = {"RANK",         "WORLD_SIZE",  "LOCAL_RANK",  "SLURM_PROCID",
                               "SLURM_NTASKS", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"};
  process.output_path = dir.File("torchrun.log");
  ASSERT_EQ(RunProcess(process), 0) << testing::ReadFile(process.output_path);

  testing::CommandResult merge =
      testing::RunBitparity({"merge", dir.File("parts"), "--out", dir.File("merged.h5")});
  ASSERT_EQ(merge.exit_code, 0) << merge.output;
  Trace merged = ReadTrace(dir.File("merged.h5"));
  EXPECT_EQ(merged.ranks[0].attributes.at("rank_source"), "torchrun");
  testing::CommandResult diff =
      testing::RunBitparity({"diff", dir.File("launcher.h5"), dir.File("merged.h5")});
  EXPECT_EQ(diff.exit_code, 0) << diff.output;
}

// A rank started alone (its peers never come) gives up within the recipe's timeout with exit 3
// and says why: rank 0 serves the store and waits for clients, rank 1 waits for a server.
class LoneWorkerTest : public ::testing::TestWithParam<int> {};

TEST_P(LoneWorkerTest, GivesUpWithinTheRecipeTimeout) {
  testing::TempDir dir;
  const std::string recipe = dir.Write("r.toml", testing::RecipeBuilder(2, 0)
                                                     .Set("parallel.timeout_s", 5.0)
                                                     .Batches(8, 2)
                                                     .Arm("reference", "reference")
                                                     .Text());
  std::filesystem::create_directories(dir.File("parts"));
  ProcessOptions process;
  process.executable = testing::BitparityBinary();
  process.arguments = testing::WorkerArguments(recipe, "reference", dir.File("parts"));
  process.unset_environment = {"SLURM_PROCID", "SLURM_NTASKS", "LOCAL_RANK"};
  process.set_environment = {{"RANK", std::to_string(GetParam())},
                             {"WORLD_SIZE", "2"},
                             {"MASTER_ADDR", "127.0.0.1"},
                             {"MASTER_PORT", std::to_string(FreeLoopbackPort())}};
  process.output_path = dir.File("rank.log");
  const auto start = std::chrono::steady_clock::now();
  const int exit_code = RunProcess(process);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string log = testing::ReadFile(dir.File("rank.log"));
  EXPECT_EQ(exit_code, 3) << log;
  EXPECT_LT(seconds, 5.0) << log;
  // The rank's own message, without the backtrace LibTorch appends to its errors (LibTorch's
  // log lines of its retries before it keep theirs).
  const size_t said = log.find("infrastructure error: rank " + std::to_string(GetParam()));
  ASSERT_NE(said, std::string::npos) << log;
  EXPECT_EQ(log.find("frame #", said), std::string::npos) << log.substr(said);
  EXPECT_TRUE(std::filesystem::is_empty(dir.File("parts")));
}

INSTANTIATE_TEST_SUITE_P(Ranks, LoneWorkerTest, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "rank" + std::to_string(info.param);
                         });

TEST(ClusterLaunch, MergeOfAnIncompleteWorldIsBadInput) {
  testing::TempDir dir;
  const std::string recipe = dir.Write("r.toml", RecipeToml());
  std::filesystem::create_directories(dir.File("parts"));
  LaunchWorkersByHand(recipe, dir.File("parts"), false);
  std::filesystem::remove(dir.File("parts/rank_00001.h5"));
  testing::CommandResult merge =
      testing::RunBitparity({"merge", dir.File("parts"), "--out", dir.File("merged.h5")});
  EXPECT_EQ(merge.exit_code, 2) << merge.output;
  EXPECT_NE(merge.output.find("rank_00001.h5: trace file not found"), std::string::npos)
      << merge.output;
  EXPECT_FALSE(std::filesystem::exists(dir.File("merged.h5")));
}

// `merge` joins only the parts of one run: each part is read in a child process (a crafted one
// is bad input, not a crash), and each must share rank 0's run identity, recipe text and digest
// (the digest the text's) and developer switches; a stray part of another world size and an
// --out naming an input are refused. Nothing is written in any refused case.
TEST(ClusterLaunch, MergeJoinsOnlyThePartsOfOneRun) {
  testing::TempDir dir;
  const std::string recipe = dir.Write("r.toml", RecipeToml());
  LaunchWorkersByHand(recipe, dir.File("a"), false);
  LaunchWorkersByHand(recipe, dir.File("b"), false);
  namespace fs = std::filesystem;
  const std::string merged = dir.File("merged.h5");
  auto refused = [&](const std::string& parts, const std::string& out, const std::string& said) {
    testing::CommandResult merge = testing::RunBitparity({"merge", parts, "--out", out});
    EXPECT_EQ(merge.exit_code, 2) << merge.output;
    EXPECT_NE(merge.output.find(said), std::string::npos) << said << "\n" << merge.output;
    EXPECT_FALSE(fs::exists(merged));
  };
  // Rank 1's part of another run of the same recipe.
  fs::create_directories(dir.File("mixed"));
  fs::copy_file(dir.File("a/rank_00000.h5"), dir.File("mixed/rank_00000.h5"));
  fs::copy_file(dir.File("b/rank_00001.h5"), dir.File("mixed/rank_00001.h5"));
  refused(dir.File("mixed"), merged, "rank_00001.h5: its run_identity");
  // A part edited after its rank wrote it: the digest, then the text under the digest.
  const std::string part = dir.File("b/rank_00001.h5");
  const Trace original = ReadTrace(part, /*require_complete=*/false);
  for (const char* key : {"recipe_digest", "recipe"}) {
    Trace edited = original;
    edited.attributes[key] += " ";
    WriteTrace(part, edited);
    refused(dir.File("b"), merged, "rank_00001.h5: its " + std::string(key));
  }
  Trace switched = original;
  switched.attributes["developer_switches"] = "BITPARITY_INJECT_BUG=composite_rms_norm";
  WriteTrace(part, switched);
  refused(dir.File("b"), merged, "its developer_switches");
  WriteTrace(part, original);
  // --out naming an input part, or the parts folder.
  const std::string before = testing::ReadFile(dir.File("a/rank_00001.h5"));
  refused(dir.File("a"), dir.File("a/rank_00001.h5"), "refusing to replace a part");
  EXPECT_EQ(testing::ReadFile(dir.File("a/rank_00001.h5")), before);
  refused(dir.File("a"), dir.File("a/all.h5"), "lies in the parts folder");
  // A stray part of a world of 3 beside this world of 2.
  fs::copy_file(dir.File("a/rank_00001.h5"), dir.File("b/rank_00002.h5"));
  refused(dir.File("b"), merged, "rank_00002.h5: a rank part outside this world of 2");
  fs::remove(dir.File("b/rank_00002.h5"));
  // A part that crashes the HDF5 library when read.
  fs::copy_file(testing::SourceDir() + "/tests/data/fuzz/crashes/hdf5_global_heap_length.h5",
                dir.File("b/rank_00001.h5"), fs::copy_options::overwrite_existing);
  refused(dir.File("b"), merged, "rank_00001.h5");
  // The untouched run merges.
  testing::CommandResult merge = testing::RunBitparity({"merge", dir.File("a"), "--out", merged});
  EXPECT_EQ(merge.exit_code, 0) << merge.output;
}

}  // namespace
}  // namespace bitparity
