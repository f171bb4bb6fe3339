// Goldens hold across CPU generations: a rank at a pinned CPU level computes the same bits where
// the libraries see no AVX-512. valgrind (--tool=none) runs the ranks on a virtual CPU whose CPUID
// reports no AVX-512, so ATen, oneDNN and MKL dispatch as on an AVX2-only host of the same
// vendor: the pinned default level (avx2) gives the bits of the run on the real CPU. The control,
// on a host with AVX-512: at cpu_isa "native" the same emulation changes the bits (the libraries
// do dispatch by CPUID there), so the first test could fail.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "harness/launcher.h"
#include "harness/process.h"
#include "numerics/cpu_isa.h"
#include "tests/support/test_support.h"

namespace bitparity {
namespace {

// The small model, EP 2, one iteration, the reference arm only, at CPU level `cpu_isa`.
std::string FleetRecipe(const std::string& cpu_isa) {
  return "name = \"fleet\"\n" + testing::SmallModelTable(3, 1) +
         "[parallel]\nep = 2\ntimeout_s = 600\ncpu_isa = \"" + cpu_isa +
         "\"\n[train]\nmicro_batch = 2\nglobal_batch = 8\niterations = 1\n"
         "[recompute]\ngranularity = \"full\"\nmethod = \"uniform\"\nnum_layers = 1\n"
         "[arms.reference]\nengine = \"reference\"\n";
}

class CpuFleet : public ::testing::Test {
 protected:
  // The reference arm of the recipe at `cpu_isa`, on this CPU (`bitparity arm`), or with its two
  // rank processes started by hand under valgrind and their parts merged (the launcher itself
  // computes nothing); the trace's path.
  std::string Train(const std::string& cpu_isa, bool emulated) {
    const std::string recipe = dir_.Write(cpu_isa + ".toml", FleetRecipe(cpu_isa));
    const std::string trace = dir_.File(cpu_isa + (emulated ? "_emulated.h5" : "_host.h5"));
    if (!emulated) {
      const testing::CommandResult arm =
          testing::RunBitparity({"arm", recipe, "--arm", "reference", "--quiet", "--out", trace});
      EXPECT_EQ(arm.exit_code, 0) << arm.output;
      return trace;
    }
    const std::string parts = dir_.File(cpu_isa + "_parts");
    std::filesystem::create_directories(parts);
    const int port = FreeLoopbackPort();
    std::vector<ChildProcess> ranks;
    for (int r = 0; r < 2; ++r) {
      ProcessOptions process;
      process.executable = "valgrind";
      process.arguments = {"--tool=none", "--log-file=" + parts + "/valgrind." + std::to_string(r),
                           testing::BitparityBinary()};
      const std::vector<std::string> worker = testing::WorkerArguments(recipe, "reference", parts);
      process.arguments.insert(process.arguments.end(), worker.begin(), worker.end());
      process.output_path = parts + "/rank_" + std::to_string(r) + ".log";
      process.set_environment = {{"RANK", std::to_string(r)},
                                 {"WORLD_SIZE", "2"},
                                 {"LOCAL_RANK", std::to_string(r)},
                                 {"MASTER_ADDR", "127.0.0.1"},
                                 {"MASTER_PORT", std::to_string(port)}};
      ranks.push_back(ChildProcess::Start(process));
    }
    for (int r = 0; r < 2; ++r) {
      ranks[r].Wait();
      EXPECT_EQ(ranks[r].exit_code(), 0)
          << testing::ReadFile(parts + "/rank_" + std::to_string(r) + ".log");
    }
    const testing::CommandResult merge = testing::RunBitparity({"merge", parts, "--out", trace});
    EXPECT_EQ(merge.exit_code, 0) << merge.output;
    return trace;
  }

  testing::CommandResult Diff(const std::string& a, const std::string& b) {
    return testing::RunBitparity({"diff", a, b});
  }

  testing::TempDir dir_;
};

TEST_F(CpuFleet, ThePinnedLevelGivesTheSameBitsWhereTheLibrariesSeeNoAvx512) {
  ASSERT_EQ(std::system("valgrind --version > /dev/null 2>&1"), 0)
      << "valgrind is not installed (ci/setup installs it)";
  const std::string host = Train("avx2", false);
  const std::string emulated = Train("avx2", true);
  const testing::CommandResult diff = Diff(host, emulated);
  EXPECT_EQ(diff.exit_code, 0) << diff.output;
  EXPECT_NE(diff.output.find("identical: 2 rank(s), 1 iterations"), std::string::npos)
      << diff.output;
}

TEST_F(CpuFleet, AtNativeTheSameEmulationChangesTheBits) {
  if (!HostCpuFlags().count("avx512f")) {
    GTEST_SKIP() << "this host has no AVX-512: the emulation hides nothing from its libraries";
  }
  const std::string host = Train("native", false);
  const std::string emulated = Train("native", true);
  const testing::CommandResult diff = Diff(host, emulated);
  EXPECT_EQ(diff.exit_code, 1) << diff.output;
  EXPECT_NE(diff.output.find("DIFFERENT: first difference at iteration 1"), std::string::npos)
      << diff.output;
}

}  // namespace
}  // namespace bitparity
