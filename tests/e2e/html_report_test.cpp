// report.html in a real browser: `bitparity run` on a small recipe (a one-ulp perturbation in one
// run, so that something differs, and a memory timeline) writes a self-contained page; headless
// Chromium (Debian's `chromium`, installed by ci/setup) renders it, its DOM holds every chart and
// the check table, and its screenshot is not blank (a blank page, rendered alongside, is).

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"

namespace bitparity {
namespace {

std::string RecipeToml() {
  return testing::RecipeBuilder(2, 0)
      .Set("name", "html")
      .Set("parallel.timeout_s", 120)
      .Batches(8, 4)
      .FullRecomputeAll("uniform", 1)
      .Arm("reference", "reference")
      .Arm("overlap", "overlap")
      .Text();
}

std::string Chromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (std::filesystem::exists(path)) return path;
  }
  return "";
}

// Runs `command` through the shell, its output into `log`; the exit status.
int Shell(const std::string& command, const std::string& log) {
  return std::system((command + " >" + log + " 2>&1").c_str());
}

struct Screenshot {
  int width = 0, height = 0;
  double non_white = 0;
  int colors = 0;
};

Screenshot Render(const std::string& chromium, const std::string& page, const std::string& png,
                  const std::string& log) {
  const int status = Shell("timeout 120 " + chromium +
                               " --headless --no-sandbox --disable-gpu --hide-scrollbars"
                               " --window-size=1200,3000 --screenshot=" +
                               png + " file://" + page,
                           log);
  EXPECT_EQ(status, 0) << testing::ReadFile(log);
  const std::string stats = png + ".txt";
  EXPECT_EQ(Shell("python3 " + testing::SourceDir() + "/tests/tools/png_stats.py " + png, stats), 0)
      << testing::ReadFile(stats);
  Screenshot s;
  std::istringstream(testing::ReadFile(stats)) >> s.width >> s.height >> s.non_white >> s.colors;
  return s;
}

TEST(HtmlReport, TheRunPageRendersInChromiumWithEveryChart) {
  const std::string chromium = Chromium();
  ASSERT_FALSE(chromium.empty()) << "chromium is not installed: run ci/setup";
  testing::TempDir dir;
  const std::string recipe = dir.Write("html.toml", RecipeToml());
  testing::CommandResult r = testing::RunBitparity(
      {"run", recipe, "--out", dir.File("out"), "--no-golden", "--quiet", "--memory-timeline",
       "--no-attribution", "--perturb",
       "overlap:1:rank=0,iteration=2,param=layers.1.attention.qkv,element=3"});
  EXPECT_EQ(r.exit_code, 1) << r.output;  // the perturbed run differs
  const std::string page = dir.File("out/report.html");
  ASSERT_TRUE(std::filesystem::exists(page)) << r.output;
  const std::string html = testing::ReadFile(page);
  // Self-contained: nothing is fetched.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("href=\"http"), std::string::npos);

  // The browser's DOM after loading the page holds every chart and the check table.
  const std::string dom = dir.File("dom.html");
  ASSERT_EQ(Shell("timeout 120 " + chromium +
                      " --headless --no-sandbox --disable-gpu --dump-dom file://" + page,
                  dom),
            0)
      << testing::ReadFile(dom);
  const std::string rendered = testing::ReadFile(dom);
  for (const char* id :
       {"id=\"check-table\"", "id=\"loss-chart\"", "id=\"grad-norm-difference-chart\"",
        "id=\"difference-heatmap-0\"", "id=\"memory-peak-chart\"", "id=\"memory-timeline-chart\"",
        "id=\"overlap-timeline-0\"", "class=\"cell differs\"", "class=\"interval comm\"",
        "overlap reproduces itself"}) {
    EXPECT_NE(rendered.find(id), std::string::npos) << id;
  }
  // Loss curves: one line per arm and run.
  size_t lines = 0;
  const std::string loss = rendered.substr(rendered.find("id=\"loss-chart\""));
  for (size_t at = loss.find("class=\"series\"");
       at != std::string::npos && at < loss.find("</svg>");
       at = loss.find("class=\"series\"", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 4u);

  const Screenshot shot = Render(chromium, page, dir.File("report.png"), dir.File("shot.log"));
  EXPECT_EQ(shot.width, 1200);
  EXPECT_GT(shot.non_white, 0.05) << "the screenshot is nearly blank";
  EXPECT_GT(shot.colors, 50);
  // The same measure calls a blank page blank.
  const std::string blank = dir.Write("blank.html", "<!DOCTYPE html><html><body></body></html>\n");
  const Screenshot empty = Render(chromium, blank, dir.File("blank.png"), dir.File("blank.log"));
  EXPECT_LT(empty.non_white, 0.001);
  EXPECT_LE(empty.colors, 2);
}

}  // namespace
}  // namespace bitparity
