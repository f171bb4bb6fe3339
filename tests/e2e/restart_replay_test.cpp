// Restart replay end to end (`bitparity run` with [train] checkpoint_at, and `bitparity arm
// --checkpoint-at / --resume-from`): a run resumed from its checkpoint in fresh rank processes
// equals the uninterrupted run, in both arms and across them; a checkpoint that loses one piece
// of state fails the gate naming it; a checkpoint of another recipe, another world or a damaged
// file is bad input naming the file, and nothing is written.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "config/recipe.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/report_json.h"
#include "tests/support/test_support.h"
#include "trace/checkpoint_file.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

// bf16 (so that masters saved in the training dtype lose bits), a warm-up and a cosine decay (so
// that the LR position matters), dropout (so that its stream must follow the iteration), an MTP
// depth and full recompute; the overlap arm unless `reference_only`.
testing::RecipeBuilder Recipe(bool reference_only = false) {
  testing::RecipeBuilder builder(3, 1);
  builder.Set("name", "replay")
      .Set("parallel.timeout_s", 120)
      .Batches(8, 4)
      .FullRecomputeAll("uniform", 1)
      .Set("model.dropout", 0.1)
      .Set("train.warmup_iterations", 2)
      .Set("train.lr_schedule", "cosine")
      .Set("train.min_lr", 1e-4)
      .SetList("train.checkpoint_at", {2})
      .Set("train.resume_across_arms", true)
      .SetList("trace.dump_grads_at", {4})
      .Arm("reference", "reference");
  if (!reference_only) builder.Arm("overlap", "overlap");
  return builder;
}

using testing::CheckNamed;

class RestartReplay : public ::testing::Test {
 protected:
  void SetUp() override { recipe_ = dir_.Write("replay.toml", Recipe().Text()); }

  nlohmann::json Run(const std::string& out, std::vector<std::string> extra, int expected_exit,
                     const std::vector<std::pair<std::string, std::string>>& env = {}) {
    std::vector<std::string> args = {"run",         recipe_,   "--out",     dir_.File(out),
                                     "--no-golden", "--quiet", "--repeats", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    const testing::CommandResult r = testing::RunBitparity(args, env);
    EXPECT_EQ(r.exit_code, expected_exit) << r.output;
    return nlohmann::json::parse(testing::ReadFile(dir_.File(out + "/report.json")));
  }

  testing::TempDir dir_;
  std::string recipe_;
};

TEST_F(RestartReplay, AResumedRunIsTheUninterruptedRunInBothArmsAndAcrossThem) {
  const nlohmann::json report = Run("good", {}, 0);
  for (const std::string name :
       {"reference resumes bit-identically", "overlap resumes bit-identically",
        "overlap resumes bit-identically from reference"}) {
    const nlohmann::json& check = CheckNamed(report, name);
    EXPECT_EQ(check["verdict"], "pass") << check.dump();
    EXPECT_GT(check["figures"]["compared_records"].get<int64_t>(), 0) << check.dump();
  }
  // Each rank's checkpoint: after iteration 2, four counters at 2, bf16 weights, the recipe.
  for (int rank = 0; rank < 2; ++rank) {
    const RankCheckpoint c = ReadCheckpoint(dir_.File(
        "good/overlap/run1/checkpoints/iteration_2/rank_" + std::to_string(rank) + ".h5"));
    EXPECT_TRUE(c.position == (TrainingPosition{2, 2, 2, 2}));
    EXPECT_EQ(c.rank, rank);
    EXPECT_EQ(c.world_size, 2);
    EXPECT_EQ(c.arm, "overlap");
    EXPECT_EQ(c.recipe_digest, RecipeDigest(testing::ReadFile(recipe_)));
    bool bf16 = false;
    for (const CheckpointParameter& p : c.parameters) bf16 |= p.weight_dtype == "bfloat16";
    EXPECT_TRUE(bf16);
  }
  // The resumed run's trace holds the iterations after the checkpoint.
  const Trace resumed = ReadTrace(dir_.File("good/overlap/resume_2_from_reference/trace.h5"));
  ASSERT_EQ(resumed.ranks[0].iterations.size(), 2u);
  EXPECT_EQ(resumed.ranks[0].iterations[0].iteration, 3);
  EXPECT_EQ(resumed.ranks[0].attributes.at("resumed_after_iteration"), "2");
}

TEST_F(RestartReplay, EachPieceOfStateTheCheckpointLosesFailsTheGateByName) {
  const std::vector<std::pair<std::string, std::string>> faults = {
      {"checkpoint_drops_optimizer_steps", "the resumed run lost the optimizer's step count"},
      {"checkpoint_drops_lr_position", "the resumed run lost the LR schedule's position"},
      {"checkpoint_resets_data_position", "the resumed run lost the data position"},
      {"checkpoint_masters_in_training_dtype",
       "the checkpoint does not hold the fp32 masters bit for bit"},
  };
  for (const auto& [fault, message] : faults) {
    const nlohmann::json report =
        Run(fault, {"--arms", "reference"}, 1, {{"BITPARITY_INJECT_BUG", fault}});
    const nlohmann::json& check = CheckNamed(report, "reference resumes bit-identically");
    EXPECT_EQ(check["verdict"], "fail") << fault;
    EXPECT_NE(check["summary"].get<std::string>().find(message), std::string::npos)
        << fault << ": " << check["summary"];
    EXPECT_EQ(check["summary"].get<std::string>().rfind("resumed after iteration 2: ", 0), 0u)
        << check["summary"];
  }
}

class ResumeInput : public ::testing::Test {
 protected:
  void SetUp() override {
    recipe_ = dir_.Write("replay.toml", Recipe().Text());
    const testing::CommandResult saved = testing::RunBitparity(
        {"arm", recipe_, "--arm", "reference", "--out", dir_.File("a.h5"), "--quiet",
         "--checkpoint-at", "2", "--checkpoint-dir", dir_.File("checkpoints")});
    ASSERT_EQ(saved.exit_code, 0) << saved.output;
    checkpoint_ = dir_.File("checkpoints/iteration_2");
  }

  // `bitparity arm RECIPE --resume-from FOLDER`: its result, and that it wrote no trace when it
  // failed.
  testing::CommandResult Resume(const std::string& recipe, const std::string& folder,
                                const std::string& out) {
    testing::CommandResult r =
        testing::RunBitparity({"arm", recipe, "--arm", "reference", "--out", dir_.File(out),
                               "--quiet", "--resume-from", folder});
    if (r.exit_code != 0) {
      EXPECT_FALSE(fs::exists(dir_.File(out))) << out;
    }
    return r;
  }

  void ExpectBadInput(const testing::CommandResult& r, const std::vector<std::string>& texts) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    for (const std::string& text : texts) {
      EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
    }
  }

  testing::TempDir dir_;
  std::string recipe_;
  std::string checkpoint_;
};

TEST_F(ResumeInput, TheRecipesOwnCheckpointResumesAfterItsIteration) {
  const testing::CommandResult r = Resume(recipe_, checkpoint_, "b.h5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Trace straight = ReadTrace(dir_.File("a.h5"));
  const Trace resumed = ReadTrace(dir_.File("b.h5"));
  ASSERT_EQ(resumed.ranks[1].iterations.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const IterationRecord& x = straight.ranks[1].iterations[i + 2];
    const IterationRecord& y = resumed.ranks[1].iterations[i];
    EXPECT_EQ(x.iteration, y.iteration);
    EXPECT_EQ(x.grad_digests, y.grad_digests);
    EXPECT_EQ(x.param_digests, y.param_digests);
  }
}

TEST_F(ResumeInput, AnotherRecipeListsTheSettingsThatDiffer) {
  const std::string other = dir_.Write("other.toml", Recipe().Set("train.lr", 0.02).Text());
  ExpectBadInput(Resume(other, checkpoint_, "b.h5"),
                 {"iteration_2/rank_", ".h5: a checkpoint of another recipe (train.lr: ",
                  "resume with the recipe it was saved by"});
}

TEST_F(ResumeInput, AnotherWorldSizeIsNamed) {
  // One rank (the overlap arm needs two): the world differs before the recipe is compared.
  const std::string other = dir_.Write(
      "world.toml", Recipe(true).Set("parallel.ep", 1).Set("train.global_batch", 4).Text());
  ExpectBadInput(Resume(other, checkpoint_, "b.h5"),
                 {"iteration_2/rank_0.h5: saved by rank 0 of 2, read by rank 0 of 1"});
}

TEST_F(ResumeInput, ADamagedOrMissingCheckpointIsNamed) {
  fs::copy(checkpoint_, dir_.File("damaged"), fs::copy_options::recursive);
  const std::string bytes = testing::ReadFile(dir_.File("damaged/rank_1.h5"));
  {
    std::ofstream truncated(dir_.File("damaged/rank_1.h5"), std::ios::binary | std::ios::trunc);
    truncated << bytes.substr(0, bytes.size() / 3);
  }
  ExpectBadInput(Resume(recipe_, dir_.File("damaged"), "b.h5"),
                 {"damaged/rank_1.h5: ", "truncated or corrupt"});
  fs::remove(dir_.File("damaged/rank_1.h5"));
  ExpectBadInput(Resume(recipe_, dir_.File("damaged"), "b.h5"),
                 {"damaged/rank_1.h5: checkpoint file not found"});
  ExpectBadInput(Resume(recipe_, dir_.File("nowhere"), "b.h5"),
                 {"--resume-from ", "nowhere: not a checkpoint folder"});
  ExpectBadInput(testing::RunBitparity({"arm", recipe_, "--arm", "reference", "--out",
                                        dir_.File("c.h5"), "--checkpoint-at", "2"}),
                 {"--checkpoint-at needs --checkpoint-dir"});
  ExpectBadInput(
      testing::RunBitparity({"arm", recipe_, "--arm", "reference", "--out", dir_.File("c.h5"),
                             "--checkpoint-at", "4", "--checkpoint-dir", dir_.File("late")}),
      {"--checkpoint-at 4 is outside [1, 3] (", "replay.toml trains 4 iterations)"});
}

}  // namespace
}  // namespace bitparity
