// The overlap arm end to end, as rank processes: on the default recipe its trace and the
// reference arm's are bit-identical; `bitparity plan` prints the schedule without training;
// and peak memory orders as the seed says: no recompute > chunk recompute > segment recompute,
// with segment recompute at the reference arm's figure.

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "harness/trace_compare.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

TEST(OverlapArm, DefaultRecipeTraceIsBitIdenticalToTheReference) {
  testing::TempDir dir;
  const std::string recipe = testing::SourceDir() + "/recipes/default.toml";
  for (const char* arm : {"reference", "overlap"}) {
    testing::CommandResult r = testing::RunBitparity(
        {"arm", recipe, "--arm", arm, "--out", dir.File(std::string(arm) + ".h5"), "--quiet"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  testing::CommandResult diff =
      testing::RunBitparity({"diff", dir.File("reference.h5"), dir.File("overlap.h5")});
  EXPECT_EQ(diff.exit_code, 0) << diff.output;
  EXPECT_NE(diff.output.find("identical"), std::string::npos) << diff.output;
  Trace overlap = ReadTrace(dir.File("overlap.h5"));
  EXPECT_EQ(overlap.attribute("engine"), "overlap");
}

TEST(OverlapArm, PlanPrintsSegmentsAndEveryNodeOperation) {
  const std::string recipe = testing::SourceDir() + "/recipes/default.toml";
  testing::CommandResult table = testing::RunBitparity({"plan", recipe, "--arm", "overlap"});
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("recompute segments: 0=[0] 1=[1] 2=[2] 3=[mtp0]"), std::string::npos)
      << table.output;
  EXPECT_NE(table.output.find("segment[3]            replay"), std::string::npos) << table.output;

  testing::CommandResult json =
      testing::RunBitparity({"plan", recipe, "--arm", "overlap", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  nlohmann::json plan = nlohmann::json::parse(json.output);
  ASSERT_EQ(plan["chunks"].size(), 1u);
  EXPECT_EQ(plan["chunks"][0]["segments"].size(), 4u);
  EXPECT_EQ(plan["microbatches"], 4);
  int replays = 0, replayed_nodes = 0, comm = 0, replay_comm = 0;
  for (const auto& op : plan["ops"]) {
    const bool replay = op["phase"] == "replay";
    replays += replay && op["node"] == "segment";
    replayed_nodes += replay && op["node"] != "segment";
    comm += op["stream"] == "comm" && !replay;
    replay_comm += op["stream"] == "comm" && replay;
  }
  EXPECT_EQ(replays, 4 * 4);  // every segment of every microbatch, once
  // Per microbatch: every layer's attn, moe_dispatch (a null node in the dense layer), mlp,
  // moe_combine and its epilogue; the MTP layer's post-process as well.
  EXPECT_EQ(replayed_nodes, 4 * (3 * 5 + 6));
  // Per microbatch: 3 MoE layers (2 decoder + MTP) x (dispatch + combine) x (forward + backward),
  // and the same all-to-alls once more in the replays.
  EXPECT_EQ(comm, 4 * 3 * 4);
  EXPECT_EQ(replay_comm, 4 * 3 * 2);

  testing::CommandResult reference = testing::RunBitparity({"plan", recipe, "--arm", "reference"});
  EXPECT_EQ(reference.exit_code, 0);
  EXPECT_NE(reference.output.find("F0 B0 F1 B1"), std::string::npos) << reference.output;
  EXPECT_EQ(testing::RunBitparity({"plan", recipe, "--arm", "nope"}).exit_code, 2);
}

std::string MemoryRecipe() {
  return testing::RecipeBuilder(8, 0)
      .ModelShape(64, 64, 128, 128, 64)
      .Batches(16, 2)
      .Arm("none", "overlap")
      .Arm("chunk", "overlap", "recompute = { granularity = \"full\", unit = \"chunk\" }")
      .Arm("segment", "overlap", testing::FullRecompute("uniform", 1))
      .Arm("reference", "reference", testing::FullRecompute("uniform", 1))
      .Text();
}

TEST(OverlapArm, PeakMemoryOrdersNoneChunkSegment) {
  testing::TempDir dir;
  const std::string recipe = dir.Write("memory.toml", MemoryRecipe());
  std::map<std::string, int64_t> peak;
  for (const char* arm : {"none", "chunk", "segment", "reference"}) {
    const std::string out = dir.File(std::string(arm) + ".h5");
    testing::CommandResult r =
        testing::RunBitparity({"arm", recipe, "--arm", arm, "--out", out, "--quiet"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Trace t = ReadTrace(out);
    for (const RankTrace& rank : t.ranks) {
      for (const IterationRecord& it : rank.iterations) {
        peak[arm] = std::max(peak[arm], it.peak_bytes);
      }
    }
  }
  std::printf("peak bytes per rank: none %lld, chunk %lld, segment %lld, reference %lld\n",
              static_cast<long long>(peak["none"]), static_cast<long long>(peak["chunk"]),
              static_cast<long long>(peak["segment"]), static_cast<long long>(peak["reference"]));
  EXPECT_GT(peak["none"], peak["chunk"]);
  EXPECT_GT(peak["chunk"], peak["segment"]);
  const double ratio =
      static_cast<double>(peak["segment"]) / static_cast<double>(peak["reference"]);
  EXPECT_NEAR(ratio, 1.0, 0.03) << "segment recompute should land on the reference's peak";
}

}  // namespace
}  // namespace bitparity
