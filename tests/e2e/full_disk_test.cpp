// A full disk: every command that writes says "no space left on <path>" with the errno, exits 3
// (never a crash in a library's clean-up), and leaves only whole files: no temporary, no part of
// a trace or report, and an older file at the same path unchanged. Each case runs bitparity in a
// private mount namespace (`unshare -rm`) on a tmpfs of a few KiB; where the machine forbids
// user namespaces the tests say so and are skipped.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <pugixml.hpp>
#include <set>
#include <string>

#include "comm/rank_protocol.h"
#include "config/recipe.h"
#include "core/errors.h"
#include "harness/process.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"
#include "tests/support/trace_builder.h"
#include "trace/trace.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

std::string RecipeToml() {
  return testing::RecipeBuilder(3, 1)
      .Set("name", "small")
      .Set("parallel.timeout_s", 60)
      .Batches(8, 4)
      .SetList("trace.dump_grads_at", {4})
      .Arm("reference", "reference")
      .Text();
}

bool UserNamespacesWork() {
  ProcessOptions probe;
  probe.executable = "unshare";
  probe.arguments = {"-rm", "true"};
  try {
    return RunProcess(probe) == 0;
  } catch (const std::exception&) {
    return false;
  }
}

// Runs `command` (a shell command line; $BITPARITY is the binary) with `mount_point` a fresh
// tmpfs of `size`, then copies what the tmpfs holds to `copy_to`, where the test can look.
testing::CommandResult RunOnSmallDisk(const std::string& mount_point, const std::string& size,
                                      const std::string& command, const std::string& copy_to,
                                      const std::string& prepare = "") {
  fs::create_directories(mount_point);
  fs::create_directories(copy_to);
  return testing::RunWithBitparityVariable(
      "unshare",
      {"-rm", "sh", "-c",
       "mount -t tmpfs -o size=" + size + " tmpfs '" + mount_point + "' || exit 99\n" + prepare +
           "\n" + command + "\nrc=$?\ncp -a '" + mount_point + "/.' '" + copy_to + "/'\nexit $rc"},
      copy_to + ".log");
}

// Two rank parts of a synthetic trace of 300 iterations in `folder`, each over 64 KiB: what
// `bitparity merge` joins.
void WriteTwoRankParts(const std::string& folder) {
  const Trace whole = testing::MakeTrace(2, 300);
  fs::create_directories(folder);
  for (int64_t r = 0; r < 2; ++r) {
    Trace part;
    part.attributes = {{trace_keys::kRecipe, "synthetic"},
                       {trace_keys::kRecipeDigest, RecipeDigest("synthetic")},
                       {trace_keys::kArm, "reference"},
                       {trace_keys::kWorldSize, "2"}};
    part.ranks.push_back(whole.ranks[static_cast<size_t>(r)]);
    WriteTrace(folder + "/" + RankPartFileName(r), part);
  }
}

// Every file under `dir` is whole: no temporary or parts folder is left, each trace reads, each
// JSON and XML file parses.
void ExpectOnlyWholeFiles(const std::string& dir) {
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << entry.path();
    EXPECT_EQ(name.find(".parts."), std::string::npos) << entry.path();
    EXPECT_EQ(name.find(".write-probe."), std::string::npos) << entry.path();
    if (!entry.is_regular_file()) continue;
    const std::string path = entry.path().string();
    const std::string extension = entry.path().extension().string();
    if (extension == ".h5") {
      EXPECT_NO_THROW(ReadTrace(path)) << path;
    } else if (extension == ".json") {
      EXPECT_TRUE(nlohmann::json::accept(testing::ReadFile(path))) << path;
    } else if (extension == ".xml") {
      pugi::xml_document doc;
      EXPECT_TRUE(doc.load_file(path.c_str())) << path;
    }
  }
}

class FullDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!UserNamespacesWork()) {
      GTEST_SKIP() << "`unshare -rm` is not allowed here: no private tmpfs to fill";
    }
  }
  testing::TempDir dir_;
};

// The run fails where the disk fills: before training (the output folder), at a rank's trace part
// or at the reports. Whatever the point, exit 3 and the path named, and only whole files left.
TEST_F(FullDiskTest, RunNamesThePathExitsThreeAndLeavesOnlyWholeFiles) {
  const std::string recipe = dir_.Write("small.toml", RecipeToml());
  std::set<std::string> named;  // the kinds of path named across the sizes
  for (const char* size : {"4k", "12k", "24k", "64k"}) {
    SCOPED_TRACE(size);
    const std::string copy = dir_.File(std::string("copy-") + size);
    testing::CommandResult run =
        RunOnSmallDisk(dir_.File("disk"), size,
                       "\"$BITPARITY\" run '" + recipe + "' --out '" + dir_.File("disk/out") +
                           "' --arms reference --repeats 1 --no-golden --quiet",
                       copy);
    EXPECT_EQ(run.exit_code, 3) << run.output;
    EXPECT_EQ(run.output.find("signal"), std::string::npos) << run.output;
    const size_t at = run.output.find("no space left on " + dir_.File("disk/out"));
    ASSERT_NE(at, std::string::npos) << run.output;
    EXPECT_NE(run.output.find("(errno 28: No space left on device)", at), std::string::npos)
        << run.output;
    const std::string path = run.output.substr(at, run.output.find(' ', at + 20) - at);
    named.insert(path.find("/rank_0000") != std::string::npos ? "rank part"  // the first to fail
                 : path.find("report.json") != std::string::npos ||
                         path.find("junit.xml") != std::string::npos
                     ? "report"
                     : path);
    ExpectOnlyWholeFiles(copy);
  }
  EXPECT_TRUE(named.count("rank part")) << ::testing::PrintToString(named);
  EXPECT_TRUE(named.count("report")) << ::testing::PrintToString(named);
}

// `bitparity merge` onto a disk that holds the previous merged trace but not the new one: exit 3,
// the path named, and the previous trace unchanged to the byte.
TEST_F(FullDiskTest, MergeKeepsThePreviousTraceWhenTheNewOneDoesNotFit) {
  WriteTwoRankParts(dir_.File("parts"));
  Trace previous = testing::MakeTrace(1, 2);
  previous.attributes[trace_keys::kArm] = "previous";
  WriteTrace(dir_.File("previous.h5"), previous);
  const std::string previous_bytes = testing::ReadFile(dir_.File("previous.h5"));
  // The tmpfs of 64 KiB takes the previous trace, not the new one (each part alone is larger).
  ASSERT_LT(previous_bytes.size(), 48u * 1024);
  ASSERT_GT(fs::file_size(dir_.File("parts/" + RankPartFileName(0))), 64u * 1024);

  const std::string copy = dir_.File("copy");
  testing::CommandResult merge = RunOnSmallDisk(
      dir_.File("disk"), "64k",
      "\"$BITPARITY\" merge '" + dir_.File("parts") + "' --out '" + dir_.File("disk/merged.h5") +
          "'",
      copy,
      "cp '" + dir_.File("previous.h5") + "' '" + dir_.File("disk/merged.h5") + "' || exit 98");
  EXPECT_EQ(merge.exit_code, 3) << merge.output;
  EXPECT_NE(merge.output.find("no space left on " + dir_.File("disk/merged.h5") +
                              " (errno 28: No space left on device)"),
            std::string::npos)
      << merge.output;
  EXPECT_EQ(merge.output.find("signal"), std::string::npos) << merge.output;
  EXPECT_EQ(testing::ReadFile(copy + "/merged.h5"), previous_bytes);
  ExpectOnlyWholeFiles(copy);
}

// An output folder on a read-only file system is bad input for every command that writes one:
// exit 2 naming the path, before any training, nothing written.
TEST_F(FullDiskTest, ReadOnlyOutputIsBadInputForEveryCommand) {
  const std::string recipe = dir_.Write("small.toml", RecipeToml());
  WriteTwoRankParts(dir_.File("parts"));
  const std::string disk = dir_.File("disk");
  const std::string bitparity = "\"$BITPARITY\" ";
  testing::CommandResult r = RunOnSmallDisk(
      disk, "64k",
      bitparity + "run '" + recipe + "' --out '" + disk +
          "/run' --no-golden --quiet; echo run=$?\n" + bitparity + "arm '" + recipe +
          "' --arm reference --out '" + disk + "/arm.h5' --quiet; echo arm=$?\n" + bitparity +
          "arm '" + recipe + "' --arm reference --out '" + dir_.File("arm.h5") + "' --log-dir '" +
          disk + "/logs' --quiet; echo logs=$?\n" + bitparity + "merge '" + dir_.File("parts") +
          "' --out '" + disk + "/merged.h5'; echo merge=$?",
      dir_.File("copy"), "mount -o remount,ro '" + disk + "' || exit 97");
  for (const char* code : {"run=2", "arm=2", "logs=2", "merge=2"}) {
    EXPECT_NE(r.output.find(code), std::string::npos) << code << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("--out " + disk + "/arm.h5: cannot write in " + disk +
                          ": Read-only file system"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the log directory " + disk + "/logs: cannot write in " + disk),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_.File("arm.h5")));
  EXPECT_TRUE(fs::is_empty(dir_.File("copy")));
}

// Runs `command` (a shell command line; $BITPARITY is the binary) under a file-size limit of
// `kib` KiB (`ulimit -f`).
testing::CommandResult RunUnderFileSizeLimit(int kib, const std::string& command,
                                             const std::string& log) {
  return testing::RunWithBitparityVariable(
      "bash", {"-c", "ulimit -f " + std::to_string(kib) + " || exit 99\n" + command}, log);
}

// A file-size limit is a full disk by another name: the write that crosses it fails (EFBIG, not
// SIGXFSZ killing the process), exit 3 names the file, an older file stays as it was and no
// temporary is left; in `run`, the rank whose part crossed it is named.
TEST(FileSizeLimit, MergeAndRunNameTheFileExitThreeAndLeaveOnlyWholeFiles) {
  testing::TempDir dir;
  WriteTwoRankParts(dir.File("parts"));
  ASSERT_GT(fs::file_size(dir.File("parts/" + RankPartFileName(0))), 64u * 1024);
  fs::create_directories(dir.File("out"));
  WriteTrace(dir.File("out/merged.h5"), testing::MakeTrace(1, 2));
  const std::string previous = testing::ReadFile(dir.File("out/merged.h5"));
  const testing::CommandResult merge = RunUnderFileSizeLimit(
      64,
      "\"$BITPARITY\" merge '" + dir.File("parts") + "' --out '" + dir.File("out/merged.h5") + "'",
      dir.File("merge.log"));
  EXPECT_EQ(merge.exit_code, 3) << merge.output;
  EXPECT_NE(merge.output.find("file size limit reached writing " + dir.File("out/merged.h5") +
                              " (errno 27: File too large; raise `ulimit -f`)"),
            std::string::npos)
      << merge.output;
  EXPECT_EQ(merge.output.find("signal"), std::string::npos) << merge.output;
  EXPECT_EQ(testing::ReadFile(dir.File("out/merged.h5")), previous);
  ExpectOnlyWholeFiles(dir.File("out"));

  const std::string recipe = dir.Write("small.toml", RecipeToml());
  const testing::CommandResult run =
      RunUnderFileSizeLimit(64,
                            "\"$BITPARITY\" run '" + recipe + "' --out '" + dir.File("run") +
                                "' --arms reference --repeats 1 --no-golden --quiet",
                            dir.File("run.log"));
  EXPECT_EQ(run.exit_code, 3) << run.output;
  EXPECT_NE(run.output.find("file size limit reached writing " + dir.File("run")),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("File size limit exceeded"), std::string::npos) << run.output;
  ExpectOnlyWholeFiles(dir.File("run"));
}

}  // namespace
}  // namespace bitparity
