// External arms (docs/external-arms.md): an arm may be any program that trains and writes
// bitparity's trace. The PyTorch example's variants run through `bitparity run` with the verdicts
// its README states; a killed Python rank is an infrastructure error naming it with no process
// left behind; a program that does not exist is refused before any rank starts; and the Python
// recorder's digests are the C++ recorder's, byte for byte, on every dtype a trace holds.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "harness/external_command.h"
#include "harness/process.h"
#include "tests/support/junit_reader.h"
#include "tests/support/test_support.h"
#include "trace/digest.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

using testing::ReadJunit;

// The ranks import the recorder of this tree, not whichever one the environment has installed.
std::vector<std::pair<std::string, std::string>> TreeRecorder() {
  return {{"PYTHONPATH", testing::SourceDir() + "/python"}};
}

std::string Example(const std::string& file) {
  return testing::SourceDir() + "/examples/torch_moe/" + file;
}

// The verdict of one check in a run's junit.xml ("pass", "failure", "error", "skipped").
std::string Verdict(const std::string& junit_path, const std::string& check) {
  auto junit = ReadJunit(junit_path);
  auto it = junit->cases.find(check);
  return it == junit->cases.end() ? "absent" : it->second.first;
}

// The example README's verdicts: checkpoint and overlap train bit for bit like eager; and the
// recorder's probes leave the training's bits as they are (a probed run equals an unprobed one).
TEST(ExternalArm, ExampleVariantsAreBitIdenticalAndProbesChangeNothing) {
  testing::TempDir dir;
  testing::CommandResult r = testing::RunBitparity(
      {"run", Example("recipe.toml"), "--out", dir.File("out"), "--no-golden"}, TreeRecorder());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string junit = dir.File("out/junit.xml");
  for (const char* arm : {"eager", "checkpoint", "overlap"}) {
    EXPECT_EQ(Verdict(junit, std::string(arm) + " reproduces itself"), "pass") << arm;
  }
  for (const char* arm : {"checkpoint", "overlap"}) {
    for (const char* what : {"loss", "gradients", "parameters"}) {
      const std::string check = std::string(arm) + " vs eager: " + what;
      EXPECT_EQ(Verdict(junit, check), "pass") << check << "\n" << r.output;
    }
  }
  // Peak memory is the counting allocator's (core/cpu_memory_library.cpp), not unavailable; and
  // recomputing each layer holds less at the peak than keeping every activation.
  auto peak = [&](const std::string& arm) {
    const Trace trace = ReadTrace(dir.File("out/" + arm + "/run1/trace.h5"));
    EXPECT_EQ(trace.ranks.at(0).attributes.count("memory"), 0u) << arm;
    return trace.ranks.at(0).iterations.at(1).peak_bytes;
  };
  EXPECT_GT(peak("eager"), 0);
  EXPECT_LT(peak("checkpoint"), peak("eager"));

  testing::CommandResult probed =
      testing::RunBitparity({"run", Example("recipe.toml"), "--arms", "eager", "--probes",
                             "--repeats", "1", "--out", dir.File("probed"), "--no-golden"},
                            TreeRecorder());
  ASSERT_EQ(probed.exit_code, 0) << probed.output;
  testing::CommandResult diff = testing::RunBitparity(
      {"diff", dir.File("out/eager/run1/trace.h5"), dir.File("probed/eager/run1/trace.h5")});
  EXPECT_EQ(diff.exit_code, 0) << "probes changed the bits of the training they watch:\n"
                               << diff.output;
}

TEST(ExternalArm, ExampleWrongVariantFailsAndNamesTheModule) {
  testing::TempDir dir;
  testing::CommandResult r = testing::RunBitparity(
      {"run", Example("recipe_wrong.toml"), "--out", dir.File("out"), "--no-golden"},
      TreeRecorder());
  ASSERT_EQ(r.exit_code, 1) << r.output;
  const std::string junit = dir.File("out/junit.xml");
  EXPECT_EQ(Verdict(junit, "wrong reproduces itself"), "pass") << r.output;
  EXPECT_EQ(Verdict(junit, "wrong vs eager: gradients"), "failure") << r.output;
  EXPECT_EQ(Verdict(junit, "wrong vs eager: parameters"), "failure") << r.output;
  // The README's verdict: the first difference is the combine of layer 1's MoE, on both ranks.
  for (const char* rank : {"rank 0", "rank 1"}) {
    EXPECT_NE(r.output.find(std::string(rank) +
                            ": first divergent operation: iteration 1, microbatch 0, chunk 0, "
                            "layers.1.moe.combine, Combine forward, output 0"),
              std::string::npos)
        << rank << "\n"
        << r.output;
  }
}

TEST(ExternalArm, KilledPythonRankIsAnErrorNamingItAndLeavesNoProcess) {
  testing::TempDir dir;
  dir.Write("killed.py",
            "import os, signal, time\n"
            "import bitparity\n"
            "recorder = bitparity.Recorder.from_env()\n"
            "if recorder.rank == 1:\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "time.sleep(600)\n");
  const std::string recipe = dir.Write("killed.toml",
                                       "name = \"killed\"\n"
                                       "[parallel]\nep = 2\ntimeout_s = 60\n"
                                       "[arms.python]\ncommand = [\"{python}\", \"killed.py\"]\n");
  testing::CommandResult r = testing::RunBitparity(
      {"run", recipe, "--out", dir.File("out"), "--no-golden"}, TreeRecorder());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("rank 1 was killed by signal 9"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 60) << "the launcher waited for the timeout instead of the dead rank";
  const std::vector<int64_t> groups = testing::RankProcessGroups(dir.File("out/python/run1/logs"));
  EXPECT_FALSE(groups.empty()) << "no rank log names its process group";
  for (int64_t pgid : groups) {
    EXPECT_TRUE(testing::ProcessesInGroup(pgid).empty())
        << "a process of the ranks' group " << pgid << " outlived the launcher";
  }
}

TEST(ExternalArm, MissingProgramIsRefusedBeforeAnyRankStarts) {
  testing::TempDir dir;
  const std::string recipe =
      dir.Write("missing.toml",
                "name = \"missing\"\n"
                "[arms.python]\ncommand = [\"no-such-program-bitparity\", \"train.py\"]\n");
  testing::CommandResult r = testing::RunBitparity({"run", recipe, "--out", dir.File("out")});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("[arms.python] command: 'no-such-program-bitparity' is not found"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir.File("out"))) << "an output folder was made for a refused recipe";
}

TEST(ExternalArm, RecipeRefusesAMalformedExternalArm) {
  const std::pair<std::string, std::string> cases[] = {
      {"command = [\"{python}\", \"train.py\"]\nengine = \"overlap\"\n",
       "[arms.python] command is for external arms"},
      {"command = [\"{python}\", \"train.py\"]\n[arms.python.precision]\nrecipe = \"fp32\"\n",
       "[arms.python] precision does not apply to an external arm"},
      {"engine = \"external\"\n", "[arms.python] engine \"external\" needs command"},
      {"command = []\n", "[arms.python] command must be a non-empty array of strings"},
      {"command = [\"train.py\", 3]\n",
       "[arms.python] command must contain only non-empty strings, found integer 3"},
  };
  for (const auto& [arm, message] : cases) {
    testing::TempDir dir;
    const std::string recipe = dir.Write("bad.toml", "name = \"bad\"\n[arms.python]\n" + arm);
    testing::CommandResult r = testing::RunBitparity({"run", recipe, "--out", dir.File("out")});
    EXPECT_EQ(r.exit_code, 2) << arm << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << arm << r.output;
    EXPECT_FALSE(fs::exists(dir.File("out"))) << arm;
  }
}

// The golden of an external baseline is keyed by the fingerprint its ranks record (asked of the
// program before any training): recorded once, matched by the next run, and failed by a run whose
// program computes something else under the same recipe name.
TEST(ExternalArm, ExternalBaselineGoldenIsRecordedMatchedAndCatchesAChange) {
  testing::TempDir dir;
  std::string text = testing::ReadFile(Example("recipe.toml"));
  const std::string program = "\"" + Example("train.py") + "\"";
  for (size_t at = text.find("\"train.py\""); at != std::string::npos;
       at = text.find("\"train.py\"", at + program.size())) {
    text.replace(at, std::strlen("\"train.py\""), program);
  }
  const std::string recipe = dir.Write("golden.toml", text);
  const std::vector<std::string> common = {"--arms", "eager", "--golden-dir", dir.File("goldens")};
  auto run = [&](const std::string& recipe_path, const std::string& out,
                 std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", recipe_path, "--out", dir.File(out)};
    args.insert(args.end(), common.begin(), common.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::RunBitparity(args, TreeRecorder());
  };
  testing::CommandResult recorded = run(recipe, "recorded", {"--update-golden"});
  ASSERT_EQ(recorded.exit_code, 0) << recorded.output;
  ASSERT_TRUE(fs::is_directory(dir.File("goldens/torch_moe"))) << recorded.output;

  testing::CommandResult matched = run(recipe, "matched", {});
  ASSERT_EQ(matched.exit_code, 0) << matched.output;
  EXPECT_EQ(Verdict(dir.File("matched/junit.xml"), "golden: eager"), "pass") << matched.output;

  std::string changed_text = text;
  const size_t eager = changed_text.find("\"--variant\", \"eager\"");
  ASSERT_NE(eager, std::string::npos);
  changed_text.replace(eager, std::strlen("\"--variant\", \"eager\""), "\"--variant\", \"wrong\"");
  const std::string changed = dir.Write("changed.toml", changed_text);
  testing::CommandResult caught = run(changed, "caught", {});
  EXPECT_EQ(caught.exit_code, 1) << caught.output;
  EXPECT_EQ(Verdict(dir.File("caught/junit.xml"), "golden: eager"), "failure") << caught.output;
}

// Every dtype a trace holds, made by the same operations on both sides: the C++ recorder's digest
// (trace/node_probes.cpp: XXH3 over the contiguous CPU bytes) and dtype name against the Python
// recorder's, read back from the trace file each side wrote.
const std::vector<std::pair<std::string, at::ScalarType>> kTraceDtypes = {
    {"float32", at::kFloat},
    {"float64", at::kDouble},
    {"float16", at::kHalf},
    {"bfloat16", at::kBFloat16},
    {"int64", at::kLong},
    {"int32", at::kInt},
    {"int16", at::kShort},
    {"int8", at::kChar},
    {"uint8", at::kByte},
    {"bool", at::kBool},
    {"float8_e4m3fn", at::kFloat8_e4m3fn},
    {"float8_e5m2", at::kFloat8_e5m2}};

at::Tensor ParityTensor(at::ScalarType dtype) {
  return at::arange(0, 40, at::kDouble).mul(0.37).sub(7.0).reshape({5, 8}).to(dtype);
}

TEST(ExternalArm, PythonDigestsAreTheCppRecordersOnEveryDtype) {
  testing::TempDir dir;
  std::string python_rows;
  for (const auto& [python_name, dtype] : kTraceDtypes) {
    python_rows += "    ('" + python_name + "', torch." + python_name + "),\n";
  }
  dir.Write("digests.py",
            "import sys\n"
            "import torch\n"
            "from bitparity.digest import dtype_name, tensor_digest\n"
            "from bitparity.trace_file import ProbeRow, RankPart, join_shape, write_part\n"
            "rows = []\n"
            "for slot, (name, dtype) in enumerate([\n" +
                python_rows +
                "]):\n"
                "    t = torch.arange(0, 40, dtype=torch.float64).mul(0.37).sub(7.0)"
                ".reshape(5, 8).to(dtype)\n"
                "    for view, tensor in enumerate([t, t.t()]):\n"
                "        rows.append(ProbeRow(iteration=1, microbatch=0, chunk=0, slot=2 * slot + "
                "view, digest=tensor_digest(tensor), layer=name, node='parity', "
                "phase='forward', dtype=dtype_name(tensor.dtype), "
                "shape=join_shape(tensor.shape)))\n"
                "columns = {name: [0] for name in ('iteration', 'loss', 'lm_loss', 'mtp_loss', "
                "'aux_loss', 'grad_norm', 'learning_rate', 'peak_bytes', 'end_bytes', "
                "'step_seconds', 'record_seconds')}\n"
                "columns['iteration'] = [1]\n"
                "part = RankPart(rank=0, file_attributes={'world_size': '1', 'arm': 'parity', "
                "'recipe': ''}, rank_attributes={}, param_names=[], param_shapes=[], "
                "columns=columns, grad_digests=[[]], param_digests=[[]], grad_dumps={}, "
                "probes=rows)\n"
                "write_part(sys.argv[1], part)\n");
  ProcessOptions python;
  python.executable = ExternalPython();
  python.arguments = {dir.File("digests.py"), dir.File("python.h5")};
  python.set_environment = {{"PYTHONPATH", testing::SourceDir() + "/python"}};
  python.output_path = dir.File("python.log");
  ChildProcess child = ChildProcess::Start(python);
  child.Wait();
  ASSERT_TRUE(WIFEXITED(child.wait_status()) && WEXITSTATUS(child.wait_status()) == 0)
      << testing::ReadFile(dir.File("python.log"));

  // The C++ recorder's rows of the same tensors, through a trace file of its own.
  Trace cpp;
  cpp.attributes = {{"world_size", "1"}, {"arm", "parity"}};
  cpp.ranks.emplace_back();
  for (const auto& [name, dtype] : kTraceDtypes) {
    const at::Tensor t = ParityTensor(dtype);
    for (const at::Tensor& view : {t, t.t()}) {
      const at::Tensor bytes = view.contiguous();
      ProbeRecord row;
      row.iteration = 1;
      row.slot = static_cast<int64_t>(cpp.ranks[0].probes.size());
      row.digest = Digest(bytes.data_ptr(), bytes.numel() * bytes.element_size());
      row.layer = name;
      row.node = "parity";
      row.phase = "forward";
      row.dtype = std::string(c10::toString(view.scalar_type()));
      row.shape = view.sizes().vec();
      cpp.ranks[0].probes.push_back(row);
    }
  }
  WriteTrace(dir.File("cpp.h5"), cpp);

  const std::vector<ProbeRecord> from_python =
      ReadTrace(dir.File("python.h5"), /*require_complete=*/false).ranks.at(0).probes;
  const std::vector<ProbeRecord> from_cpp =
      ReadTrace(dir.File("cpp.h5"), /*require_complete=*/false).ranks.at(0).probes;
  ASSERT_EQ(from_python.size(), 2 * kTraceDtypes.size());
  ASSERT_EQ(from_cpp.size(), from_python.size());
  for (size_t i = 0; i < from_cpp.size(); ++i) {
    const std::string which = from_cpp[i].layer + (i % 2 ? " transposed" : "");
    EXPECT_EQ(from_python[i].layer, from_cpp[i].layer) << which;
    EXPECT_EQ(from_python[i].digest, from_cpp[i].digest) << which;
    EXPECT_EQ(from_python[i].dtype, from_cpp[i].dtype) << which;
    EXPECT_EQ(from_python[i].shape, from_cpp[i].shape) << which;
  }
  // The digests tell the tensors apart: a check that compared nothing would not.
  EXPECT_NE(from_cpp[0].digest, from_cpp[1].digest);
  EXPECT_NE(from_cpp[0].digest, from_cpp[2].digest);
}

}  // namespace
}  // namespace bitparity
