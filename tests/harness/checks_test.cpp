// The pure parts of the harness, without rank processes: the checks over hand-built traces, the
// fingerprint, and the matrix expansion.

#include "harness/checks.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "config/recipe.h"
#include "config/recipe_edit.h"
#include "core/errors.h"
#include "harness/fingerprint.h"
#include "harness/golden_check.h"
#include "harness/matrix_command.h"
#include "harness/resources.h"
#include "tests/support/test_support.h"
#include "tests/support/trace_builder.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

float NextUp(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  ++bits;
  std::memcpy(&v, &bits, sizeof(bits));
  return v;
}

TEST(Checks, ReproducesNamesTheFirstRunThatDiffers) {
  const Trace run = testing::MakeTrace(2, 3);
  Trace third = run;
  third.ranks[1].iterations[2].param_digests[1] ^= 1;
  CheckResult c = CheckReproduces("overlap", {&run, &run, &third, &third});
  EXPECT_EQ(c.kind, CheckKind::kReproduces);
  EXPECT_EQ(c.arm, "overlap");
  EXPECT_EQ(c.verdict, Verdict::kFail);
  EXPECT_EQ(c.differing_run, 3);
  EXPECT_EQ(c.differing_records, 1);
  EXPECT_GT(c.compared_records, 0);
  EXPECT_NE(c.summary.find("run 3 differs from run 1"), std::string::npos) << c.summary;
}

TEST(Checks, OneUlpInOneDumpedGradientFailsBitwiseAndPassesOneUlp) {
  const Trace baseline = testing::MakeTrace(2, 3);
  Trace arm = baseline;
  float& v = arm.ranks[0].grad_dumps.at(2)[1].values[3];
  v = NextUp(v);
  Tolerance ulps;
  ulps.kind = Tolerance::Kind::kUlps;
  ulps.ulps = 1;
  CheckResult one_ulp = CheckGradients("overlap", arm, "reference", baseline, ulps);
  EXPECT_EQ(one_ulp.verdict, Verdict::kPass) << one_ulp.summary;
  EXPECT_EQ(one_ulp.figures["max_ulps"].get<uint64_t>(), 1u);
  // Bitwise compares digests, which the dump's change does not touch: change the digest too.
  arm.ranks[0].iterations[1].grad_digests[1] ^= 1;
  CheckResult bitwise = CheckGradients("overlap", arm, "reference", baseline, Tolerance{});
  EXPECT_EQ(bitwise.kind, CheckKind::kGradients);
  EXPECT_EQ(bitwise.verdict, Verdict::kFail);
  ASSERT_TRUE(bitwise.difference.has_value());
  EXPECT_EQ(bitwise.difference->iteration, 2);
  EXPECT_EQ(bitwise.difference->param, "b");
  ASSERT_TRUE(bitwise.difference->tensor.has_value());
  EXPECT_EQ(bitwise.difference->tensor->first_index, 3);
  EXPECT_EQ(bitwise.difference->tensor->first_ulps, 1u);
}

TEST(Checks, LossToleranceAdmitsWhatItSaysAndNoMore) {
  const Trace baseline = testing::MakeTrace(1, 3);
  Trace arm = baseline;
  arm.ranks[0].iterations[1].loss += 1e-4f;
  Tolerance loose;
  loose.kind = Tolerance::Kind::kAbsRel;
  loose.atol = 1e-3;
  EXPECT_EQ(CheckLosses("a", arm, "b", baseline, loose).verdict, Verdict::kPass);
  Tolerance tight = loose;
  tight.atol = 1e-5;
  CheckResult c = CheckLosses("a", arm, "b", baseline, tight);
  EXPECT_EQ(c.verdict, Verdict::kFail);
  ASSERT_TRUE(c.difference.has_value());
  EXPECT_EQ(c.difference->iteration, 2);
  EXPECT_EQ(c.difference->record, "loss");
  EXPECT_EQ(CheckLosses("a", arm, "b", baseline, Tolerance{}).verdict, Verdict::kFail);
}

TEST(Checks, MemoryBoundComparesTheRatio) {
  const MemoryBound bound{"overlap", "reference", 0.5};
  CheckResult within = CheckMemory(bound, 40, 100);
  EXPECT_EQ(within.kind, CheckKind::kMemory);
  EXPECT_EQ(within.arm, "overlap");
  EXPECT_EQ(within.verdict, Verdict::kPass);
  EXPECT_DOUBLE_EQ(within.figures["ratio"].get<double>(), 0.4);
  EXPECT_EQ(CheckMemory(bound, 51, 100).verdict, Verdict::kFail);
  EXPECT_EQ(MemoryCheckName(bound), "overlap vs reference: peak memory");
}

// An external arm whose ranks could not count their tensors records -1 peaks (no peak at all):
// the memory checks say so instead of passing a ratio of nothing.
TEST(Checks, MemoryChecksSkipAnArmWithoutPeakMemory) {
  const MemoryBound bound{"python", "reference", 0.5};
  const CheckResult missing = CheckMemory(bound, 0, 100);
  EXPECT_EQ(missing.verdict, Verdict::kSkipped);
  EXPECT_NE(missing.summary.find("no peak memory recorded by python"), std::string::npos)
      << missing.summary;
  EXPECT_EQ(CheckMemory(bound, 40, 0).verdict, Verdict::kSkipped);

  const Trace golden = testing::MakeTrace(2, 2);
  Trace run = golden;
  EXPECT_EQ(CheckGoldenMemory("python", run, golden, 0.05).verdict, Verdict::kPass);
  run.ranks[1].iterations[0].peak_bytes = -1;
  const CheckResult unavailable = CheckGoldenMemory("python", run, golden, 0.05);
  EXPECT_EQ(unavailable.verdict, Verdict::kSkipped);
  EXPECT_NE(unavailable.summary.find("the run recorded no peak memory (rank 1"), std::string::npos)
      << unavailable.summary;
}

TEST(Checks, MemoryModelNeedsAPredictionAndGatesOnTheRelativeError) {
  Trace trace = testing::MakeTrace(2, 2);  // peak 1002 bytes on every rank
  EXPECT_EQ(CheckMemoryModel("a", trace, 0.1).verdict, Verdict::kSkipped);
  for (RankTrace& rank : trace.ranks) {
    rank.attributes[trace_keys::kMemoryModelPredictedPeakBytes] = "1000";
  }
  EXPECT_EQ(CheckMemoryModel("a", trace, 0.1).verdict, Verdict::kPass);
  trace.ranks[1].attributes[trace_keys::kMemoryModelPredictedPeakBytes] = "800";
  CheckResult c = CheckMemoryModel("a", trace, 0.1);
  EXPECT_EQ(c.verdict, Verdict::kFail) << c.summary;
  EXPECT_NEAR(c.figures["worst_relative_error"].get<double>(), 0.2525, 1e-9);
}

TEST(Checks, GoldenOfOtherRecipeSettingsFailsNamingThemAndAMissingOneIsSkipped) {
  Trace run = testing::MakeTrace(1, 2);
  run.attributes[trace_keys::kRecipe] = "# the run\n[model]\nhidden = 8\nlayers = 2\n";
  Trace golden = run;
  EXPECT_EQ(CheckGolden("reference", run, &golden, "").verdict, Verdict::kPass);
  EXPECT_EQ(CheckGolden("reference", run, nullptr, "no golden").verdict, Verdict::kSkipped);
  // Comments, spacing and key order are no setting.
  golden.attributes[trace_keys::kRecipe] = "[model]  # edited\nlayers=2\nhidden   = 8\n";
  EXPECT_EQ(CheckGolden("reference", run, &golden, "").verdict, Verdict::kPass);
  golden.attributes[trace_keys::kRecipe] = "[model]\nhidden = 16\nlayers = 2\nheads = 2\n";
  CheckResult c = CheckGolden("reference", run, &golden, "");
  EXPECT_EQ(c.kind, CheckKind::kGolden);
  EXPECT_EQ(c.verdict, Verdict::kFail);
  EXPECT_NE(c.summary.find("other settings (model.heads: 2 -> (absent); model.hidden: 16 -> 8)"),
            std::string::npos)
      << c.summary;
  // What the run checks and records decides no bit: a golden survives new gates and probes.
  golden.attributes[trace_keys::kRecipe] =
      "[model]\nhidden = 8\nlayers = 2\n[trace]\nprobes = \"nodes\"\n[[compare.overlap]]\n"
      "arm = \"overlap\"\nhidden_at_least = 0.5\n";
  EXPECT_EQ(CheckGolden("reference", run, &golden, "").verdict, Verdict::kPass);
}

TEST(Checks, RecipeSettingChangesIgnoreTheTextAroundTheSettings) {
  EXPECT_TRUE(
      RecipeSettingChanges("a = 1\n[t]\nb = 'x'\n", "# c\na=1\n[t]\nb = \"x\"  # same\n").empty());
  EXPECT_EQ(RecipeSettingChanges("[t]\nb = 1.5\n", "[t]\nb = 2.5\nc = [1, 2]\n"),
            (std::vector<std::string>{"t.b: 1.5 -> 2.5", "t.c: (absent) -> [ 1, 2 ]"}));
  EXPECT_EQ(RecipeSettingChanges("[t\n", "[t]\n").size(), 1u);
}

// A trace whose every iteration had `in_flight` seconds of all-to-all, `exposed` of them
// exposed (the first iteration, a warm-up, is ten times slower and left out).
Trace TraceWithAllToAll(double in_flight, double exposed) {
  Trace trace = testing::MakeTrace(2, 3);
  for (RankTrace& rank : trace.ranks) {
    for (IterationRecord& it : rank.iterations) {
      const double warm_up = it.iteration == 1 ? 10.0 : 1.0;
      it.comm_count = 4;
      it.comm_seconds = in_flight * warm_up;
      it.comm_exposed_seconds = exposed * warm_up * (it.iteration == 1 ? 0.0 : 1.0);
    }
  }
  return trace;
}

TEST(Checks, EveryRunsRecordsDigestIsReportedAndOneBitChangesIt) {
  const Trace a = testing::MakeTrace(2, 3);
  Trace b = testing::MakeTrace(2, 3);
  EXPECT_EQ(RecordsDigest(a), RecordsDigest(b));
  b.ranks[1].iterations[2].grad_digests[0] ^= 1;
  EXPECT_NE(RecordsDigest(a), RecordsDigest(b));
  CheckResult check = CheckReproduces("overlap", {&a, &a, &b});
  EXPECT_EQ(check.verdict, Verdict::kFail);
  ASSERT_EQ(check.figures["run_digests"].size(), 3u);
  EXPECT_EQ(check.figures["run_digests"][0], check.figures["run_digests"][1]);
  EXPECT_NE(check.figures["run_digests"][0], check.figures["run_digests"][2]);
  EXPECT_EQ(check.differing_run, 3);
}

TEST(Checks, OverlapBoundGatesTheWorstRunsHiddenShare) {
  const Trace half = TraceWithAllToAll(0.2, 0.1);
  const Trace most = TraceWithAllToAll(0.2, 0.02);
  EXPECT_DOUBLE_EQ(AllToAllTimeOf(half).hidden_fraction(), 0.5);
  EXPECT_EQ(AllToAllTimeOf(half).count, 2 * 2 * 4);  // 2 ranks x iterations 2..3
  const OverlapBound bound{"overlap", 0.5};
  CheckResult pass = CheckOverlap(bound, {&most, &half});
  EXPECT_EQ(pass.verdict, Verdict::kPass) << pass.summary;
  EXPECT_NE(pass.summary.find("50.0% of all-to-all time hidden (run 2 of 2"), std::string::npos)
      << pass.summary;
  const OverlapBound higher{"overlap", 0.6};
  CheckResult fail = CheckOverlap(higher, {&most, &half});
  EXPECT_EQ(fail.verdict, Verdict::kFail) << fail.summary;
  EXPECT_DOUBLE_EQ(fail.figures["hidden_fraction"].get<double>(), 0.5);
  EXPECT_EQ(CheckOverlap(higher, {&most}).verdict, Verdict::kPass);
  // No all-to-all at all (ep = 1) is no proof of overlap.
  const Trace none = testing::MakeTrace(2, 3);
  CheckResult nothing = CheckOverlap(OverlapBound{"overlap", 0.0}, {&none});
  EXPECT_EQ(nothing.verdict, Verdict::kFail);
  EXPECT_NE(nothing.summary.find("ran no all-to-all"), std::string::npos) << nothing.summary;
}

TEST(Checks, RecomputeCensusGatesTheGrowthBetweenReplaysOfOnePass) {
  // Two passes of 3 segments; each replay's live bytes follow the model's plus a constant offset
  // (the model's offsets cancel), then segment 1 of microbatch 1 is kept: the next replay of that
  // pass holds it on top, 0.6 of a segment beyond the model.
  auto sample = [](int64_t mb, int64_t segment, int64_t live, int64_t model) {
    return ReplayCensusSample{1, 0, mb, segment, live, model, 1000};
  };
  Trace trace = testing::MakeTrace(1, 1);
  trace.ranks[0].replay_census = {sample(0, 2, 5300, 5000), sample(1, 2, 7300, 7000),
                                  sample(0, 1, 5700, 5400), sample(1, 1, 7700, 7400),
                                  sample(0, 0, 6100, 5800), sample(1, 0, 8100 + 1000, 7800 + 400)};
  CheckResult kept = CheckRecomputeCensus("overlap", {&trace});
  EXPECT_EQ(kept.verdict, Verdict::kFail) << kept.summary;
  EXPECT_DOUBLE_EQ(kept.figures["worst"]["excess_segments"].get<double>(), 0.6);
  EXPECT_NE(kept.summary.find("microbatch 1: from segment 1's replay to segment 0's"),
            std::string::npos)
      << kept.summary;
  // Within half a segment: passes.
  trace.ranks[0].replay_census.back().live_bytes = 8100 + 400 + 400;
  CheckResult within = CheckRecomputeCensus("overlap", {&trace});
  EXPECT_EQ(within.verdict, Verdict::kPass) << within.summary;
  EXPECT_EQ(within.figures["replay_pairs"].get<int64_t>(), 4);
  // No pass replayed two segments: nothing to gate.
  Trace none = testing::MakeTrace(1, 1);
  EXPECT_EQ(CheckRecomputeCensus("overlap", {&none}).verdict, Verdict::kSkipped);
}

TEST(Resources, AModelStateBeyondTheMachinesMemoryIsBadInputWithTheEstimate) {
  Recipe recipe = ParseRecipe(
      testing::SmallModelTable(2, 0) + "[parallel]\nep = 2\n[arms.a]\nengine = \"reference\"\n",
      "r.toml");
  const int64_t needed = ModelStateBytes(recipe);
  // Dense parameters once per EP rank, experts once, 16 bytes each.
  EXPECT_GT(needed, 16 * ParameterCount(recipe.model));
  EXPECT_LT(needed, 2 * 16 * ParameterCount(recipe.model));
  MachineResources machine{needed, 64, std::nullopt, ""};
  EXPECT_TRUE(CheckResources(recipe, machine).empty());
  machine.memory_bytes = needed - 1;
  try {
    CheckResources(recipe, machine);
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("r.toml: [model] and [parallel] need at least"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("on each of the ep = 2 ranks"), std::string::npos);
  }
  // Far more threads than cores: a warning with the figures.
  machine.memory_bytes = needed;
  machine.cores = 1;
  recipe.parallel.threads = 4;
  const std::vector<std::string> warnings = CheckResources(recipe, machine);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("2 rank(s) x 4 thread(s) = 8 threads on 1 cores"), std::string::npos)
      << warnings[0];
}

TEST(Resources, ACpuWithoutThePinnedLevelIsBadInputNamingTheLevelAndTheFlags) {
  Recipe recipe = ParseRecipe(testing::SmallModelTable(2, 0) +
                                  "[parallel]\nep = 2\ncpu_isa = \"avx512\"\n"
                                  "[arms.a]\nengine = \"reference\"\n",
                              "r.toml");
  MachineResources machine{
      1LL << 40, 64, std::set<std::string>{"sse4_1", "sse4_2", "avx", "avx2", "fma", "avx512f"},
      "AVX2 CPU"};
  try {
    CheckResources(recipe, machine);
    FAIL() << "a host without avx512bw, avx512vl and avx512dq accepted cpu_isa avx512";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "r.toml: [parallel] cpu_isa \"avx512\" needs the CPU flags avx512bw avx512vl "
                  "avx512dq, which this host (AVX2 CPU) lacks; its flags: avx avx2 avx512f fma "
                  "sse4_1 sse4_2; it runs: sse4_2, avx2, native"),
              std::string::npos)
        << e.what();
  }
  recipe.parallel.cpu_isa = CpuIsa::kAvx2;
  EXPECT_TRUE(CheckResources(recipe, machine).empty());
  recipe.parallel.cpu_isa = CpuIsa::kNative;  // any host runs its own best
  machine.cpu_flags = std::set<std::string>{};
  EXPECT_TRUE(CheckResources(recipe, machine).empty());
}

std::map<std::string, std::string> Provenance() {
  return {{"libtorch_version", "2.11.0"}, {"blas", "mkl 2024.2-Product"},
          {"onednn_version", "3.10.2"},   {"cpu_isa", "avx2"},
          {"mkl_cbwr", "COMPATIBLE"},     {"cpu_flags", "avx512f amx"},
          {"cpu_vendor", "GenuineIntel"}, {"cpu_model", "Intel(R) Xeon(R)"},
          {"compiler", "gcc 12.2.0"},     {"device", "cpu"},
          {"host", "machine-a"},          {"git_revision", "abc"}};
}

TEST(Fingerprint, HostsWithOtherCpusShareAPinnedLevelsFingerprint) {
  const Fingerprint base = MakeFingerprint(Provenance(), 2, 2);
  std::map<std::string, std::string> amd = Provenance();
  amd["cpu_flags"] = "avx avx2 fma";
  amd["cpu_vendor"] = "AuthenticAMD";
  amd["cpu_model"] = "AMD EPYC";
  EXPECT_EQ(MakeFingerprint(amd, 2, 2).key, base.key);
  EXPECT_EQ(base.fields.count("cpu_flags"), 0u);
  // Another level is another fingerprint; at "native" the CPU itself counts.
  std::map<std::string, std::string> sse = Provenance();
  sse["cpu_isa"] = "sse4_2";
  EXPECT_EQ(base.DifferingFields(MakeFingerprint(sse, 2, 2)), "cpu_isa");
  std::map<std::string, std::string> native = Provenance();
  native["cpu_isa"] = "native";
  std::map<std::string, std::string> native_amd = amd;
  native_amd["cpu_isa"] = "native";
  EXPECT_EQ(MakeFingerprint(native, 2, 2).DifferingFields(MakeFingerprint(native_amd, 2, 2)),
            "cpu_flags, cpu_vendor");
}

TEST(Fingerprint, KeyFollowsTheFactsThatDecideBitsOnly) {
  const Fingerprint base = MakeFingerprint(Provenance(), 2, 2);
  EXPECT_EQ(base.key.rfind("cpu-", 0), 0u) << base.key;
  EXPECT_EQ(base.key.size(), 16u) << base.key;
  EXPECT_EQ(MakeFingerprint(Provenance(), 2, 2).key, base.key);
  std::map<std::string, std::string> other_host = Provenance();
  other_host["host"] = "machine-b";
  other_host["git_revision"] = "def";
  EXPECT_EQ(MakeFingerprint(other_host, 2, 2).key, base.key);
  std::map<std::string, std::string> other_blas = Provenance();
  other_blas["blas"] = "libopenblas.so.0";
  const Fingerprint blas = MakeFingerprint(other_blas, 2, 2);
  EXPECT_NE(blas.key, base.key);
  EXPECT_EQ(base.DifferingFields(blas), "blas");
  EXPECT_EQ(base.DifferingFields(MakeFingerprint(Provenance(), 1, 4)),
            "threads_per_rank, world_size");
  EXPECT_EQ(base.fields.count("gpu_name"), 0u);
}

TEST(Fingerprint, GpuRunsAddTheGpuAndItsLibraries) {
  std::map<std::string, std::string> gpu = Provenance();
  gpu["device"] = "cuda";
  gpu["gpu_name"] = "NVIDIA H200";
  gpu["cublas"] = "13.0";
  const Fingerprint f = MakeFingerprint(gpu, 1, 1);
  EXPECT_EQ(f.key.rfind("cuda-", 0), 0u) << f.key;
  EXPECT_EQ(f.fields.at("gpu_name"), "NVIDIA H200");
  EXPECT_EQ(f.fields.at("nccl"), "unknown");
}

TEST(Fingerprint, TraceFingerprintReadsTheRecordedProvenance) {
  Trace trace = testing::MakeTrace(2, 1);
  for (const auto& [key, value] : Provenance()) {
    trace.ranks[0].attributes[trace_keys::kProvenancePrefix + key] = value;
  }
  trace.attributes[trace_keys::kThreadsPerRank] = "2";
  EXPECT_EQ(TraceFingerprint(trace).key, MakeFingerprint(Provenance(), 2, 2).key);
}

TEST(MatrixExpansion, ShippedMatrixIsTheFullProductWithAxesInNameOrder) {
  const Matrix m = LoadMatrix(testing::SourceDir() + "/recipes/matrix.toml");
  // A TOML table has no order: the axes come in name order, values in the file's order.
  EXPECT_EQ(m.axes,
            (std::vector<std::string>{"dispatcher", "mtp_layers", "precision", "recompute"}));
  ASSERT_EQ(m.cells.size(), 3u * 4u * 2u * 2u);
  EXPECT_EQ(m.cells.front().name, "alltoall-mtp0-bf16-uniform1");
  EXPECT_EQ(m.cells.back().name, "flex-mtp1-mxfp8-block3");
  EXPECT_NE(m.cells.front().recipe_text.find("matrix-alltoall-mtp0-bf16-uniform1"),
            std::string::npos);
  int ci = 0;
  for (const MatrixCell& cell : m.cells) ci += CellMatches(m, cell, "ci");
  EXPECT_EQ(ci, 6);
  EXPECT_TRUE(CellMatches(m, m.cells.front(), "precision=bf16|mxfp8, dispatcher=alltoall"));
  EXPECT_FALSE(CellMatches(m, m.cells.back(), "precision=bf16|mxfp8, dispatcher=alltoall"));
  EXPECT_THROW(CellMatches(m, m.cells.front(), "colour=red"), InputError);
  EXPECT_THROW(CellMatches(m, m.cells.front(), "nonsense"), InputError);
}

TEST(MatrixExpansion, AProductBeyondTheCellLimitIsRefusedBeforeItIsExpanded) {
  // Two axes of 70 values would be 4900 cells; the reader refuses before making any.
  const std::string dir = testing::SourceDir() + "/recipes";
  std::string recompute, mtp;
  for (int i = 1; i <= 70; ++i) {
    recompute += (i > 1 ? ", \"uniform-" : "\"uniform-") + std::to_string(i) + "\"";
    mtp += (i > 1 ? ", " : "") + std::to_string(i - 1);
  }
  const std::string text = "[matrix]\nbase = \"matrix_base.toml\"\n[matrix.axes]\nrecompute = [" +
                           recompute + "]\nmtp_layers = [" + mtp + "]\n";
  try {
    ParseMatrix(text, dir + "/big.toml");
    ADD_FAILURE() << "4900 cells were expanded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("big.toml: [matrix.axes] give more than 4096 cells"),
              std::string::npos)
        << e.what();
  }
}

TEST(MatrixExpansion, AMatrixOrBaseThatIsNoSmallFileIsBadInput) {
  // /dev/zero never ends: refused as a device before any read. A regular file over the bound is
  // refused by its size, without reading it whole.
  testing::TempDir dir;
  const std::string big = dir.File("big.toml");
  {
    std::ofstream out(big, std::ios::binary);
    out << std::string((1 << 20) + 1, '#');
  }
  for (const auto& [path, message] : std::vector<std::pair<std::string, std::string>>{
           {"/dev/zero",
            "/dev/zero: is not a regular file (a FIFO, socket or device), expected a "},
           {big, big + ": larger than 1 MiB, not a "}}) {
    try {
      LoadMatrix(path);
      ADD_FAILURE() << path << " read as a matrix";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message + (path == big ? "matrix" : "matrix file")),
                std::string::npos)
          << e.what();
    }
    try {
      LoadRecipe(path);
      ADD_FAILURE() << path << " read as a recipe";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message + (path == big ? "recipe" : "recipe file")),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace bitparity
