#ifndef BITPARITY_HARNESS_ARM_RUNS_H_
#define BITPARITY_HARNESS_ARM_RUNS_H_

// The training runs of one `bitparity run`: every selected arm `repeats` times, each a process
// group (harness/launcher.h) writing <out>/<arm>/run<k>/trace.h5, with a progress line per
// iteration (run 1 saving the recipe's checkpoints, <out>/<arm>/run1/checkpoints/); then the
// runs resumed from those checkpoints (harness/restart_replay.h); and the reruns the checks ask for
// afterwards: up to an iteration with gradient dumps and node probes (<out>/localize/<label>, out
// of a shared budget, each asked once), and pairs of reruns with one factor changed
// (<out>/attribute/<arm>/<label>/run<k>). A rerun runs with the environment of the run it repeats,
// developer perturbations included.

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/developer_switches.h"
#include "config/recipe.h"
#include "harness/checks.h"
#include "harness/launcher.h"
#include "harness/localizer.h"
#include "harness/restart_replay.h"
#include "harness/run_command.h"
#include "trace/trace.h"

namespace bitparity {

using Environment = std::vector<std::pair<std::string, std::string>>;

// A developer perturbation, "ARM:RUN:SPEC" on the command line: BITPARITY_PERTURB=SPEC in run
// RUN (1-based; 0 for every run) of ARM.
struct Perturbation {
  std::string text;  // the argument, ARM:RUN:SPEC
  std::string arm;
  int64_t run = 0;
  std::string spec;
  GradPerturbation parsed;  // the spec
};

// How `arm` of `recipe` is launched, its trace at `trace` and its logs in logs/ beside it: the
// executable (or an external arm's program and its pinned settings), the recipe text, the world
// and the timeout. Callers add what their run asks for.
LaunchOptions ArmLaunch(const Recipe& recipe, const std::string& arm, const std::string& trace);

// Throws InputError naming the argument when one is malformed (its spec too) or names an arm not
// in `arms` or a run outside 1..repeats.
std::vector<Perturbation> ParsePerturbations(const std::vector<std::string>& texts,
                                             const std::vector<std::string>& arms, int64_t repeats);

struct ArmRun {
  std::string arm;
  int64_t index = 0;  // 1-based
  std::string trace_path;
  Environment environment;
  std::optional<Trace> trace;
  double seconds = 0;
};

// The first line of a failure text: the one-line form a check's summary shows.
std::string FirstLine(const std::string& text);

// How the runs ended when one did not finish: the run's error check (kRun) and what failed.
struct RunsStopped {
  std::optional<CheckResult> failed_run;  // absent when interrupted between two runs
  std::string reason;
  int signal = 0;  // the signal that interrupted the runs (0: none)
};

class ArmRuns {
 public:
  ArmRuns(const Recipe& recipe, const RunOptions& options, std::string out_dir,
          std::vector<Perturbation> perturbations, bool probes, std::ostream& console);

  // Runs each of `arms` `repeats` times, in order; stops at the first run that does not finish.
  // A rank's bad input is rethrown as InputError.
  std::optional<RunsStopped> RunAll(const std::vector<std::string>& arms);

  bool Ran(const std::string& arm) const { return runs_.count(arm) > 0; }
  const std::vector<ArmRun>& RunsOf(const std::string& arm) const { return runs_.at(arm); }
  const Trace& TraceOf(const std::string& arm, int64_t index) const;
  std::vector<const Trace*> TracesOf(const std::string& arm) const;
  const std::vector<Perturbation>& perturbations() const { return perturbations_; }
  // The trace of a resumed run RunAll made, or nullptr.
  const Trace* ResumedTrace(const PlannedResume& resume) const;

  // Run `ref` again up to `iteration` with full gradient dumps there and node probes; nullopt
  // when it failed or the localizing budget is spent. Reruns of one run and iteration are shared.
  std::optional<Trace> Rerun(const ComparedRun& ref, int64_t iteration, const std::string& label);

  // Two reruns of `arm` up to `window` with probes, `threads` per rank and deterministic
  // algorithms on or off; their reproducibility check, or nullopt when one did not finish.
  std::optional<CheckResult> RerunPair(const std::string& arm, int64_t window,
                                       const std::string& label, int64_t threads,
                                       bool deterministic_algorithms);

 private:
  LaunchOptions Launch(const std::string& arm, const std::string& trace,
                       const Environment& env) const;
  Environment EnvironmentFor(const std::string& arm, int64_t index) const;
  std::optional<RunsStopped> InterruptedBetweenRuns() const;
  std::optional<RunsStopped> RunOne(const std::string& arm, int64_t index);
  std::optional<RunsStopped> RunResume(const PlannedResume& resume);
  std::optional<RunsStopped> Launched(LaunchOptions launch, const std::string& label,
                                      const std::string& name, ArmRun* run, bool own_input = false);
  // The absolute folder run 1 of `arm` saves its checkpoints into.
  std::string CheckpointsOf(const std::string& arm) const;
  void PrintProgress(const std::string& arm, const std::string& run, const ProgressEvent& event);

  struct ResumedRun {
    PlannedResume plan;
    ArmRun run;
  };

  const Recipe& recipe_;
  const RunOptions& options_;
  std::string out_dir_;
  std::vector<Perturbation> perturbations_;
  bool probes_;
  std::ostream& console_;
  std::map<std::string, std::vector<ArmRun>> runs_;
  std::vector<ResumedRun> resumes_;
  std::map<std::string, Trace> reruns_;  // the localizer's, by "arm/run@iteration"
  int64_t localize_budget_ = 0;          // shared by every rerun that names a difference
  int64_t iterations_done_ = 0;          // over every run, for the progress line's estimate
  int64_t iterations_total_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_ARM_RUNS_H_
