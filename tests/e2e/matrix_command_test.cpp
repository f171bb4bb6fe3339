// `bitparity matrix`: the CI subset of the shipped matrix passes, with one JUnit testsuite per
// cell; cells whose configuration breaks a rule are reported as skipped with the reason;
// filters select cells by axis values; bad matrix files are bad input.

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <pugixml.hpp>
#include <string>
#include <vector>

#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"

namespace bitparity {
namespace {

TEST(MatrixCommand, ShippedMatrixCiSubsetPasses) {
  testing::TempDir dir;
  testing::CommandResult r =
      testing::RunBitparity({"matrix", testing::SourceDir() + "/recipes/matrix.toml", "--filter",
                             "ci", "--out", dir.File("m")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  pugi::xml_document junit;
  ASSERT_TRUE(junit.load_file(dir.File("m/junit.xml").c_str()));
  size_t suites = 0;
  for (pugi::xml_node s : junit.child("testsuites").children("testsuite")) {
    ++suites;
    EXPECT_EQ(std::string(s.attribute("failures").value()), "0");
  }
  EXPECT_EQ(suites, 6u);  // 3 precisions x 2 recompute settings
  nlohmann::json report = nlohmann::json::parse(testing::ReadFile(dir.File("m/report.json")));
  EXPECT_EQ(report["cells"].size(), 6u);
  EXPECT_EQ(report["exit_code"], 0);
  EXPECT_NE(r.output.find("cells x checks"), std::string::npos);
  // One page over the cells: a row each and every cell's loss curve.
  const std::string html = testing::ReadFile(dir.File("m/report.html"));
  EXPECT_NE(html.find("id=\"cell-table\""), std::string::npos);
  EXPECT_NE(html.find("id=\"matrix-loss-chart\""), std::string::npos);
  size_t rows = 0;
  for (size_t at = html.find("<td class=\"verdict\">PASS"); at != std::string::npos;
       at = html.find("<td class=\"verdict\">PASS", at + 1)) {
    ++rows;
  }
  EXPECT_EQ(rows, 6u);
}

std::string BaseToml() {
  return testing::RecipeBuilder(2, 0)
      .Batches(8, 2)
      .Arm("reference", "reference")
      .Arm("overlap", "overlap")
      .Text();
}

TEST(MatrixCommand, InvalidCellsAreSkippedWithTheReasonAndFiltersSelect) {
  testing::TempDir dir;
  dir.Write("base.toml", BaseToml());
  const std::string matrix = dir.Write("m.toml", R"(
[matrix]
base = "base.toml"
[matrix.axes]
recompute = ["uniform-2", "block-1"]
mtp_layers = [0, 1]
[matrix.filters]
mtp = "mtp_layers=1"
)");
  testing::CommandResult r = testing::RunBitparity(
      {"matrix", matrix, "--filter", "mtp", "--out", dir.File("out"), "--repeats", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json report = nlohmann::json::parse(testing::ReadFile(dir.File("out/report.json")));
  ASSERT_EQ(report["cells"].size(), 2u);  // the filter kept the two MTP cells
  bool saw_skip = false;
  for (const auto& cell : report["cells"]) {
    if (cell["values"]["recompute"] == "uniform-2") {
      const auto& c = cell["checks"]["cell"];
      EXPECT_EQ(c["verdict"], "skipped");
      EXPECT_NE(c["summary"].get<std::string>().find("num_layers must be 1"), std::string::npos)
          << c["summary"];
      saw_skip = true;
    } else {
      EXPECT_EQ(cell["checks"]["overlap vs reference: gradients"]["verdict"], "pass");
    }
  }
  EXPECT_TRUE(saw_skip);
  // An expression filter.
  testing::CommandResult one =
      testing::RunBitparity({"matrix", matrix, "--filter", "recompute=block-1, mtp_layers=0",
                             "--out", dir.File("one"), "--repeats", "1"});
  EXPECT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("1 of 4 cells selected"), std::string::npos) << one.output;
}

// The pipeline axis: an even split by ppP-vppV and a named layout of [matrix.layouts]; both arms
// of each cell agree bit for bit across 4 rank processes.
TEST(MatrixCommand, PipelineAxisTakesEvenSplitsAndNamedLayouts) {
  testing::TempDir dir;
  dir.Write("base.toml", testing::RecipeBuilder(4, 1)
                             .Batches(16, 2)
                             .Set("parallel.timeout_s", 120.0)
                             .Arm("reference", "reference")
                             .Arm("overlap", "overlap")
                             .Text());
  const std::string matrix = dir.Write("m.toml", R"(
[matrix]
base = "base.toml"
[matrix.axes]
pipeline = ["pp2-vpp2", "mtp_only"]
[matrix.layouts]
mtp_only = { pp = 2, layout = "Et|tt|t|mL" }
)");
  // With node probes in both engines' pipeline schedules: every replay equals its first pass.
  testing::CommandResult r = testing::RunBitparity(
      {"matrix", matrix, "--out", dir.File("out"), "--repeats", "1", "--probes"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json report = nlohmann::json::parse(testing::ReadFile(dir.File("out/report.json")));
  ASSERT_EQ(report["cells"].size(), 2u);
  for (const auto& cell : report["cells"]) {
    EXPECT_EQ(cell["checks"]["overlap vs reference: gradients"]["verdict"], "pass") << cell;
    for (const char* arm : {"reference", "overlap"}) {
      const auto& replays = cell["checks"][std::string(arm) + ": replays equal first pass"];
      EXPECT_TRUE(replays["verdict"] == "pass" || replays["verdict"] == "skipped") << cell;
    }
  }
  const std::string recipe = testing::ReadFile(dir.File("out/mtp_only/recipe.toml"));
  EXPECT_NE(recipe.find("pipeline_layout = 'Et|tt|t|mL'"), std::string::npos) << recipe;
}

TEST(MatrixCommand, BadMatrixFilesAreBadInput) {
  testing::TempDir dir;
  dir.Write("base.toml", BaseToml());
  for (const char* body :
       {"[matrix]\nbase = \"base.toml\"\n[matrix.axes]\nspeed = [1]\n",
        "[matrix]\nbase = \"missing.toml\"\n[matrix.axes]\nmtp_layers = [0]\n",
        "[matrix]\nbase = \"base.toml\"\n[matrix.axes]\nrecompute = [\"diagonal-2\"]\n",
        "[matrix]\nbase = \"base.toml\"\n[matrix.axes]\npipeline = [\"pp2-vpp\"]\n",
        "[matrix]\nbase = \"base.toml\"\n[matrix.axes]\npipeline = [\"x\"]\n"
        "[matrix.layouts]\nx = { pp = 0, layout = \"Et|tL\" }\n",
        "[matrix]\nbase = \"base.toml\"\n[matrix.axes]\npipeline = [\"x\"]\n"
        "[matrix.layouts]\nx = { pp = 2, layout = \"Et|tL\", vpp = 2 }\n",
        // Four decoder layers in the layout, two in the base.
        "[matrix]\nbase = \"base.toml\"\n[matrix.axes]\npipeline = [\"x\"]\n"
        "[matrix.layouts]\nx = { pp = 2, layout = \"Ettt|tL\" }\n"}) {
    const std::string matrix = dir.Write("bad.toml", body);
    testing::CommandResult r = testing::RunBitparity({"matrix", matrix, "--out", dir.File("o")});
    EXPECT_EQ(r.exit_code, 2) << body << r.output;
  }
  // A misspelt precision or dispatcher, or a value listed twice (two cells of one folder), is
  // refused at load: no cell runs, nothing is written.
  for (const auto& [body, message] : std::vector<std::pair<std::string, std::string>>{
           {"precision = [\"bf61\"]",
            "precision values are \"fp32\", \"bf16\", \"blockwise\", \"mxfp8\", got 'bf61'"},
           {"dispatcher = [\"flexx\"]",
            "dispatcher values are \"alltoall\", \"flex\", got 'flexx'"},
           {"precision = [\"bf16\", \"fp32\", \"bf16\"]",
            "[matrix.axes] precision lists 'bf16' twice"},
           {"mtp_layers = [0, 0]", "[matrix.axes] mtp_layers lists '0' twice"},
           {"precision = [\"../../escaped\"]", "got '../../escaped'"}}) {
    const std::string matrix =
        dir.Write("values.toml", "[matrix]\nbase = \"base.toml\"\n[matrix.axes]\n" + body + "\n");
    testing::CommandResult r =
        testing::RunBitparity({"matrix", matrix, "--out", dir.File("values_out")});
    EXPECT_EQ(r.exit_code, 2) << body << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir.File("values_out"))) << body;
    EXPECT_FALSE(std::filesystem::exists(dir.File("escaped"))) << body;
  }
  // A name that becomes a folder (the matrix's; a cell's is made of the checked values above) may
  // not leave the output folder, and nothing is written outside it.
  for (const std::string& body : std::vector<std::string>{
           "[matrix]\nname = \"../escaped\"\nbase = \"base.toml\"\n[matrix.axes]\nmtp_layers = "
           "[0]\n"}) {
    const std::string matrix = dir.Write("names.toml", body);
    testing::CommandResult r =
        testing::RunBitparity({"matrix", matrix, "--out", dir.File("deep/er/o")});
    EXPECT_EQ(r.exit_code, 2) << body << r.output;
    EXPECT_NE(r.output.find("must be 1-64 characters"), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir.File("escaped"))) << body;
    EXPECT_FALSE(std::filesystem::exists(dir.File("deep/escaped"))) << body;
  }
  const std::string good =
      dir.Write("good.toml", "[matrix]\nbase = \"base.toml\"\n[matrix.axes]\nmtp_layers = [0]\n");
  EXPECT_EQ(testing::RunBitparity({"matrix", good, "--filter", "nope=1"}).exit_code, 2);
  // An empty filter (an unset CI variable), a separator too many or an empty value selects
  // nothing by accident: refused before any cell runs.
  for (const auto& [filter, message] : std::vector<std::pair<std::string, std::string>>{
           {"", "--filter '' is empty (an unset variable?)"},
           {"  ", "--filter '  ' is empty"},
           {"mtp_layers=0,", "--filter 'mtp_layers=0,' has an empty term"},
           {",mtp_layers=0", "--filter ',mtp_layers=0' has an empty term"},
           {"mtp_layers=0|", "'mtp_layers=0|' has an empty value"},
           {"mtp_layers=", "'mtp_layers=' has an empty value"}}) {
    testing::CommandResult r = testing::RunBitparity(
        {"matrix", good, "--filter", filter, "--out", dir.File("filter_out")});
    EXPECT_EQ(r.exit_code, 2) << "'" << filter << "': " << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir.File("filter_out"))) << "'" << filter << "'";
  }
}

}  // namespace
}  // namespace bitparity
