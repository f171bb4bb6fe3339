// The seed's end-to-end configurations (recipes/seed_nonmtp.toml: PP4 EP2 VPP2 on 16 layers;
// recipes/seed_mtp.toml: MTP with the layout Et|(t|)*6tmL; recipes/seed_mtp_mhc.toml: the same
// with mHC's streams across the stages) pass `bitparity run` over their 8
// rank processes: each arm reproduces itself and the overlap arm equals the reference bit for
// bit; seed_mtp's arms also resume bit-identically from their checkpoints. They are nightly-sized
// (100 iterations; `ci/gate --nightly` runs them in full); the suite runs each shipped recipe as
// it is but for its iteration count (and the iteration its checkpoint is saved after).

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/test_support.h"

namespace bitparity {
namespace {

// The shipped recipe with `iterations` instead of its own, its gradient dump moved there and a
// restart-replay checkpoint (where it has one) moved to the middle.
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
  const std::string checkpoint = "checkpoint_at = [50]";
  if (const size_t at = out.find(checkpoint); at != std::string::npos) {
    out.replace(at, checkpoint.size(), "checkpoint_at = [" + std::to_string(iterations / 2) + "]");
  }
  return out;
}

// Both arms of the shipped recipe trained `iterations` iterations reproduce themselves and agree
// bit for bit, and every check in `more` passes too.
void ExpectArmsAgree(const std::string& name, int iterations = 2,
                     const std::vector<std::string>& more = {}) {
  testing::TempDir dir;
  const std::string shipped = testing::ReadFile(testing::SourceDir() + "/recipes/" + name);
  const std::string recipe = dir.Write(name, WithIterations(shipped, iterations));
  testing::CommandResult r =
      testing::RunBitparity({"run", recipe, "--out", dir.File("out"), "--no-golden", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json report = nlohmann::json::parse(testing::ReadFile(dir.File("out/report.json")));
  std::vector<std::string> checks = {
      "reference reproduces itself", "overlap reproduces itself", "overlap vs reference: loss",
      "overlap vs reference: gradients", "overlap vs reference: parameters"};
  checks.insert(checks.end(), more.begin(), more.end());
  for (const std::string& check : checks) {
    bool passed = false;
    for (const auto& c : report["checks"]) passed |= c["name"] == check && c["verdict"] == "pass";
    EXPECT_TRUE(passed) << check << "\n" << r.output;
  }
  std::printf("%s", r.output.c_str());
}

TEST(SeedRecipes, NonMtpPp4Ep2Vpp2ArmsAgree) { ExpectArmsAgree("seed_nonmtp.toml"); }

// With 4 iterations, both arms resumed after iteration 2 (and the overlap arm from the
// reference's checkpoint) equal their uninterrupted runs: restart replay on the seed's layout.
TEST(SeedRecipes, MtpLayoutArmsAgreeAndResumeBitIdentically) {
  ExpectArmsAgree("seed_mtp.toml", 4,
                  {"reference resumes bit-identically", "overlap resumes bit-identically",
                   "overlap resumes bit-identically from reference"});
}

TEST(SeedRecipes, MtpLayoutWithMhcArmsAgree) { ExpectArmsAgree("seed_mtp_mhc.toml"); }

}  // namespace
}  // namespace bitparity
