#include "harness/run_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <stdexcept>

#include "comm/rank_protocol.h"
#include "config/recipe.h"
#include "core/atomic_file.h"
#include "core/clock.h"
#include "core/errors.h"
#include "harness/arm_runs.h"
#include "harness/attribution.h"
#include "harness/check_plan.h"
#include "harness/external_command.h"
#include "harness/fingerprint.h"
#include "harness/golden_check.h"
#include "harness/golden_store.h"
#include "harness/html_report.h"
#include "harness/launcher.h"
#include "harness/localizer.h"
#include "harness/output_folder.h"
#include "harness/output_lock.h"
#include "harness/perturbation_check.h"
#include "harness/report.h"
#include "harness/resources.h"
#include "harness/restart_replay.h"
#include "harness/trace_compare.h"
#include "numerics/determinism.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// --arms, or every arm of the recipe: the baseline first, then the others in name order.
std::vector<std::string> SelectArms(const Recipe& recipe, const std::vector<std::string>& asked) {
  std::vector<std::string> arms = asked.empty() ? recipe.arm_names() : asked;
  for (const std::string& arm : arms) recipe.arm(arm);  // InputError if unknown
  std::stable_partition(arms.begin(), arms.end(),
                        [&](const std::string& a) { return a == recipe.compare.baseline; });
  for (const std::string& arm : arms) {
    if (std::count(arms.begin(), arms.end(), arm) > 1) {
      throw InputError("--arms names '" + arm +
                       "' twice; each arm trains once into its own folder");
    }
  }
  return arms;
}

void ValidateOptions(const RunOptions& options, const std::vector<std::string>& switches) {
  if (options.repeats < 1) throw InputError("--repeats must be >= 1");
  if (options.update_golden && options.no_golden) {
    throw InputError(
        "--update-golden with --no-golden: a golden is replaced only after it was compared "
        "(drop --no-golden; a golden that cannot be read must be removed by hand)");
  }
  if (options.update_golden && !switches.empty()) {
    throw InputError("--update-golden with developer switches set (" + switches.front() +
                     "): a golden must come from an unmodified run; unset them");
  }
  if (options.update_golden && options.repeats < 2) {
    throw InputError(
        "--update-golden needs --repeats >= 2: a golden comes from a run whose "
        "reproducibility was checked, got --repeats " +
        std::to_string(options.repeats));
  }
}

// --update-golden holds the recipe's folder of the golden store from before the golden is read
// until it is replaced, so that two updates of one golden cannot interleave their compare and
// replace. Runs that only check a golden take no lock: a replacement is a rename, so they read
// the old golden or the new one.
std::unique_ptr<OutputLock> LockGoldenFolder(const std::string& golden_path) {
  const fs::path folder = fs::path(golden_path).parent_path();
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) {
    throw InputError(folder.string() + ": cannot create the golden directory: " + ec.message());
  }
  auto lock = std::make_unique<OutputLock>(
      folder.string(), "wait for its --update-golden to finish, then run again");
  RemoveDeadProcessDebris(folder.string());  // an interrupted update's temporary, now it is ours
  return lock;
}

// Whether the ranks record node probes (--probes or [trace] probes = "nodes"); a run that records
// a golden does, so that a later run under another fingerprint can be told the first operation
// that differs from it.
bool RecordsProbes(const RunOptions& options, const Recipe& recipe) {
  return options.probes || options.update_golden || recipe.trace.node_probes;
}

// A developer perturbation of one run (not of every run) of `arm`, or null.
const Perturbation* OneRunPerturbation(const std::vector<Perturbation>& perturbations,
                                       const std::string& arm) {
  for (const Perturbation& p : perturbations) {
    if (p.arm == arm && p.run != 0) return &p;
  }
  return nullptr;
}

// The report of every arm that ran, with one MFU denominator for all of them.
std::vector<ArmReport> ArmReports(const Recipe& recipe, const std::vector<std::string>& arms,
                                  const ArmRuns& runs) {
  std::vector<ArmReport> reports;
  for (const std::string& arm : arms) {
    if (!runs.Ran(arm)) continue;
    ArmReport a{arm, ToString(recipe.arm(arm).engine), {}};
    for (const ArmRun& r : runs.RunsOf(arm)) {
      a.runs.push_back(SummarizeRun(*r.trace, r.trace_path, r.seconds, r.index));
    }
    reports.push_back(std::move(a));
  }
  std::vector<Throughput*> throughputs;
  for (ArmReport& a : reports) {
    for (ArmRunReport& r : a.runs) throughputs.push_back(&r.throughput);
  }
  ShareBestCeiling(throughputs);
  return reports;
}

// One map of where two runs differ for each pair of runs a failed check compared.
std::vector<DifferenceMap> DifferenceMaps(const std::vector<CheckResult>& checks,
                                          const std::vector<std::vector<ComparedRun>>& pairs,
                                          const ArmRuns& runs) {
  std::vector<DifferenceMap> maps;
  std::set<std::string> mapped;
  for (size_t c = 0; c < checks.size() && c < pairs.size(); ++c) {
    const std::vector<ComparedRun>& sides = pairs[c];
    if (checks[c].verdict != Verdict::kFail || sides.size() != 2 || sides[0].arm.empty() ||
        sides[1].arm.empty() || !runs.Ran(sides[0].arm) || !runs.Ran(sides[1].arm)) {
      continue;
    }
    const std::string title = sides[0].arm + " run " + std::to_string(sides[0].run) + " vs " +
                              sides[1].arm + " run " + std::to_string(sides[1].run);
    if (!mapped.insert(title).second) continue;
    DifferenceMap map = MapDifferences(title, runs.TraceOf(sides[0].arm, sides[0].run),
                                       runs.TraceOf(sides[1].arm, sides[1].run));
    if (!map.rows.empty()) maps.push_back(std::move(map));
  }
  return maps;
}

class RecipeRun {
 public:
  RecipeRun(const RunOptions& options, std::ostream& console)
      : options_(options),
        console_(console),
        recipe_(LoadRecipe(options.recipe_path)),
        goldens_(options.golden_dir, recipe_.path) {}

  RunReport Run() {
    const auto start = Clock::now();
    for (const std::string& s : developer_switches_) {
      console_ << "warning: developer switch active: " << s
               << " (every rank inherits it: this is not an unmodified run)\n";
    }
    Prepare();
    std::optional<RunsStopped> stopped = runs_->RunAll(arms_);
    if (!stopped && InterruptSignal() != 0) {  // during the last run's end
      stopped = RunsStopped{std::nullopt, "interrupted by " + SignalName(InterruptSignal()),
                            InterruptSignal()};
    }
    if (stopped) {
      RecordChecksNotRun(*stopped);
    } else {
      RunChecks();
      NoteInterrupt("while the checks compared the runs");
      Localize();
      NoteInterrupt("while localizing reruns ran");
      Attribute();
      NoteInterrupt("while attribution reruns ran");
      if (interrupted_ == 0 && options_.update_golden && runs_->Ran(baseline_)) {
        UpdateGolden({baseline_, golden_path_, &runs_->TraceOf(baseline_, 1), fingerprint_,
                      options_.command_line},
                     goldens_, checks_);
      }
      NoteInterrupt("while the golden was recorded");
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return Finish(seconds);
  }

  // A signal that arrived after the runs, during `phase`: the checks made so far become errors
  // saying so (README: an interrupted run errors every check), their verdicts kept in the text.
  // Reruns started after it end at once (ArmRuns); the first signal is the one reported.
  void NoteInterrupt(const std::string& phase) {
    if (interrupted_ != 0 || InterruptSignal() == 0) return;
    interrupted_ = InterruptSignal();
    const std::string summary = "interrupted by " + SignalName(interrupted_) + " " + phase;
    for (CheckResult& check : checks_) {
      if (check.verdict == Verdict::kSkipped || check.verdict == Verdict::kError) continue;
      check.details = std::string("before the signal: ") + ToString(check.verdict) + ", " +
                      check.summary + (check.details.empty() ? "" : "\n" + check.details);
      check.verdict = Verdict::kError;
      check.summary = summary;
    }
  }

 private:
  void Prepare() {
    for (const std::string& warning : CheckResources(recipe_, LocalMachine())) {
      console_ << "warning: " << warning << "\n";
    }
    arms_ = SelectArms(recipe_, options_.arms);
    bool any_external = false;
    for (const std::string& arm : arms_) {  // a missing program is bad input, before any run
      const ArmConfig& config = recipe_.arm(arm);
      if (config.engine != EngineKind::kExternal) continue;
      ResolveExternalCommand(recipe_, config);
      any_external = true;
    }
    if (any_external) {  // its ranks get the pinned settings from this process's environment
      CheckEnvironmentConflicts(ToString(recipe_.parallel.device), recipe_.parallel.cpu_isa);
    }
    ValidateOptions(options_, developer_switches_);
    out_dir_ = options_.out_dir.empty() ? "out/" + recipe_.name : options_.out_dir;
    baseline_ = recipe_.compare.baseline;
    if (options_.update_golden && std::find(arms_.begin(), arms_.end(), baseline_) == arms_.end()) {
      throw InputError("--update-golden records the baseline arm '" + baseline_ +
                       "' ([compare] baseline), which --arms leaves out; add it to --arms");
    }
    // Before anything is locked or written: a malformed --perturb is bad input with no trace.
    std::vector<Perturbation> perturbations =
        ParsePerturbations(options_.perturb, arms_, options_.repeats);
    CheckSwitchesApply(perturbations);
    CheckPerturbationTargets(recipe_, arms_, perturbations);
    fingerprint_ = BaselineFingerprint();
    std::error_code ec;
    if (fs::exists(goldens_.dir(), ec) && !fs::is_directory(goldens_.dir(), ec)) {
      throw InputError(goldens_.dir() + ": the golden store is not a directory");
    }
    if (options_.update_golden) {
      golden_lock_ = LockGoldenFolder(goldens_.PathFor(recipe_.name, fingerprint_));
    }
    LoadGolden();
    PrepareOutput();
    plan_ = PlanChecks(recipe_, arms_, {options_.repeats, probes()});
    runs_ = std::make_unique<ArmRuns>(recipe_, options_, out_dir_, std::move(perturbations),
                                      probes(), console_);
  }

  // Every developer switch against the recipe and the arms, before any rank starts: one that
  // cannot apply would do nothing, and the run would pass as if it had been tested.
  void CheckSwitchesApply(const std::vector<Perturbation>& perturbations) const {
    SwitchTarget target{&recipe_, {}, !recipe_.train.checkpoint_at.empty()};
    for (const std::string& arm : arms_) target.engines.push_back(recipe_.arm(arm).engine);
    CheckEnvironmentSwitchesApply(target);
    for (const Perturbation& p : perturbations) {
      CheckPerturbationApplies(p.parsed, target, "--perturb '" + p.text + "'");
    }
  }

  // The fingerprint the baseline's golden is keyed by: this process's, or for an external
  // baseline the one of the provenance its ranks will record (asked before any training; when
  // the program cannot tell, the golden check is skipped saying why).
  Fingerprint BaselineFingerprint() {
    const Fingerprint local = LocalFingerprint(recipe_);
    const bool selected = std::find(arms_.begin(), arms_.end(), baseline_) != arms_.end();
    if (options_.no_golden || !selected || recipe_.arm(baseline_).engine != EngineKind::kExternal) {
      return local;
    }
    const fs::path log =
        fs::temp_directory_path() / ("bitparity-provenance." + std::to_string(::getpid()) + ".log");
    const ExternalProvenance asked =
        AskExternalProvenance(recipe_, recipe_.arm(baseline_), log.string());
    std::error_code ec;
    fs::remove(log, ec);
    if (!asked.failure.empty()) {
      baseline_provenance_failure_ = "the baseline " + baseline_ +
                                     "'s command was asked for its provenance and " + asked.failure;
      return local;
    }
    return MakeFingerprint(asked.facts, recipe_.parallel.threads, recipe_.world_size());
  }

  // Every folder the runs write, made before any training: an output path that cannot take
  // them is bad input now, not a failure after the training.
  void PrepareOutput() {
    output_ = std::make_unique<OutputFolder>(out_dir_);
    for (const std::string& arm : arms_) {
      for (int64_t k = 1; k <= options_.repeats; ++k) {
        output_->CreateFolder(arm + "/run" + std::to_string(k), "the run's output directory");
      }
    }
    for (const PlannedResume& resume : PlanResumes(recipe_, arms_)) {
      output_->CreateFolder(ResumeFolder(resume), "the resumed run's output directory");
    }
  }

  // The golden for this fingerprint, read before any training so that an unusable one is
  // reported as bad input (and never overwritten).
  void LoadGolden() {
    if (options_.no_golden) {
      golden_path_ = goldens_.PathFor(recipe_.name, fingerprint_);
      golden_skip_ = options_.no_golden_reason;
      return;
    }
    golden_lookup_ = goldens_.Find(recipe_.name, fingerprint_);
    golden_path_ = golden_lookup_.path;
  }

  const Trace* golden() const { return golden_lookup_.golden ? &*golden_lookup_.golden : nullptr; }

  bool probes() const { return RecordsProbes(options_, recipe_); }

  // After a run that did not finish: every planned check, errored with the reason (or skipped
  // as planned), so that the JUnit file and the report list the same testcases as a run that
  // completed.
  void RecordChecksNotRun(const RunsStopped& stopped) {
    interrupted_ = stopped.signal;
    std::string reason = "not run: " + FirstLine(stopped.reason);
    if (stopped.signal != 0) {
      reason = "not run: interrupted by " + SignalName(stopped.signal);
    } else if (stopped.failed_run) {
      reason =
          "not run: " + stopped.failed_run->name + " failed (" + FirstLine(stopped.reason) + ")";
    }
    if (stopped.failed_run) Record(*stopped.failed_run, {});
    for (const PlannedCheck& planned : plan_) {
      CheckResult check = NewCheck(planned.kind, planned.arm, planned.other);
      check.name = planned.name;
      check.verdict = planned.skip_reason.empty() ? Verdict::kError : Verdict::kSkipped;
      check.summary = planned.skip_reason.empty() ? reason : planned.skip_reason;
      Record(check, {});
    }
  }

  void RunChecks() {
    for (const PlannedCheck& planned : plan_) {
      if (!planned.skip_reason.empty()) {
        CheckResult skipped = NewCheck(planned.kind, planned.arm, planned.other);
        skipped.name = planned.name;
        skipped.verdict = Verdict::kSkipped;
        skipped.summary = planned.skip_reason;
        Record(skipped, {});
        continue;
      }
      RunCheck(planned);
    }
  }

  void RunCheck(const PlannedCheck& p) {
    const ComparePolicy& policy = recipe_.compare;
    switch (p.kind) {
      case CheckKind::kReproduces:
        Record(CheckReproduces(p.arm, runs_->TracesOf(p.arm)), p.compares);
        if (checks_.back().verdict == Verdict::kFail) {
          pairs_.back() = {{p.arm, 1}, {p.arm, checks_.back().differing_run}};
        }
        return;
      case CheckKind::kReplay:
        return Record(CheckReplays(p.arm, runs_->TracesOf(p.arm)), p.compares);
      case CheckKind::kCensus:
        return Record(CheckRecomputeCensus(p.arm, runs_->TracesOf(p.arm)), p.compares);
      case CheckKind::kResumes:
        return Record(CheckResumesOf(p), p.compares);
      case CheckKind::kLoss:
        return RecordAcrossArms(
            p, CheckLosses(p.arm, First(p.arm), p.other, First(p.other), policy.loss));
      case CheckKind::kGradients:
        return RecordAcrossArms(
            p, CheckGradients(p.arm, First(p.arm), p.other, First(p.other), policy.gradients));
      case CheckKind::kParameters:
        return RecordAcrossArms(
            p, CheckParameters(p.arm, First(p.arm), p.other, First(p.other), policy.params));
      case CheckKind::kMemoryModel:
        return Record(CheckMemoryModel(p.arm, First(p.arm), policy.memory_model), p.compares);
      case CheckKind::kMemory:
        return Record(CheckMemory(policy.memory.at(p.bound), PeakBytes(First(p.arm)),
                                  PeakBytes(First(p.other))),
                      p.compares);
      case CheckKind::kOverlap:
        return Record(CheckOverlap(policy.overlap.at(p.bound), runs_->TracesOf(p.arm)), p.compares);
      case CheckKind::kGolden:
        golden_checks_ = CheckGoldens(GoldenInput());
        return Record(golden_checks_.at(0), p.compares);
      case CheckKind::kGoldenMemory:
        return Record(golden_checks_.at(1), p.compares);
      case CheckKind::kRun:
      case CheckKind::kCell:
        break;
    }
    throw std::logic_error("the check plan holds a " + CheckName(p.kind, p.arm, p.other) +
                           " check, which no run plans");
  }

  const Trace& First(const std::string& arm) const { return runs_->TraceOf(arm, 1); }

  CheckResult CheckResumesOf(const PlannedCheck& p) const {
    std::vector<std::pair<int64_t, const Trace*>> resumed;
    for (int64_t k : recipe_.train.checkpoint_at) {
      const Trace* trace = runs_->ResumedTrace({p.arm, p.other, k});
      if (trace == nullptr) {
        throw std::logic_error("the check plan holds " + p.name + ", whose resumed run after " +
                               "iteration " + std::to_string(k) + " did not run");
      }
      resumed.emplace_back(k, trace);
    }
    return CheckResumes(p.arm, p.other, First(p.arm), resumed);
  }

  // A cross-arm check; when it fails, the first operation where the two runs' probes differ.
  void RecordAcrossArms(const PlannedCheck& planned, CheckResult check) {
    if (check.verdict == Verdict::kFail) {
      AddFirstDivergentOperations(First(planned.arm), First(planned.other),
                                  /*across_arms=*/true, &check);
    }
    Record(std::move(check), planned.compares);
  }

  GoldenCheckInput GoldenInput() {
    GoldenCheckInput input;
    input.arm = baseline_;
    input.run = &First(baseline_);
    input.lookup = &golden_lookup_;
    input.fingerprint = fingerprint_;
    input.recipe_path = recipe_.path;
    input.require = options_.require_golden;
    input.memory_tolerance = recipe_.compare.golden_memory;
    input.skip_reason = golden_skip_;
    if (input.skip_reason.empty()) input.skip_reason = baseline_provenance_failure_;
    const Fingerprint recorded = TraceFingerprint(*input.run);
    if (input.skip_reason.empty() && recorded.key != fingerprint_.key) {
      input.skip_reason = "the ranks ran under fingerprint " + recorded.key + ", not " +
                          fingerprint_.key + " (differs in " +
                          fingerprint_.DifferingFields(recorded) + ")";
    }
    input.rerun_with_probes = [this](int64_t iteration) {
      return runs_->Rerun({baseline_, 1}, iteration, "golden_explain");
    };
    return input;
  }

  void Record(CheckResult check, std::vector<ComparedRun> runs) {
    // The check's time is its runs' (each counted once); an arm-wide check takes all its runs.
    std::vector<const ArmRun*> timed;
    auto add = [&](const ArmRun& run) {
      if (std::find(timed.begin(), timed.end(), &run) == timed.end()) timed.push_back(&run);
    };
    for (const ComparedRun& r : runs) {
      if (!runs_->Ran(r.arm)) continue;
      const std::vector<ArmRun>& arm = runs_->RunsOf(r.arm);
      if (r.run >= 1 && r.run <= static_cast<int64_t>(arm.size())) {
        add(arm[static_cast<size_t>(r.run - 1)]);
      }
    }
    if (runs.empty() && runs_->Ran(check.arm)) {
      for (const ArmRun& run : runs_->RunsOf(check.arm)) add(run);
    }
    for (const ArmRun* run : timed) check.seconds += run->seconds;
    checks_.push_back(std::move(check));
    pairs_.push_back(std::move(runs));
  }

  void Localize() {
    LocalizeFailures(checks_, pairs_, golden(),
                     [this](const ComparedRun& run, int64_t iteration, const std::string& label) {
                       return runs_->Rerun(run, iteration, label);
                     });
  }

  void Attribute() {
    if (!options_.attribution) return;
    for (CheckResult& check : checks_) {
      if (check.kind != CheckKind::kReproduces || check.verdict != Verdict::kFail) continue;
      // A developer switch that changes one run is the difference: nothing to attribute.
      if (const Perturbation* perturbed = OneRunPerturbation(runs_->perturbations(), check.arm)) {
        check.details += "attribution: not run: run " + std::to_string(perturbed->run) + " of " +
                         check.arm + " carries --perturb " + perturbed->spec +
                         ", which is the difference\n";
        continue;
      }
      AttributeFailure(
          recipe_.parallel.threads, recipe_.train.iterations,
          [&](const std::string& label, int64_t window, int64_t threads, bool deterministic) {
            return runs_->RerunPair(check.arm, window, label, threads, deterministic);
          },
          options_.quiet ? nullptr : &console_, &check);
    }
  }

  RunReport Finish(double seconds) {
    RunReport report;
    report.name = recipe_.name;
    report.recipe_name = recipe_.name;
    report.recipe_path = recipe_.path;
    report.fingerprint = fingerprint_;
    report.baseline = baseline_;
    report.golden_path = golden_path_;
    report.golden_present = golden() != nullptr;
    report.repeats = options_.repeats;
    report.arms = ArmReports(recipe_, arms_, *runs_);
    report.checks = checks_;
    report.difference_maps = DifferenceMaps(checks_, pairs_, *runs_);
    report.seconds = seconds;
    report.timestamp = started_utc_;
    report.developer_switches = developer_switches_;
    report.out_dir = out_dir_;
    WriteReports(report);
    if (interrupted_ == 0 && InterruptSignal() != 0) {  // while they were written: again, saying so
      NoteInterrupt("while the reports were written");
      WriteReports(report);
    }
    console_ << ConsoleReport(report) << std::flush;
    return report;
  }

  void WriteReports(RunReport& report) const {
    report.checks = checks_;
    report.exit_code = interrupted_ != 0 ? 128 + interrupted_ : ExitCodeOf(checks_);
    WriteFileAtomically((fs::path(out_dir_) / "junit.xml").string(), JunitReport({report}));
    WriteFileAtomically((fs::path(out_dir_) / "report.json").string(),
                        JsonReport(report).dump(2) + "\n");
    WriteFileAtomically((fs::path(out_dir_) / "report.html").string(), HtmlReport(report));
  }

  const RunOptions& options_;
  std::ostream& console_;
  Recipe recipe_;
  std::vector<std::string> arms_;
  std::string out_dir_;
  std::string baseline_;
  Fingerprint fingerprint_;
  GoldenStore goldens_;
  std::string golden_path_;
  GoldenLookup golden_lookup_;
  std::string golden_skip_;
  std::string baseline_provenance_failure_;  // why an external baseline has no fingerprint
  std::vector<PlannedCheck> plan_;
  std::unique_ptr<ArmRuns> runs_;
  std::vector<CheckResult> checks_;
  std::vector<std::vector<ComparedRun>> pairs_;  // per check: the runs it compared
  std::vector<CheckResult> golden_checks_;       // CheckGoldens': the golden, its memory
  std::string started_utc_ = UtcTimestamp(/*with_zone=*/false);
  const std::vector<std::string> developer_switches_ = ActiveDeveloperSwitches();
  std::unique_ptr<OutputFolder> output_;     // out_dir_, locked from PrepareOutput to the end
  std::unique_ptr<OutputLock> golden_lock_;  // on the golden's folder, with --update-golden
  int interrupted_ = 0;                      // the signal that interrupted the run (0: none)
};
}  // namespace

RunReport RunRecipe(const RunOptions& options, std::ostream& console) {
  return RecipeRun(options, console).Run();
}

}  // namespace bitparity
