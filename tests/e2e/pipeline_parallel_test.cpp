// Pipeline parallelism across real rank processes: `bitparity run` on pp 2 x ep 2 with two
// model chunks per pipeline rank, MTP on the last stage and an empty stage, trains each run of
// both arms over 4 rank processes; each reproduces itself bit for bit and the overlap arm's
// interleaved combined 1F1B equals the reference's 1F1B bit for bit; `validate` prints the rank
// order, the stages and each pipeline rank's orders; `plan` each rank's schedule.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

std::string PipelineRecipe() {
  return testing::RecipeBuilder(4, 1)
      .Set("model.pipeline_layout", std::string("Et|tt||tmL"))
      .Set("parallel.pp", int64_t{2})
      .Set("parallel.timeout_s", 120.0)
      .Set("train.global_batch", int64_t{16})
      .Set("train.iterations", int64_t{2})
      .Set("recompute.granularity", std::string("full"))
      .Set("recompute.method", std::string("uniform"))
      .Set("recompute.num_layers", int64_t{1})
      .Arm("reference", "reference")
      .Arm("overlap", "overlap")
      .Text();
}

TEST(PipelineParallel, RunTrainsFourRankProcessesAndTheArmsAgreeBitForBit) {
  testing::TempDir dir;
  const std::string recipe = dir.Write("pipeline.toml", PipelineRecipe());
  testing::CommandResult r =
      testing::RunBitparity({"run", recipe, "--out", dir.File("out"), "--no-golden"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* check :
       {"PASS   reference reproduces itself", "PASS   overlap reproduces itself",
        "PASS   overlap vs reference: loss", "PASS   overlap vs reference: gradients",
        "PASS   overlap vs reference: parameters"}) {
    EXPECT_NE(r.output.find(check), std::string::npos) << check << "\n" << r.output;
  }
  // Every rank moved activations or gradients between stages, and the trace says how many.
  for (const char* arm : {"reference", "overlap"}) {
    const Trace trace = ReadTrace(dir.File(std::string("out/") + arm + "/run1/trace.h5"));
    ASSERT_EQ(trace.ranks.size(), 4u);
    for (const RankTrace& rank : trace.ranks) {
      for (const IterationRecord& it : rank.iterations) {
        EXPECT_GT(it.p2p_count, 0)
            << arm << " rank " << rank.rank << ", iteration " << it.iteration;
        EXPECT_GT(it.p2p_bytes, 0)
            << arm << " rank " << rank.rank << ", iteration " << it.iteration;
      }
    }
  }
}

TEST(PipelineParallel, ValidatePrintsStagesAndSchedules) {
  testing::TempDir dir;
  testing::CommandResult r =
      testing::RunBitparity({"validate", dir.Write("pipeline.toml", PipelineRecipe())});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* line :
       {"parallel: pp 2 x ep 2 (world 4, rank = pp_rank x ep + ep_rank), vpp 2",
        "rank 0: [E t0] [empty]", "rank 1: [t1 t2] [t3 m0 L]",
        "rank 1: F0.0 F0.1 | [F1.0+B1.0] [F1.1+B1.1] [F0.2+B0.0] [F0.3+B0.1] [F1.2+B1.2] "
        "[F1.3+B1.3] | B0.2 B0.3",
        // The overlap arms' order: one more warm-up forward, so that no step pairs the forward
        // and the backward of one pass.
        "combined 1F1B order of the overlap arms",
        "rank 1: F0.0 F0.1 F1.0 | [F1.1+B1.0] [F0.2+B1.1] [F0.3+B0.0] [F1.2+B0.1] [F1.3+B1.2] | "
        "B1.3 B0.2 B0.3",
        "arm reference: engine reference, precision bf16, dispatcher alltoall, recompute full, "
        "uniform, num_layers 1, segments [0] | [1] [2] | none | [3] [mtp0]"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
}

// `plan` lists each pipeline rank's passes with their transfers: rank 1 receives chunk 0's
// input from stage 0 on rank 0 and sends its gradient back; the overlap arm's plan lists every
// node operation of each rank's combined steps with the transfers among them.
TEST(PipelineParallel, PlanListsEveryRanksPassesAndTransfers) {
  testing::TempDir dir;
  testing::CommandResult r = testing::RunBitparity(
      {"plan", dir.Write("pipeline.toml", PipelineRecipe()), "--arm", "reference"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* line :
       {"pipeline rank 1: [t1 t2] [t3 m0 L]", "  chunk 0 (stage 1): recompute [1] [2]",
        "    recv activation mb0 from stage 0 (rank 0)\n"
        "    forward chunk 0 mb0\n"
        "    send activation mb0 to stage 2 (rank 0)",
        "    recv gradient mb0 from stage 2 (rank 0)\n"
        "    backward chunk 0 mb0\n"
        "    send gradient mb0 to stage 0 (rank 0)"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
}

TEST(PipelineParallel, OverlapPlanListsEveryRanksCombinedStepsWithTransfers) {
  testing::TempDir dir;
  const std::string recipe = dir.Write("pipeline.toml", PipelineRecipe());
  testing::CommandResult r = testing::RunBitparity({"plan", recipe, "--arm", "overlap"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"pipeline rank 1 of 2, 2 model chunks; microbatches: 4",
                           "chunk 0 (stage 1: t1 t2) recompute segments: 0=[1] 1=[2]",
                           "chunk 1 (stage 3: t3 m0 L) recompute segments: 0=[3] 1=[mtp0]",
                           "p2p_recv              forward              comm     from stage 0 "
                           "(rank 0)"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  testing::CommandResult json =
      testing::RunBitparity({"plan", recipe, "--arm", "overlap", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json plan = nlohmann::json::parse(json.output);
  ASSERT_EQ(plan["ranks"].size(), 2u);
  int sends = 0, receives = 0;
  for (const auto& rank : plan["ranks"]) {
    for (const auto& op : rank["ops"]) {
      sends += op["node"] == "p2p_send";
      receives += op["node"] == "p2p_recv";
    }
  }
  // 4 stages, 3 boundaries, 4 microbatches: an activation and a gradient each way per boundary.
  EXPECT_EQ(sends, 3 * 4 * 2);
  EXPECT_EQ(receives, 3 * 4 * 2);
}

// A cluster launcher whose world is not pp x ep: bad input naming the keys, before any
// rendezvous.
TEST(PipelineParallel, AWorldThatIsNotPpTimesEpIsBadInput) {
  testing::TempDir dir;
  const std::string recipe = dir.Write("pipeline.toml", PipelineRecipe());
  testing::CommandResult r = testing::RunBitparity(
      testing::WorkerArguments(recipe, "reference", dir.path()), {{"RANK", "0"},
                                                                  {"WORLD_SIZE", "2"},
                                                                  {"LOCAL_RANK", "0"},
                                                                  {"MASTER_ADDR", "127.0.0.1"},
                                                                  {"MASTER_PORT", "29511"}});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("the world has 2 ranks but the recipe's [parallel] pp x ep is 2 x 2 = 4"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace bitparity
