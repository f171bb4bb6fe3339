// The pinned process environment is in effect and does what it is pinned for: MKL's strict
// reproducibility mode keeps fp32 GEMM bits independent of the thread count (without it, with
// MKL_CBWR=AUTO, the same GEMMs differ between one and two threads on this LibTorch), and a
// conflicting pinned variable is bad input that names the variable.

#include "core/determinism.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <cstdlib>
#include <string>

#include "core/errors.h"
#include "tests/support/random_tensor.h"

namespace bitparity {
namespace {

at::Tensor Random(const std::vector<int64_t>& shape, uint64_t stream) {
  return testing::RandomNormal(shape, 11, stream);
}

TEST(PinnedEnvironment, MklRunsInStrictReproducibilityMode) {
  ASSERT_NE(std::getenv("MKL_CBWR"), nullptr);
  EXPECT_STREQ(std::getenv("MKL_CBWR"), "AUTO,STRICT");
}

TEST(PinnedEnvironment, Fp32GemmBitsDoNotDependOnTheThreadCount) {
  const std::vector<std::array<int64_t, 3>> shapes = {
      {257, 515, 263}, {1024, 64, 192}, {64, 1024, 64}, {4096, 64, 64}, {33, 4096, 17}};
  for (const auto& [m, k, n] : shapes) {
    at::Tensor a = Random({m, k}, static_cast<uint64_t>(m));
    at::Tensor b = Random({k, n}, static_cast<uint64_t>(n));
    at::set_num_threads(1);
    at::Tensor one = at::mm(a, b);
    at::set_num_threads(2);
    at::Tensor two = at::mm(a, b);
    at::set_num_threads(1);
    EXPECT_TRUE(at::equal(one, two)) << m << "x" << k << "x" << n;
  }
}

TEST(PinnedEnvironment, AConflictingPinnedVariableIsBadInputNamingIt) {
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8", 1);
  try {
    PinEnvironment("cuda");
    ADD_FAILURE() << "a conflicting CUBLAS_WORKSPACE_CONFIG was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("CUBLAS_WORKSPACE_CONFIG=:16:8 conflicts with "
                                         "CUBLAS_WORKSPACE_CONFIG=:4096:8"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
  // A variable the user may choose keeps the user's value.
  ::setenv("TORCH_FR_BUFFER_SIZE", "7", 1);
  PinEnvironment("cpu");
  EXPECT_STREQ(std::getenv("TORCH_FR_BUFFER_SIZE"), "7");
  ::setenv("TORCH_FR_BUFFER_SIZE", "0", 1);
}

}  // namespace
}  // namespace bitparity
