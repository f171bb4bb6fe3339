// `bitparity info` names this build's LibTorch (a 2.x), its BLAS with the pinned reproducibility
// mode, and whether the GPU path was built: with a LibTorch that has CUDA (PyPI's wheel) it must
// be, so that the GPU code keeps compiling where no GPU exists.

#include <gtest/gtest.h>

#include <string>

#include "tests/support/test_support.h"

namespace bitparity {
namespace {

TEST(InfoCommand, NamesLibTorchBlasAndTheGpuPath) {
  testing::CommandResult info = testing::RunBitparity({"info"});
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("LibTorch:    2."), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("MKL_CBWR=AUTO,STRICT (pinned)"), std::string::npos) << info.output;
  const std::string gpu_path = BITPARITY_GPU_PATH ? "GPU path:    built" : "GPU path:    not built";
  EXPECT_NE(info.output.find(gpu_path), std::string::npos) << info.output;
}

TEST(InfoCommand, AnUnknownCommandIsBadInputNamingTheWord) {
  testing::CommandResult r = testing::RunBitparity({"frobnicate", "recipes/default.toml"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown command 'frobnicate' (commands: run,"), std::string::npos)
      << r.output;
}

TEST(InfoCommand, AConflictingPinnedVariableIsBadInput) {
  testing::CommandResult info = testing::RunBitparity({"info"}, {{"MKL_CBWR", "COMPATIBLE"}});
  EXPECT_EQ(info.exit_code, 2) << info.output;
  EXPECT_NE(info.output.find("MKL_CBWR=COMPATIBLE conflicts with MKL_CBWR=AUTO,STRICT"),
            std::string::npos)
      << info.output;
}

}  // namespace
}  // namespace bitparity
