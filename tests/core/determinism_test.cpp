// The pinned process environment is in effect and does what it is pinned for: the test process
// runs the default CPU level (avx2) in ATen, oneDNN and MKL's vendor-independent branch, and a
// conflicting pinned variable is bad input that names the variable.

#include "numerics/determinism.h"

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

TEST(PinnedEnvironment, EveryLibraryRunsTheDefaultLevel) {
  EXPECT_EQ(PinnedCpuIsa(), CpuIsa::kAvx2);
  ASSERT_NE(std::getenv("MKL_CBWR"), nullptr);
  EXPECT_STREQ(std::getenv("MKL_CBWR"), "COMPATIBLE");
  ASSERT_NE(std::getenv("ONEDNN_MAX_CPU_ISA"), nullptr);
  EXPECT_STREQ(std::getenv("ONEDNN_MAX_CPU_ISA"), "AVX2");
  ASSERT_NE(std::getenv("ATEN_CPU_CAPABILITY"), nullptr);
  EXPECT_STREQ(std::getenv("ATEN_CPU_CAPABILITY"), "avx2");
  EXPECT_EQ(AtenCpuCapability(), "AVX2");
}

// MKL's COMPATIBLE branch repeats its bits for a fixed thread count (the thread count is part of
// the fingerprint: with two threads its bits differ from one thread's).
TEST(PinnedEnvironment, Fp32GemmBitsRepeatForAFixedThreadCount) {
  const std::vector<std::array<int64_t, 3>> shapes = {
      {257, 515, 263}, {1024, 64, 192}, {64, 1024, 64}, {4096, 64, 64}, {33, 4096, 17}};
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    for (const auto& [m, k, n] : shapes) {
      at::Tensor a = Random({m, k}, static_cast<uint64_t>(m));
      at::Tensor b = Random({k, n}, static_cast<uint64_t>(n));
      at::Tensor first = at::mm(a, b);
      at::Tensor second = at::mm(a.clone(), b.clone());
      EXPECT_TRUE(at::equal(first, second)) << m << "x" << k << "x" << n << ", " << threads;
    }
  }
  at::set_num_threads(1);
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
