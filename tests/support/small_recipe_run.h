#ifndef BITPARITY_TESTS_SUPPORT_SMALL_RECIPE_RUN_H_
#define BITPARITY_TESTS_SUPPORT_SMALL_RECIPE_RUN_H_

// The small two-arm recipe the end-to-end tests of `bitparity run` train (3 layers and an MTP
// depth of the small model, EP 2, 4 iterations, full recompute, dumps at iteration 4), and a
// fixture that writes it to a temporary folder and runs it with a golden store of its own.

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/support/test_support.h"

namespace bitparity::testing {

inline std::string SmallRecipeToml() {
  return R"(
name = "small"
)" + SmallModelTable(3, 1) +
         R"([parallel]
ep = 2
timeout_s = 60
[train]
micro_batch = 2
global_batch = 8
iterations = 4
[recompute]
granularity = "full"
method = "uniform"
num_layers = 1
[trace]
dump_grads_at = [4]
[arms.reference]
engine = "reference"
[arms.overlap]
engine = "overlap"
[[compare.memory]]
arm = "overlap"
at_most = 4.0
)";
}

class SmallRecipeTest : public ::testing::Test {
 protected:
  void SetUp() override { recipe_ = dir_.Write("small.toml", SmallRecipeToml()); }

  // `bitparity run` of the recipe into `out`, goldens in the folder's own golden/ store.
  CommandResult Run(const std::string& out, std::vector<std::string> extra = {},
                    std::vector<std::pair<std::string, std::string>> env = {}) {
    std::vector<std::string> args = {
        "run", recipe_, "--out", dir_.File(out), "--golden-dir", dir_.File("golden"), "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunBitparity(args, env);
  }

  TempDir dir_;
  std::string recipe_;
};

}  // namespace bitparity::testing

#endif  // BITPARITY_TESTS_SUPPORT_SMALL_RECIPE_RUN_H_
