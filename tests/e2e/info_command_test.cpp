// `bitparity info` names this build's LibTorch (a 2.x), its BLAS and oneDNN, what every CPU level
// pins, and whether the GPU path was built: with a LibTorch that has CUDA (PyPI's wheel) it must
// be, so that the GPU code keeps compiling where no GPU exists.

#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "tests/support/test_support.h"

namespace bitparity {
namespace {

TEST(InfoCommand, NamesLibTorchBlasAndTheGpuPath) {
  testing::CommandResult info = testing::RunBitparity({"info"});
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("LibTorch:    2."), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("BLAS:        mkl "), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("; oneDNN "), std::string::npos) << info.output;
  // What `ulimit -v` must allow: the address space the libraries map (README, Quick start).
  EXPECT_TRUE(std::regex_search(info.output,
                                std::regex("\nAddress: +[0-9]+\\.[0-9]{2} GiB mapped after loading "
                                           "the libraries \\(each rank maps as much\\)")))
      << info.output;
  EXPECT_NE(info.output.find("[parallel] cpu_isa (default avx2) pins, in every rank:"),
            std::string::npos)
      << info.output;
  EXPECT_NE(info.output.find("  avx2     ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 "
                             "MKL_CBWR=COMPATIBLE; bf16 GEMMs as fp32 GEMMs (fp32 accumulation)"),
            std::string::npos)
      << info.output;
  EXPECT_NE(
      info.output.find("  native   ATEN_CPU_CAPABILITY=(host's best) ONEDNN_MAX_CPU_ISA=(host's "
                       "best) MKL_CBWR=AUTO,STRICT; bf16 GEMMs oneDNN's own"),
      std::string::npos)
      << info.output;
  const std::string gpu_path = BITPARITY_GPU_PATH ? "GPU path:    built" : "GPU path:    not built";
  EXPECT_NE(info.output.find(gpu_path), std::string::npos) << info.output;
}

TEST(InfoCommand, AnUnknownCommandIsBadInputNamingTheWord) {
  testing::CommandResult r = testing::RunBitparity({"frobnicate", "recipes/default.toml"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown command 'frobnicate' (commands: run,"), std::string::npos)
      << r.output;
}

// Control characters from the command line (a word, a path) reach the terminal as visible "\xNN"
// text, never raw: an escape sequence in a file name cannot repaint the user's terminal.
TEST(InfoCommand, ControlCharactersReachTheTerminalAsText) {
  testing::CommandResult word = testing::RunBitparity({"x\x1b[2J"});
  EXPECT_EQ(word.exit_code, 2) << word.output;
  EXPECT_NE(word.output.find("unknown command 'x\\x1b[2J'"), std::string::npos) << word.output;
  testing::CommandResult path = testing::RunBitparity({"run", "/tmp/no\x1b[31mred\x07.toml"});
  EXPECT_EQ(path.exit_code, 2) << path.output;
  EXPECT_NE(path.output.find("error: /tmp/no\\x1b[31mred\\x07.toml: recipe file not found"),
            std::string::npos)
      << path.output;
  for (const std::string& output : {word.output, path.output}) {
    EXPECT_EQ(output.find('\x1b'), std::string::npos) << output;
    EXPECT_EQ(output.find('\x07'), std::string::npos) << output;
  }
}

// info reads this process and pins nothing: a user's MKL_CBWR does not stop it.
TEST(InfoCommand, PinsNothingOfItsOwn) {
  testing::CommandResult info = testing::RunBitparity({"info"}, {{"MKL_CBWR", "AVX2"}});
  EXPECT_EQ(info.exit_code, 0) << info.output;
}

}  // namespace
}  // namespace bitparity
