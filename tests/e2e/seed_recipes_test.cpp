// The seed's end-to-end configurations (recipes/seed_nonmtp.toml: PP4 EP2 VPP2 on 16 layers;
// recipes/seed_mtp.toml: MTP with the layout Et|(t|)*6tmL; recipes/seed_mtp_mhc.toml: the same
// with mHC's streams across the stages) pass `bitparity run` over their 8
// rank processes: each arm reproduces itself and the overlap arm equals the reference bit for
// bit. They are nightly-sized (100 iterations; `ci/gate --nightly` runs them in full); the suite
// runs each shipped recipe as it is but for its iteration count.

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "tests/support/test_support.h"

namespace bitparity {
namespace {

// The shipped recipe with `iterations` instead of its own, and its gradient dump moved there.
std::string WithIterations(const std::string& text, int iterations) {
  std::string out = text;
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{"iterations = 100\n",
                                            "iterations = " + std::to_string(iterations) + "\n"},
        {"dump_grads_at = [100]", "dump_grads_at = [" + std::to_string(iterations) + "]"}}) {
    const size_t at = out.find(from);
    EXPECT_NE(at, std::string::npos) << "the shipped recipe no longer has '" << from << "'";
    if (at != std::string::npos) out.replace(at, from.size(), to);
  }
  return out;
}

void ExpectArmsAgree(const std::string& name) {
  testing::TempDir dir;
  const std::string shipped = testing::ReadFile(testing::SourceDir() + "/recipes/" + name);
  const std::string recipe = dir.Write(name, WithIterations(shipped, 2));
  testing::CommandResult r =
      testing::RunBitparity({"run", recipe, "--out", dir.File("out"), "--no-golden", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json report = nlohmann::json::parse(testing::ReadFile(dir.File("out/report.json")));
  for (const char* check :
       {"reference reproduces itself", "overlap reproduces itself", "overlap vs reference: loss",
        "overlap vs reference: gradients", "overlap vs reference: parameters"}) {
    bool passed = false;
    for (const auto& c : report["checks"]) passed |= c["name"] == check && c["verdict"] == "pass";
    EXPECT_TRUE(passed) << check << "\n" << r.output;
  }
  std::printf("%s", r.output.c_str());
}

TEST(SeedRecipes, NonMtpPp4Ep2Vpp2ArmsAgree) { ExpectArmsAgree("seed_nonmtp.toml"); }

TEST(SeedRecipes, MtpLayoutArmsAgree) { ExpectArmsAgree("seed_mtp.toml"); }

TEST(SeedRecipes, MtpLayoutWithMhcArmsAgree) { ExpectArmsAgree("seed_mtp_mhc.toml"); }

}  // namespace
}  // namespace bitparity
