// Explaining a run that does not reproduce itself: with nondeterminism of two kinds injected
// (runtime/injected_bugs.h), the reference arm's runs differ, the check fails, and the attribution
// reruns the failing window with one factor changed at a time and names the factor each kind
// follows. The verdict stays a failure: a run is never made green by rerunning it.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"

namespace bitparity {
namespace {

std::string RecipeToml() {
  return testing::RecipeBuilder(2, 0)
      .Set("name", "attribution")
      .Set("parallel.threads", 2)
      .Set("parallel.timeout_s", 120)
      .Batches(8, 3)
      .Arm("reference", "reference")
      .Text();
}

nlohmann::json ReproducesCheck(const nlohmann::json& report) {
  for (const nlohmann::json& c : report["checks"]) {
    if (c["name"] == "reference reproduces itself") return c;
  }
  return nullptr;
}

struct Attributed {
  int exit_code = 0;
  std::string output;
  nlohmann::json check;
};

Attributed RunWith(const std::string& bug) {
  testing::TempDir dir;
  const std::string recipe = dir.Write("attribution.toml", RecipeToml());
  testing::CommandResult r =
      testing::RunBitparity({"run", recipe, "--out", dir.File("out"), "--no-golden", "--quiet"},
                            {{"BITPARITY_INJECT_BUG", bug}});
  Attributed a{r.exit_code, r.output, nullptr};
  a.check = ReproducesCheck(nlohmann::json::parse(testing::ReadFile(dir.File("out/report.json"))));
  return a;
}

const nlohmann::json& Factor(const nlohmann::json& attribution, const std::string& name) {
  for (const nlohmann::json& f : attribution["factors"]) {
    if (f["factor"] == name) return f;
  }
  static const nlohmann::json kNone;
  return kNone;
}

TEST(Attribution, AReductionInThreadOrderFollowsTheThreadCount) {
  const Attributed a = RunWith("thread_order_reduction");
  EXPECT_EQ(a.exit_code, 1) << a.output;
  ASSERT_FALSE(a.check.is_null()) << a.output;
  EXPECT_EQ(a.check["verdict"], "fail");
  const nlohmann::json& attribution = a.check["figures"]["attribution"];
  ASSERT_TRUE(attribution.is_object()) << a.check.dump(2);
  EXPECT_TRUE(attribution["control_differs"].get<bool>()) << attribution.dump(2);
  EXPECT_TRUE(Factor(attribution, "intra_op_threads")["restored"].get<bool>());
  EXPECT_FALSE(Factor(attribution, "deterministic_algorithms")["restored"].get<bool>());
  EXPECT_FALSE(Factor(attribution, "fixed_order_collectives")["varied"].get<bool>());
  const std::string explanation = attribution["explanation"];
  EXPECT_EQ(explanation.rfind("the difference follows the intra-op thread count (intra-op "
                              "threads 2 -> 1 restores reproducibility)",
                              0),
            0u)
      << explanation;
  EXPECT_NE(a.output.find("attribution: " + explanation), std::string::npos) << a.output;
}

TEST(Attribution, AKernelsNondeterministicPathFollowsTheDeterministicAlgorithmsSetting) {
  const Attributed a = RunWith("nondeterministic_kernel");
  EXPECT_EQ(a.exit_code, 1) << a.output;
  ASSERT_FALSE(a.check.is_null()) << a.output;
  const nlohmann::json& attribution = a.check["figures"]["attribution"];
  ASSERT_TRUE(attribution.is_object()) << a.check.dump(2);
  EXPECT_TRUE(attribution["control_differs"].get<bool>()) << attribution.dump(2);
  EXPECT_TRUE(Factor(attribution, "deterministic_algorithms")["restored"].get<bool>());
  const std::string explanation = attribution["explanation"];
  EXPECT_EQ(explanation.rfind("the difference follows the deterministic-algorithms setting", 0), 0u)
      << explanation;
}

}  // namespace
}  // namespace bitparity
