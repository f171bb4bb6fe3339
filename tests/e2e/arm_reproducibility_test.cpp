// `bitparity arm` on the default recipe, end to end: two separate runs produce traces that
// `bitparity diff` calls identical, a one-bit change in one gradient element of a copy is
// reported at exactly its iteration, rank, parameter and element, and the model learns.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>

#include "numerics/float_bits.h"
#include "tests/support/test_support.h"
#include "trace/digest.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

class DefaultRecipeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    const std::string recipe = testing::SourceDir() + "/recipes/default.toml";
    for (const char* name : {"a.h5", "b.h5"}) {
      testing::CommandResult r =
          testing::RunBitparity({"arm", recipe, "--arm", "reference", "--out", dir_->File(name)});
      ASSERT_EQ(r.exit_code, 0) << r.output;
      runs_.push_back(r);
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static testing::TempDir* dir_;
  static std::vector<testing::CommandResult> runs_;
};

testing::TempDir* DefaultRecipeTest::dir_ = nullptr;
std::vector<testing::CommandResult> DefaultRecipeTest::runs_;

TEST_F(DefaultRecipeTest, TwoProcessesProduceIdenticalTraces) {
  testing::CommandResult diff =
      testing::RunBitparity({"diff", dir_->File("a.h5"), dir_->File("b.h5")});
  EXPECT_EQ(diff.exit_code, 0) << diff.output;
  EXPECT_NE(diff.output.find("identical"), std::string::npos) << diff.output;
}

TEST_F(DefaultRecipeTest, OneFlippedBitInOneGradientElementIsLocalized) {
  Trace trace = ReadTrace(dir_->File("a.h5"));
  const int64_t rank = 1, iteration = 20, element = 123;
  const std::string param = "layers.1.attention.qkv";
  RankTrace& r = trace.ranks[rank];
  size_t p = 0;
  while (p < r.param_names.size() && r.param_names[p] != param) ++p;
  ASSERT_LT(p, r.param_names.size());
  TensorDump* dump = nullptr;
  for (TensorDump& d : r.grad_dumps.at(iteration)) {
    if (d.name == param) dump = &d;
  }
  ASSERT_NE(dump, nullptr);
  // Flip the lowest mantissa bit, and keep the digest consistent with the new tensor.
  float& value = dump->values[element];
  const float original = value;
  value = FloatFromBits(FloatBits(value) ^ 1u);
  r.iterations[iteration - 1].grad_digests[p] =
      Digest(dump->values.data(), dump->values.size() * sizeof(float));
  WriteTrace(dir_->File("flipped.h5"), trace);

  testing::CommandResult diff =
      testing::RunBitparity({"diff", dir_->File("a.h5"), dir_->File("flipped.h5")});
  EXPECT_EQ(diff.exit_code, 1) << diff.output;
  EXPECT_NE(diff.output.find("iteration 20, rank 1"), std::string::npos) << diff.output;
  EXPECT_NE(diff.output.find("main grad of " + param), std::string::npos) << diff.output;
  EXPECT_NE(diff.output.find("first differing element 123"), std::string::npos) << diff.output;
  EXPECT_NE(diff.output.find("(1 ulp)"), std::string::npos) << diff.output;
  EXPECT_NE(diff.output.find("\n1 of "), std::string::npos) << "exactly one record differs\n"
                                                            << diff.output;
  EXPECT_NE(FloatBits(original), FloatBits(value));
}

TEST_F(DefaultRecipeTest, TheModelLearns) {
  Trace trace = ReadTrace(dir_->File("a.h5"));
  const auto& its = trace.ranks[0].iterations;
  ASSERT_EQ(its.size(), 20u);
  EXPECT_LT(its.back().loss, 0.6f * its.front().loss)
      << "first " << its.front().loss << ", last " << its.back().loss;
  EXPECT_LT(its.back().lm_loss, its.front().lm_loss);
  EXPECT_LT(its.back().mtp_loss, its.front().mtp_loss);
  EXPECT_GT(its.back().aux_loss, 0.0f);
}

TEST_F(DefaultRecipeTest, TraceRecordsRecipeAndProvenance) {
  Trace trace = ReadTrace(dir_->File("a.h5"));
  EXPECT_EQ(trace.attribute("arm"), "reference");
  EXPECT_EQ(trace.attribute("recompute"), "full/uniform/1");
  EXPECT_NE(trace.attribute("recipe").find("[model]"), std::string::npos);
  ASSERT_EQ(trace.ranks.size(), 2u);
  for (const RankTrace& r : trace.ranks) {
    for (const char* key :
         {"provenance.libtorch_version", "provenance.blas", "provenance.intra_op_threads",
          "provenance.git_revision", "provenance.compiler", "provenance.cpu_flags"}) {
      ASSERT_TRUE(r.attributes.count(key)) << key;
      EXPECT_FALSE(r.attributes.at(key).empty()) << key;
    }
    EXPECT_EQ(r.attributes.at("provenance.intra_op_threads"), "1");
    EXPECT_GT(r.iterations[0].peak_bytes, 0);
  }
  // Expert parameters are sharded: each rank holds its own two experts per MoE layer.
  EXPECT_NE(trace.ranks[0].param_names, trace.ranks[1].param_names);
}

TEST_F(DefaultRecipeTest, ProgressIsPrinted) {
  EXPECT_NE(runs_[0].output.find("iteration 20/20"), std::string::npos) << runs_[0].output;
  EXPECT_NE(runs_[0].output.find("wrote "), std::string::npos);
}

}  // namespace
}  // namespace bitparity
