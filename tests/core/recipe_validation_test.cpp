// Malformed recipes are rejected before any work starts, with a message that names the file,
// the table and the key, and exit code 2 from the CLI.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "core/errors.h"
#include "tests/support/test_support.h"

namespace bitparity {
namespace {

std::string ValidToml() {
  return testing::SmallModelTable(3, 1) + R"(
[parallel]
ep = 2

[train]
micro_batch = 2
global_batch = 8
iterations = 3

[precision]
recipe = "bf16"

[recompute]
granularity = "full"
method = "uniform"
num_layers = 1

[trace]
dump_grads_at = [1]

[arms.reference]
engine = "reference"
)";
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "test bug: '" << from << "' not in the base recipe";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

struct BadRecipe {
  std::string name;
  std::string text;
  std::string expected;  // a substring the message must contain
};

std::vector<BadRecipe> BadRecipes() {
  const std::string v = ValidToml();
  return {
      {"unknown_key", Replace(v, "hidden = 32", "hidden = 32\nhiden = 32"),
       "[model] has unknown key 'hiden'"},
      {"unknown_table", v + "\n[modle]\nhidden = 3\n", "has unknown key 'modle'"},
      {"string_for_integer", Replace(v, "hidden = 32", "hidden = \"32\""),
       "[model] hidden must be an integer, got string"},
      {"float_for_integer", Replace(v, "layers = 3", "layers = 2.5"),
       "[model] layers must be an integer, got float"},
      {"heads_zero", Replace(v, "heads = 4", "heads = 0"), "[model] heads must be an integer in"},
      {"hidden_not_divisible", Replace(v, "hidden = 32", "hidden = 34"),
       "[model] hidden must be divisible by heads (4), got 34"},
      {"topk_above_experts", Replace(v, "topk = 2", "topk = 5"),
       "[model] topk must be <= experts (4), got 5"},
      {"first_k_dense_above_layers", Replace(v, "first_k_dense = 1", "first_k_dense = 4"),
       "[model] first_k_dense must be <= layers (3), got 4"},
      {"ep_not_dividing_experts", Replace(v, "ep = 2", "ep = 3"),
       "[parallel] ep must divide [model] experts (4), got ep = 3"},
      {"global_batch_not_multiple", Replace(v, "global_batch = 8", "global_batch = 6"),
       "[train] global_batch must be a multiple of micro_batch x data-parallel size (2 x 2 = 4)"},
      {"negative_lr", Replace(v, "iterations = 3", "iterations = 3\nlr = -1.0"),
       "[train] lr must be a finite number > 0"},
      {"bad_precision", Replace(v, "recipe = \"bf16\"", "recipe = \"fp16\""),
       "[precision] recipe must be one of \"fp32\", \"bf16\", \"blockwise\", \"mxfp8\", got "
       "\"fp16\""},
      {"full_without_method", Replace(v, "method = \"uniform\"\n", ""),
       "[recompute] (arm 'reference') method must be set"},
      {"full_without_num_layers", Replace(v, "num_layers = 1\n", ""),
       "[recompute] (arm 'reference') num_layers must be set"},
      {"uniform_mtp_num_layers", Replace(v, "num_layers = 1", "num_layers = 2"),
       "[recompute] (arm 'reference') num_layers must be 1 when method is \"uniform\" and "
       "[model] mtp_layers > 0, got 2"},
      {"arm_override_full_without_method",
       v + "\n[arms.other]\nengine = \"reference\"\n[arms.other.recompute]\nmethod = "
           "\"block\"\nnum_layers = 0\n",
       "[arms.other.recompute] num_layers must be an integer in"},
      {"attention_dropout_of_one",
       Replace(v, "mtp_layers = 1", "mtp_layers = 1\nattention_dropout = 1.0"),
       "[model] attention_dropout must be a finite number >= 0 and <= 0.99, got 1"},
      {"dump_beyond_iterations", Replace(v, "dump_grads_at = [1]", "dump_grads_at = [1, 9]"),
       "[trace] dump_grads_at entries must be <= [train] iterations (3), got 9"},
      {"no_arms", Replace(v, "[arms.reference]\nengine = \"reference\"\n", ""),
       "[arms] must define at least one arm"},
      {"arm_without_engine", Replace(v, "engine = \"reference\"", "dispatcher = \"flex\""),
       "[arms.reference] engine must be set"},
      {"arm_unknown_engine", Replace(v, "engine = \"reference\"", "engine = \"fast\""),
       "[arms.reference] engine must be one of"},
      {"arm_recompute_override_invalid",
       v + "\n[arms.other]\nengine = \"reference\"\n[arms.other.recompute]\nmethod = "
           "\"diagonal\"\n",
       "[arms.other.recompute] method must be one of \"uniform\", \"block\", got \"diagonal\""},
      {"arm_unknown_key", Replace(v, "engine = \"reference\"", "engine = \"reference\"\nspeed = 2"),
       "[arms.reference] has unknown key 'speed'"},
      {"not_toml", Replace(v, "hidden = 32", "hidden = = 32"), "not valid TOML"},
      // Megatron's rules for the overlap engine (--overlap-moe-expert-parallel-comm).
      {"overlap_full_recompute_on_one_rank",
       Replace(Replace(v, "ep = 2", "ep = 1"), "engine = \"reference\"", "engine = \"overlap\""),
       "[arms.reference] the overlap engine with full recompute needs [parallel] ep > 1"},
      {"overlap_two_mtp_depths",
       Replace(Replace(v, "mtp_layers = 1", "mtp_layers = 2"), "engine = \"reference\"",
               "engine = \"overlap\""),
       "[arms.reference] the overlap engine supports [model] mtp_layers 0 or 1, got 2"},
      {"overlap_delayed_fp8_with_recompute",
       Replace(Replace(v, "recipe = \"bf16\"", "recipe = \"blockwise\"\nfp8_scaling = \"delayed\""),
               "engine = \"reference\"", "engine = \"overlap\""),
       "[precision] (arm 'reference') fp8_scaling \"delayed\" cannot be used by the overlap "
       "engine with full recompute: the segment replay would update the amax history a second "
       "time"},
      {"reference_delayed_fp8",
       Replace(v, "recipe = \"bf16\"", "recipe = \"mxfp8\"\nfp8_scaling = \"delayed\""),
       "[precision] (arm 'reference') fp8_scaling \"delayed\" is rejected: bitparity's FP8 "
       "recipes use current scaling"},
      {"threads_zero", Replace(v, "ep = 2", "ep = 2\nthreads = 0"),
       "[parallel] threads must be an integer in [1, 256], got 0"},
      {"unknown_device", Replace(v, "ep = 2", "ep = 2\ndevice = \"tpu\""),
       "[parallel] device must be one of"},
      {"native_fp8_on_cpu",
       Replace(v, "recipe = \"bf16\"", "recipe = \"blockwise\"\nfp8_backend = \"native\""),
       "[precision] (arm 'reference') fp8_backend \"native\" runs FP8 tensor-core GEMMs and needs "
       "[parallel] device = \"cuda\"; on the CPU FP8 is emulated: use fp8_backend = "
       "\"emulated\""},
      {"native_blockwise_shapes",
       Replace(Replace(v, "recipe = \"bf16\"", "recipe = \"blockwise\"\nfp8_backend = \"native\""),
               "ep = 2", "ep = 2\ndevice = \"cuda\""),
       "fp8_backend \"native\" with recipe \"blockwise\" needs [model] hidden, ffn and moe_ffn "
       "to be multiples of 128 (the 128x128 weight blocks of the tensor-core GEMM), got hidden = "
       "32, ffn = 64, moe_ffn = 32"},
      {"unknown_fp8_backend",
       Replace(v, "recipe = \"bf16\"", "recipe = \"mxfp8\"\nfp8_backend = \"tensorcore\""),
       "[precision] fp8_backend must be one of"},
      {"pipeline_uneven_split", Replace(v, "ep = 2", "ep = 2\npp = 2"),
       "[model] layers = 3 does not split evenly over [parallel] pp x vpp = 2 x 1 = 2 stages; "
       "make layers a multiple of 2 or place the layers with [model] pipeline_layout, e.g. "
       "\"Ett|tmL\""},
      {"pipeline_layout_letter",
       Replace(Replace(v, "ep = 2", "ep = 2\npp = 2"), "hidden = 32",
               "hidden = 32\npipeline_layout = \"Etx|ttmL\""),
       "[model] pipeline_layout \"Etx|ttmL\" has an unknown letter 'x' in stage 0"},
      {"pipeline_vpp_conflict",
       Replace(Replace(v, "ep = 2", "ep = 2\npp = 2\nvpp = 3"), "hidden = 32",
               "hidden = 32\npipeline_layout = \"Et|t||tmL\""),
       "[parallel] vpp = 3 conflicts with [model] pipeline_layout, whose 4 stages over pp = 2 "
       "make vpp 2"},
      {"pipeline_microbatches",
       Replace(Replace(Replace(v, "ep = 2", "ep = 2\npp = 2"), "hidden = 32",
                       "hidden = 32\npipeline_layout = \"Et|t||tmL\""),
               "global_batch = 8", "global_batch = 12"),
       "[arms.reference] [parallel] 3 microbatches leave 1 after the last full group of 2; the "
       "interleaved schedule needs 0 or at least pp = 2 left"},
      {"pipeline_overlap_without_vpp",
       Replace(Replace(v, "ep = 2", "ep = 2\npp = 2"), "hidden = 32",
               "hidden = 32\npipeline_layout = \"Ett|tmL\"") +
           "\n[arms.overlap]\nengine = \"overlap\"\n",
       "[arms.overlap] [parallel] the EP all-to-all overlap with pp = 2 needs vpp > 1 (Megatron's "
       "rule: a combined step pairs two model chunks)"},
      {"name_climbs_out", "name = \"../../x\"\n" + v,
       "name '../../x' must be 1-64 characters of letters, digits, '_', '-' and '.', starting "
       "with a letter, a digit or '_'"},
      {"name_absolute", "name = \"/tmp/x\"\n" + v, "name '/tmp/x' must be"},
      {"name_empty", "name = \"\"\n" + v, "name '' must be"},
      {"name_dot", "name = \".\"\n" + v, "name '.' must be"},
      {"name_nested", "name = \"a/b\"\n" + v, "name 'a/b' must be"},
      {"name_control_character", "name = \"a\\u0001b\"\n" + v, "name 'a\\x01b' must be"},
      {"arm_name_climbs_out", v + "\n[arms.\"..\"]\nengine = \"reference\"\n",
       "[arms] arm name '..' must be"},
      {"overlap_bound_unknown_arm",
       v + "\n[[compare.overlap]]\narm = \"overlap\"\nhidden_at_least = 0.5\n",
       "[[compare.overlap]] arm names no arm: 'overlap'"},
      {"overlap_bound_above_one",
       v + "\n[[compare.overlap]]\narm = \"reference\"\nhidden_at_least = 1.5\n",
       "hidden_at_least"},
      {"params_tolerance", v + "\n[compare]\nparams = { atol = 1.0 }\n",
       "[compare] params must be \"bitwise\": parameters are stored as digests, which a "
       "tolerance cannot compare (loss and gradients take tolerances)"},
      {"data_min_length_over_seq_len", v + "\n[data]\nmin_length = 17\n",
       "[data] min_length must be <= [model] seq_len (16), got 17"},
      {"data_min_length_within_mtp", v + "\n[data]\nmin_length = 1\n",
       "[data] min_length must be > [model] mtp_layers (1: a sample must keep a token after its "
       "MTP depths roll it left), got 1"},
      {"pipeline_reference_chunk_unit",
       Replace(Replace(Replace(v, "ep = 2", "ep = 2\npp = 2"), "hidden = 32",
                       "hidden = 32\npipeline_layout = \"Ett|tmL\""),
               "num_layers = 1", "num_layers = 1\nunit = \"chunk\""),
       "unit \"chunk\" (the overlap engine's whole-chunk replay) is not available to the "
       "reference engine with [parallel] pp > 1"},
  };
}

class RecipeValidationTest : public ::testing::TestWithParam<BadRecipe> {};

TEST(RecipeValidation, BaseRecipeIsValid) {
  Recipe r = ParseRecipe(ValidToml(), "base.toml");
  EXPECT_EQ(r.arms.size(), 1u);
  EXPECT_EQ(r.microbatches_per_rank(), 2);
}

TEST_P(RecipeValidationTest, RejectedInProcessNamingFileAndKey) {
  const BadRecipe& bad = GetParam();
  try {
    ParseRecipe(bad.text, "bad/" + bad.name + ".toml");
    FAIL() << "accepted a malformed recipe";
  } catch (const InputError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("bad/" + bad.name + ".toml"), std::string::npos) << message;
    EXPECT_NE(message.find(bad.expected), std::string::npos) << message;
  }
}

TEST_P(RecipeValidationTest, CliExitsTwoAndWritesNothing) {
  const BadRecipe& bad = GetParam();
  testing::TempDir dir;
  const std::string recipe = dir.Write(bad.name + ".toml", bad.text);
  testing::CommandResult validate = testing::RunBitparity({"validate", recipe});
  EXPECT_EQ(validate.exit_code, 2) << validate.output;
  EXPECT_NE(validate.output.find(bad.expected), std::string::npos) << validate.output;

  const std::string trace = dir.File("out/trace.h5");
  testing::CommandResult arm = testing::RunBitparity({"arm", recipe, "--out", trace});
  EXPECT_EQ(arm.exit_code, 2) << arm.output;
  EXPECT_FALSE(std::filesystem::exists(dir.File("out"))) << "bad input must write nothing";
}

INSTANTIATE_TEST_SUITE_P(Malformed, RecipeValidationTest, ::testing::ValuesIn(BadRecipes()),
                         [](const ::testing::TestParamInfo<BadRecipe>& info) {
                           return info.param.name;
                         });

TEST(RecipeValidation, AFileStemThatIsNoNameNeedsAName) {
  try {
    ParseRecipe(ValidToml(), "/tmp/my recipe.toml");
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("name 'my recipe' must be"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("it is the file's stem: set name"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(ParseRecipe("name = \"mine\"\n" + ValidToml(), "/tmp/my recipe.toml").name, "mine");
}

TEST(RecipeValidation, MissingFileIsBadInput) {
  testing::CommandResult r = testing::RunBitparity({"validate", "/nonexistent/recipe.toml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("/nonexistent/recipe.toml: recipe file not found"), std::string::npos)
      << r.output;
}

// A FIFO with no writer would block the read forever: refused as not a regular file, at once.
TEST(RecipeValidation, AFifoIsBadInputNotAHang) {
  testing::TempDir dir;
  const std::string fifo = dir.File("recipe.toml");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  testing::CommandResult r = testing::RunBitparity({"validate", fifo});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(fifo + ": is not a regular file (a FIFO, socket or device)"),
            std::string::npos)
      << r.output;
}

TEST(RecipeValidation, ReportsEveryProblemAtOnce) {
  std::string text =
      Replace(Replace(ValidToml(), "heads = 4", "heads = 0"), "topk = 2", "topk = \"x\"");
  try {
    ParseRecipe(text, "two.toml");
    FAIL();
  } catch (const InputError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("heads"), std::string::npos) << message;
    EXPECT_NE(message.find("topk"), std::string::npos) << message;
  }
}

// A bad pipeline gets its own reason only: the key named once, and no second reason from an
// arm's schedule rule that reads the vpp a layout that cannot be read could not give.
TEST(RecipeValidation, ABadPipelineHasOneReason) {
  const std::string overlap = "\n[arms.overlap]\nengine = \"overlap\"\n";
  const std::string uneven = Replace(ValidToml(), "ep = 2", "ep = 2\npp = 2\nvpp = 2") + overlap;
  const std::string layout =
      Replace(Replace(ValidToml(), testing::SmallModelTable(3, 1),
                      testing::SmallModelTable(4, 1) + "pipeline_layout = \"EEt|t|t|tmL\"\n"),
              "ep = 2", "ep = 2\npp = 2") +
      overlap;
  for (const auto& [text, reason] : std::vector<std::pair<std::string, std::string>>{
           {uneven, "[model] layers = 3 does not split evenly over [parallel] pp x vpp = 2 x 2"},
           {layout, "has 'E' twice"}}) {
    try {
      ParseRecipe(text, "pipeline.toml");
      ADD_FAILURE() << "accepted: " << reason;
    } catch (const InputError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(reason), std::string::npos) << message;
      EXPECT_EQ(message.find("[model] [model]"), std::string::npos) << message;
      EXPECT_EQ(message.find("needs vpp > 1"), std::string::npos) << message;
    }
  }
}

TEST(RecipeValidation, ArmOverridesRecomputeAndPrecision) {
  std::string text = ValidToml() +
                     "\n[arms.plain]\nengine = \"reference\"\nrecompute = { granularity = "
                     "\"none\" }\nprecision = { recipe = \"fp32\" }\n";
  Recipe r = ParseRecipe(text, "arms.toml");
  const ArmConfig& plain = r.arm("plain");
  EXPECT_FALSE(plain.recompute.full());
  EXPECT_EQ(plain.precision.recipe, PrecisionRecipe::kFp32);
  const ArmConfig& reference = r.arm("reference");
  EXPECT_TRUE(reference.recompute.full());
  EXPECT_EQ(reference.precision.recipe, PrecisionRecipe::kBf16);
  EXPECT_THROW(r.arm("missing"), InputError);
}

TEST(RecipeValidation, ShippedRecipesAreValid) {
  for (const auto& entry : std::filesystem::directory_iterator(testing::SourceDir() + "/recipes")) {
    if (entry.path().extension() != ".toml") continue;
    if (testing::ReadFile(entry.path().string()).find("[matrix]") != std::string::npos) continue;
    EXPECT_NO_THROW(LoadRecipe(entry.path().string())) << entry.path();
  }
}

}  // namespace
}  // namespace bitparity
