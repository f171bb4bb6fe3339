#include "app/subcommands.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.h"
#include "config/recipe_schema.h"
#include "core/errors.h"
#include "harness/launcher.h"
#include "harness/matrix_command.h"
#include "harness/run_command.h"
#include "runtime/plan_command.h"

namespace bitparity {

const char kExitCodesHelp[] =
    "Exit codes: 0 pass, 1 a check failed (traces differ), 2 bad input (recipe, command line,\n"
    "trace or golden; nothing is written), 3 infrastructure fault (a rank crashed or timed out),\n"
    "130 / 143 interrupted by SIGINT / SIGTERM (ranks ended, temporaries removed, report written).";

namespace {

class RunSubcommand : public Subcommand {
 public:
  CLI::App* Declare(CLI::App& app) override {
    CLI::App* run = app.add_subcommand(
        "run",
        "The main job: run every arm of a recipe twice, require each to reproduce itself bit for "
        "bit, compare the arms under the recipe's [compare] policy, check the baseline against "
        "its golden, and write junit.xml and report.json");
    run->add_option("RECIPE", options_.recipe_path, "Recipe file (.toml)")->required();
    run->add_option("--out", options_.out_dir,
                    "Output directory: DIR/<arm>/run<k>/trace.h5, junit.xml, report.json "
                    "(default: out/<recipe name>)");
    run->add_option("--arms", arms_, "Comma-separated arms to run (default: all)");
    run->add_option("--repeats", options_.repeats, "Runs per arm (default 2)")
        ->check(CLI::Range(1, 100));
    run->add_option("--golden-dir", options_.golden_dir,
                    "Golden store: DIR/<recipe>/<fingerprint>.h5 (default: golden/ next to the "
                    "recipes folder)");
    run->add_flag("--update-golden", options_.update_golden,
                  "Write the baseline's trace as the golden for this machine's fingerprint, only "
                  "if every other check passes");
    run->add_flag("--no-golden", options_.no_golden, "Skip the golden check");
    run->add_flag("--require-golden", options_.require_golden,
                  "Fail the golden check when the store holds goldens of this recipe but none for "
                  "this machine's fingerprint (CI: ci/gate passes it); without it that is a skip, "
                  "with what differs from the nearest golden explained");
    run->add_option("--localize-runs", options_.localize_runs,
                    "Most reruns spent on naming the first differing element (default 4)")
        ->check(CLI::Range(0, 100));
    run->add_flag("--no-attribution", no_attribution_,
                  "When an arm does not reproduce itself, do not rerun its failing window with "
                  "one factor changed at a time (intra-op threads 1, deterministic algorithms "
                  "forced) to say which restores reproducibility");
    run->add_option("--perturb", options_.perturb,
                    "Developer switch: ARM:RUN:rank=R,iteration=I,param=NAME,element=K[,ulps=N] "
                    "adds N ulp to one main-grad element in run RUN (or 'all') of ARM");
    run->add_flag("--quiet", options_.quiet, "Only print the summary");
    run->add_flag("--memory-timeline", options_.memory_timeline,
                  "Record a memory timeline in every trace (see `bitparity timeline`)");
    run->add_flag("--probes", options_.probes,
                  "Record node probes in every trace ([trace] probes = \"nodes\"): a digest of "
                  "every schedule operation's outputs and input gradients, so that a difference "
                  "is named at the operation that made it, and replays are checked against their "
                  "first pass");
    run->footer(kExitCodesHelp);
    return run;
  }

  int Execute(const std::string& command_line) override {
    std::stringstream arms(arms_);
    std::string arm;
    while (std::getline(arms, arm, ',')) {
      if (!arm.empty()) options_.arms.push_back(arm);
    }
    options_.command_line = command_line;
    options_.attribution = !no_attribution_;
    const InterruptScope interrupts;
    options_.terminal = ::isatty(STDOUT_FILENO) == 1;
    return RunRecipe(options_, std::cout).exit_code;
  }

 private:
  RunOptions options_;
  std::string arms_;
  bool no_attribution_ = false;
};

class MatrixSubcommand : public Subcommand {
 public:
  CLI::App* Declare(CLI::App& app) override {
    CLI::App* matrix = app.add_subcommand(
        "matrix",
        "Expand a matrix file's base recipe over its axes (precision, recompute, mtp_layers, "
        "dispatcher, pipeline) and run every cell like `run`; one junit.xml and report.json for "
        "all cells");
    matrix->add_option("FILE", options_.matrix_path, "Matrix file (.toml)")->required();
    filter_ = matrix->add_option(
        "--filter", options_.filter,
        "A filter named in the file's [matrix.filters], or axis=value[|value],...; an empty "
        "filter (an unset variable) is refused, not taken as every cell");
    matrix->add_option("--jobs", options_.jobs, "Cells run at a time (default 1)")
        ->check(CLI::Range(1, 64));
    matrix->add_option("--out", options_.out_dir, "Output directory (default: out/<name>)");
    matrix->add_option("--repeats", options_.repeats, "Runs per arm and cell (default 2)")
        ->check(CLI::Range(1, 100));
    matrix->add_flag("--quiet", options_.quiet, "Do not print the details of failed cells");
    matrix->add_flag("--probes", options_.probes,
                     "Record node probes in every cell's traces (see `run --probes`)");
    matrix->add_flag("--require-golden", options_.require_golden,
                     "Every cell fails its golden check when only goldens of other fingerprints "
                     "exist (see `run --require-golden`)");
    matrix->footer(kExitCodesHelp);
    return matrix;
  }

  int Execute(const std::string& command_line) override {
    options_.command_line = command_line;
    options_.filter_given = filter_->count() > 0;
    const InterruptScope interrupts;
    return RunMatrix(options_, std::cout);
  }

 private:
  MatrixOptions options_;
  CLI::Option* filter_ = nullptr;
};

class ValidateSubcommand : public Subcommand {
 public:
  CLI::App* Declare(CLI::App& app) override {
    CLI::App* validate = app.add_subcommand(
        "validate", "Check a recipe and print its arms and recompute segments (no training)");
    validate->add_option("RECIPE", recipe_, "Recipe file (.toml)");
    validate->add_flag("--keys", keys_,
                       "Print every recipe key with its type, default and meaning (Markdown; "
                       "docs/recipe-keys.md is this output) instead of checking a recipe");
    validate->add_flag("--keys-summary", keys_summary_,
                       "Print one row per recipe table with its keys (the README's table)");
    return validate;
  }

  int Execute(const std::string&) override {
    if (keys_ || keys_summary_) {
      std::cout << (keys_ ? RecipeKeysMarkdown() : RecipeKeysSummaryMarkdown());
      return kExitPass;
    }
    if (recipe_.empty()) {
      throw InputError("validate: RECIPE is required (or --keys for the key reference)");
    }
    return Validate(recipe_);
  }

 private:
  std::string recipe_;
  bool keys_ = false;
  bool keys_summary_ = false;
};

class ArmSubcommand : public Subcommand {
 public:
  CLI::App* Declare(CLI::App& app) override {
    CLI::App* arm = app.add_subcommand(
        "arm", "Train one arm of a recipe once on its world of rank processes and write a trace");
    arm->add_option("RECIPE", options_.recipe, "Recipe file (.toml)")->required();
    arm->add_option("--arm", options_.arm,
                    "Name of the arm ([arms.NAME] in the recipe); optional if it has one arm");
    arm->add_option("--out", options_.out, "Trace file to write (HDF5, written atomically)")
        ->required();
    arm->add_option("--log-dir", options_.log_dir,
                    "Directory for the rank logs (default: TRACE.logs next to the trace)");
    arm->add_flag("--quiet", options_.quiet, "Do not print per-iteration progress");
    arm->add_flag("--memory-timeline", options_.memory_timeline,
                  "Record live and peak CPU tensor bytes at every phase of every iteration (see "
                  "`bitparity timeline`)");
    arm->add_flag("--probes", options_.probes,
                  "Record node probes ([trace] probes = \"nodes\"): a digest of every schedule "
                  "operation's outputs and input gradients");
    arm->add_option("--checkpoint-at", options_.checkpoint_at,
                    "Save every rank's checkpoint after these iterations (comma-separated; needs "
                    "--checkpoint-dir)")
        ->delimiter(',');
    arm->add_option("--checkpoint-dir", options_.checkpoint_dir,
                    "Folder for the checkpoints: iteration_<K>/rank_<r>.h5 (HDF5, "
                    "docs/checkpoint-format.md)");
    arm->add_option("--resume-from", options_.resume_from,
                    "Start from this checkpoint folder (an iteration_<K>/ of --checkpoint-dir) and "
                    "train the iterations after it");
    arm->footer(kExitCodesHelp);
    return arm;
  }

  int Execute(const std::string& command_line) override {
    const InterruptScope interrupts;
    return RunArm(options_, command_line);
  }

 private:
  ArmOptions options_;
};

class DiffSubcommand : public Subcommand {
 public:
  CLI::App* Declare(CLI::App& app) override {
    CLI::App* diff = app.add_subcommand(
        "diff", "Compare two traces record by record and name the first difference");
    diff->add_option("A", a_, "First trace (.h5)")->required();
    diff->add_option("B", b_, "Second trace (.h5)")->required();
    diff->add_flag("--explain", explain_,
                   "Explain the difference of traces from different machines or CPU levels: the "
                   "fingerprint fields that differ, the first divergent iteration and record with "
                   "its ULP distance, and with node probes in both the first divergent operation");
    diff->add_option("--show", show_, "How many differences to list (default 1: the first)")
        ->check(CLI::Range(1, 1000000));
    diff->footer("Exit codes: 0 bit-identical, 1 different, 2 unreadable or invalid trace.");
    return diff;
  }

  int Execute(const std::string&) override { return Diff(a_, b_, show_, explain_); }

 private:
  std::string a_, b_;
  int64_t show_ = 1;
  bool explain_ = false;
};

class PlanSubcommand : public Subcommand {
 public:
  CLI::App* Declare(CLI::App& app) override {
    CLI::App* plan = app.add_subcommand(
        "plan",
        "Print an arm's schedule for one iteration without training: recompute segments and "
        "every node operation in order");
    plan->add_option("RECIPE", recipe_, "Recipe file (.toml)")->required();
    plan->add_option("--arm", arm_, "Name of the arm")->required();
    plan->add_flag("--json", json_, "Print JSON instead of a table");
    return plan;
  }

  int Execute(const std::string&) override { return PrintPlan(recipe_, arm_, json_); }

 private:
  std::string recipe_, arm_;
  bool json_ = false;
};

class TimelineSubcommand : public Subcommand {
 public:
  CLI::App* Declare(CLI::App& app) override {
    CLI::App* timeline = app.add_subcommand(
        "timeline",
        "Print a trace's memory timeline: live and peak CPU tensor bytes at every phase");
    timeline->add_option("TRACE", trace_, "Trace recorded with --memory-timeline")->required();
    timeline->add_option("--rank", rank_, "Rank (default 0)");
    timeline->add_option("--iteration", iteration_, "Only this iteration (default: all)");
    timeline->add_flag("--csv", csv_, "Print CSV");
    return timeline;
  }

  int Execute(const std::string&) override { return Timeline(trace_, rank_, iteration_, csv_); }

 private:
  std::string trace_;
  int64_t rank_ = 0, iteration_ = 0;
  bool csv_ = false;
};

class InfoSubcommand : public Subcommand {
 public:
  CLI::App* Declare(CLI::App& app) override {
    return app.add_subcommand(
        "info",
        "Print this build's LibTorch, BLAS and reproducibility settings, and the GPUs it sees");
  }

  int Execute(const std::string&) override { return Info(); }
};

class MergeSubcommand : public Subcommand {
 public:
  CLI::App* Declare(CLI::App& app) override {
    CLI::App* merge = app.add_subcommand(
        "merge", "Merge the rank parts written by `bitparity worker` ranks into one trace");
    merge->add_option("PARTS_DIR", parts_, "Directory holding rank_<r>.h5 parts")->required();
    merge->add_option("--out", out_, "Trace file to write")->required();
    return merge;
  }

  int Execute(const std::string&) override { return Merge(parts_, out_); }

 private:
  std::string parts_, out_;
};

}  // namespace

std::vector<std::unique_ptr<Subcommand>> MakeSubcommands() {
  std::vector<std::unique_ptr<Subcommand>> commands;
  commands.push_back(std::make_unique<RunSubcommand>());
  commands.push_back(std::make_unique<MatrixSubcommand>());
  commands.push_back(std::make_unique<ValidateSubcommand>());
  commands.push_back(std::make_unique<ArmSubcommand>());
  commands.push_back(std::make_unique<DiffSubcommand>());
  commands.push_back(std::make_unique<PlanSubcommand>());
  commands.push_back(std::make_unique<TimelineSubcommand>());
  commands.push_back(std::make_unique<InfoSubcommand>());
  commands.push_back(std::make_unique<MergeSubcommand>());
  return commands;
}

}  // namespace bitparity
