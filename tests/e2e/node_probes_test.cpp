// Node probes end to end (`bitparity run --probes`): the overlap arm's traces hold a record for
// every output and input gradient of every schedule operation; every recompute replay equals its
// first pass; a replay that restores nothing of its chunk-state snapshot fails that check at the
// operation it corrupted; a run that differs names each rank's first divergent operation.

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <pugixml.hpp>
#include <string>
#include <vector>

#include "harness/probe_compare.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/report_json.h"
#include "tests/support/test_support.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

std::string RecipeToml() {
  return testing::RecipeBuilder(3, 1)
      .Set("name", "probes")
      .Set("parallel.timeout_s", 120)
      .Batches(8, 3)
      .FullRecomputeAll("uniform", 1)
      .Set("precision.recipe", "fp32")
      .Arm("reference", "reference")
      .Arm("overlap", "overlap")
      .Text();
}

using testing::CheckNamed;

class NodeProbesRun : public ::testing::Test {
 protected:
  void SetUp() override { recipe_ = dir_.Write("probes.toml", RecipeToml()); }

  nlohmann::json Run(const std::string& out, std::vector<std::string> extra, int expected_exit,
                     const std::vector<std::pair<std::string, std::string>>& env = {}) {
    std::vector<std::string> args = {"run",      recipe_,       "--out",  dir_.File(out),
                                     "--probes", "--no-golden", "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    testing::CommandResult r = testing::RunBitparity(args, env);
    EXPECT_EQ(r.exit_code, expected_exit) << r.output;
    return nlohmann::json::parse(testing::ReadFile(dir_.File(out + "/report.json")));
  }

  testing::TempDir dir_;
  std::string recipe_;
};

TEST_F(NodeProbesRun, EveryReplayEqualsItsFirstPass) {
  const nlohmann::json report = Run("good", {}, 0);
  const nlohmann::json& replays = CheckNamed(report, "overlap: replays equal first pass");
  EXPECT_EQ(replays["verdict"], "pass") << replays.dump();
  EXPECT_GT(replays["figures"]["replay_records"].get<int64_t>(), 0);
  const Trace trace = ReadTrace(dir_.File("good/overlap/run1/trace.h5"));
  for (const RankTrace& rank : trace.ranks) {
    ASSERT_FALSE(rank.probes.empty());
    bool forward = false, replay = false, backward = false, mtp = false;
    for (const ProbeRecord& p : rank.probes) {
      forward |= p.phase == "forward";
      replay |= p.phase == "replay";
      backward |= p.phase == "backward";
      mtp |= p.layer == "mtp 0" && p.node == "mtp_post_process";
      EXPECT_FALSE(p.dtype.empty());
    }
    EXPECT_TRUE(forward && replay && backward && mtp);
  }
}

TEST_F(NodeProbesRun, BothArmsRecordTheSameKeysWithTheSameBits) {
  Run("arms", {"--repeats", "1"}, 0);
  const Trace overlap = ReadTrace(dir_.File("arms/overlap/run1/trace.h5"));
  const Trace reference = ReadTrace(dir_.File("arms/reference/run1/trace.h5"));
  ASSERT_TRUE(HasProbes(reference));
  // Every forward and backward record of the overlap arm has its counterpart in the reference,
  // with the same bits.
  for (size_t r = 0; r < overlap.ranks.size(); ++r) {
    std::map<std::string, uint64_t> keys;
    for (const ProbeRecord& p : reference.ranks[r].probes) {
      if (p.phase != "replay") keys.emplace(DescribeProbe(p), p.digest);
    }
    int64_t aligned = 0;
    for (const ProbeRecord& p : overlap.ranks[r].probes) {
      if (p.phase == "replay") continue;
      auto it = keys.find(DescribeProbe(p));
      ASSERT_NE(it, keys.end()) << "the reference has no record " << DescribeProbe(p);
      EXPECT_EQ(it->second, p.digest) << DescribeProbe(p);
      ++aligned;
    }
    EXPECT_GT(aligned, 100);
  }
  EXPECT_TRUE(FirstCrossArmDivergences(overlap, reference).empty());
}

TEST_F(NodeProbesRun, AnArmThatPartsFromTheBaselineIsNamedAtTheOperation) {
  // The combine of one microbatch unpermutes with the routing plan another microbatch left in the
  // layer: the arms part at the first MoE layer's combine of the second microbatch, on each rank.
  const nlohmann::json report =
      Run("stale", {"--repeats", "1"}, 1, {{"BITPARITY_INJECT_BUG", "stale_routing_metadata"}});
  const nlohmann::json& gradients = CheckNamed(report, "overlap vs reference: gradients");
  EXPECT_EQ(gradients["verdict"], "fail");
  ASSERT_TRUE(gradients["figures"].contains("first_divergent_operations")) << gradients.dump();
  const nlohmann::json& sentences = gradients["figures"]["first_divergent_operations"];
  ASSERT_EQ(sentences.size(), 2u) << gradients.dump();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(sentences[rank].get<std::string>().rfind(
                  "rank " + std::to_string(rank) +
                      ": first divergent operation: iteration 1, microbatch 1, chunk 0, decoder 1, "
                      "moe_combine forward, output 0 (its inputs and everything both arms "
                      "recorded before it are equal; the tensor differs",
                  0),
              0u)
        << sentences.dump();
  }
  EXPECT_NE(gradients["details"].get<std::string>().find("rank 1: first divergent operation"),
            std::string::npos)
      << gradients["details"];
  // The JUnit testcase carries the sentences in its system-out, and the time of the runs compared.
  pugi::xml_document junit;
  ASSERT_TRUE(junit.load_file(dir_.File("stale/junit.xml").c_str()));
  const pugi::xml_node testcase =
      junit.select_node("//testcase[@name='overlap vs reference: gradients']").node();
  ASSERT_TRUE(testcase);
  EXPECT_GT(testcase.attribute("time").as_double(), 0.0);
  EXPECT_FALSE(testcase.child("properties")) << "JUnit's testcase has no properties";
  const std::string out = testcase.child("system-out").text().get();
  int sentences_out = 0;
  for (size_t at = out.find("first_divergent_operation: rank "); at != std::string::npos;
       at = out.find("first_divergent_operation: rank ", at + 1)) {
    ++sentences_out;
  }
  EXPECT_EQ(sentences_out, 2) << out;
}

TEST_F(NodeProbesRun, AFailureWithoutProbesIsRerunWithThemToNameTheOperation) {
  testing::CommandResult r = testing::RunBitparity(
      {"run", recipe_, "--out", dir_.File("escalated"), "--repeats", "1", "--no-golden"},
      {{"BITPARITY_INJECT_BUG", "stale_routing_metadata"}});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("with full gradient dumps at iteration 1 and node probes"),
            std::string::npos)
      << r.output;
  const nlohmann::json report =
      nlohmann::json::parse(testing::ReadFile(dir_.File("escalated/report.json")));
  for (const char* name : {"overlap vs reference: loss", "overlap vs reference: gradients"}) {
    const nlohmann::json& check = CheckNamed(report, name);
    EXPECT_EQ(check["verdict"], "fail");
    EXPECT_EQ(check["figures"]["first_divergent_operations_from"], "reruns with node probes");
    ASSERT_EQ(check["figures"]["first_divergent_operations"].size(), 2u) << check.dump();
    EXPECT_NE(check["figures"]["first_divergent_operations"][0].get<std::string>().find(
                  "iteration 1, microbatch 1, chunk 0, decoder 1, moe_combine forward"),
              std::string::npos)
        << check.dump();
  }
  // The first run recorded no probes; only the reruns did.
  EXPECT_TRUE(ReadTrace(dir_.File("escalated/overlap/run1/trace.h5")).ranks[0].probes.empty());
}

TEST_F(NodeProbesRun, AReplayWithoutItsSnapshotFailsAtTheOperationItCorrupted) {
  const nlohmann::json report =
      Run("skip", {"--repeats", "1"}, 1, {{"BITPARITY_INJECT_BUG", "skip_snapshot_restore"}});
  const nlohmann::json& replays = CheckNamed(report, "overlap: replays equal first pass");
  EXPECT_EQ(replays["verdict"], "fail") << replays.dump();
  // The MTP depth replays with token ids rolled twice: its attention is the first to differ.
  EXPECT_NE(replays["summary"].get<std::string>().find("mtp 0, attn replay, output 0 differs "
                                                       "from its first pass"),
            std::string::npos)
      << replays["summary"];
}

TEST_F(NodeProbesRun, ARunThatDiffersNamesEachRanksFirstDivergentOperation) {
  // A change of 2^20 ulp in one main grad of run 2 at iteration 1 (one ulp changes the fp32
  // master by too little to change any operation's output): the parameter differs after the
  // step, and in iteration 2 rank 0's attention, which reads it, is the first operation to
  // differ; rank 1's first is the expert MLP that receives rank 0's tokens.
  const nlohmann::json report =
      Run("perturbed",
          {"--perturb",
           "overlap:2:rank=0,iteration=1,param=layers.1.attention.qkv,element=3,ulps=1048576"},
          1);
  const nlohmann::json& reproduces = CheckNamed(report, "overlap reproduces itself");
  EXPECT_EQ(reproduces["verdict"], "fail");
  ASSERT_TRUE(reproduces["figures"].contains("first_divergent_operations")) << reproduces.dump();
  const nlohmann::json& sentences = reproduces["figures"]["first_divergent_operations"];
  ASSERT_EQ(sentences.size(), 2u) << sentences.dump();
  const std::string prefix = ": first divergent operation: iteration 2, microbatch 0, chunk 0, ";
  EXPECT_EQ(sentences[0].get<std::string>().rfind("rank 0" + prefix + "decoder 1, attn forward", 0),
            0u)
      << sentences.dump();
  EXPECT_EQ(sentences[1].get<std::string>().rfind("rank 1" + prefix + "decoder 1, mlp forward", 0),
            0u)
      << sentences.dump();
  EXPECT_NE(reproduces["details"].get<std::string>().find("rank 1" + prefix), std::string::npos)
      << reproduces["details"];
}

}  // namespace
}  // namespace bitparity
