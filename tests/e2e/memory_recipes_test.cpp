// The shipped memory recipes pass their gates through `bitparity run`: the memory model
// predicts every arm's peak within 10%, segment recompute stays far below whole-chunk
// recompute when activations dominate, and lands on the reference's figure when the model's
// state dominates (the seed's regime).

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace bitparity {
namespace {

void ExpectPasses(const std::string& recipe, const std::vector<std::string>& checks) {
  testing::TempDir dir;
  testing::CommandResult r =
      testing::RunBitparity({"run", testing::SourceDir() + "/recipes/" + recipe, "--out",
                             dir.File("out"), "--repeats", "1", "--quiet"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json report = nlohmann::json::parse(testing::ReadFile(dir.File("out/report.json")));
  for (const std::string& name : checks) {
    bool found = false;
    for (const auto& check : report["checks"]) {
      if (check["name"] != name) continue;
      found = true;
      EXPECT_EQ(check["verdict"], "pass") << name << ": " << check["summary"];
    }
    EXPECT_TRUE(found) << name;
  }
  std::printf("%s", r.output.c_str());
}

TEST(MemoryRecipes, ActivationsDominate) {
  ExpectPasses("memory.toml",
               {"reference: peak memory vs model", "overlap-segment: peak memory vs model",
                "overlap-chunk: peak memory vs model", "overlap-none: peak memory vs model",
                "overlap-segment vs overlap-chunk: peak memory",
                "overlap-segment vs reference: peak memory"});
}

TEST(MemoryRecipes, ModelStateDominatesAsInTheSeed) {
  ExpectPasses("memory_seed.toml",
               {"reference: peak memory vs model", "overlap-segment: peak memory vs model",
                "overlap-segment vs reference: peak memory"});
}

}  // namespace
}  // namespace bitparity
