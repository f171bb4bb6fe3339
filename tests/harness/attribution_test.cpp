// The attribution's sentence from its reruns' outcomes (harness/attribution.h).

#include "harness/attribution.h"

#include <gtest/gtest.h>

#include <string>

namespace bitparity {
namespace {

Attribution Differing() {
  Attribution a;
  a.window = 3;
  a.control_ran = true;
  a.control_differs = true;
  a.trials = {{AttributionFactor::kThreads, "intra-op threads 4 -> 1", true, true, false},
              {AttributionFactor::kDeterministicAlgorithms, "deterministic algorithms forced", true,
               true, false},
              {AttributionFactor::kFixedOrderCollectives, "collectives already ...", false}};
  return a;
}

bool StartsWith(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

TEST(Attribution, NamesTheFactorWhoseChangeRestoresReproducibility) {
  Attribution a = Differing();
  EXPECT_TRUE(StartsWith(a.Explain(),
                         "no single change restores reproducibility (tried: "
                         "intra-op threads 4 -> 1, deterministic algorithms forced)"))
      << a.Explain();
  a.trials[0].restored = true;
  EXPECT_TRUE(StartsWith(a.Explain(), "the difference follows the intra-op thread count"))
      << a.Explain();
  // Both restore: the deterministic-algorithms setting is the more specific cause.
  a.trials[1].restored = true;
  EXPECT_TRUE(StartsWith(a.Explain(), "the difference follows the deterministic-algorithms"))
      << a.Explain();
  EXPECT_EQ(a.ToJson()["factors"].size(), 3u);
  EXPECT_EQ(a.ToJson()["explanation"], a.Explain());
}

TEST(Attribution, AControlThatReproducesOrDidNotFinishAttributesNothing) {
  Attribution a = Differing();
  a.trials[0].restored = true;
  a.control_differs = false;
  EXPECT_TRUE(StartsWith(a.Explain(),
                         "not attributed: the control rerun (nothing changed, "
                         "iterations 1-3) reproduced itself"))
      << a.Explain();
  a.control_ran = false;
  EXPECT_TRUE(StartsWith(a.Explain(),
                         "not attributed: the control rerun (nothing changed) did "
                         "not finish"))
      << a.Explain();
}

}  // namespace
}  // namespace bitparity
