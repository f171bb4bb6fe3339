#include "harness/run_command.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>

#include "core/atomic_file.h"
#include "core/clock.h"
#include "core/errors.h"
#include "core/rank_protocol.h"
#include "core/recipe.h"
#include "core/trace.h"
#include "core/trace_keys.h"
#include "harness/attribution.h"
#include "harness/fingerprint.h"
#include "harness/golden_check.h"
#include "harness/golden_store.h"
#include "harness/html_report.h"
#include "harness/launcher.h"
#include "harness/localizer.h"
#include "harness/output_folder.h"
#include "harness/output_lock.h"
#include "harness/report.h"
#include "harness/resources.h"
#include "harness/trace_compare.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Environment = std::vector<std::pair<std::string, std::string>>;

struct ArmRun {
  std::string arm;
  int64_t index = 0;  // 1-based
  std::string trace_path;
  Environment environment;
  std::optional<Trace> trace;
  double seconds = 0;
};

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

// "ARM:RUN:SPEC" -> (arm, run or 0 for all, spec).
struct Perturbation {
  std::string arm;
  int64_t run = 0;
  std::string spec;
};

std::vector<Perturbation> ParsePerturbations(const std::vector<std::string>& texts,
                                             const std::vector<std::string>& arms,
                                             int64_t repeats) {
  std::vector<Perturbation> out;
  for (const std::string& text : texts) {
    const size_t a = text.find(':');
    const size_t b = a == std::string::npos ? a : text.find(':', a + 1);
    if (b == std::string::npos) {
      throw InputError("--perturb '" + text + "': expected ARM:RUN:SPEC (RUN a number or 'all')");
    }
    Perturbation p;
    p.arm = text.substr(0, a);
    const std::string run = text.substr(a + 1, b - a - 1);
    p.spec = text.substr(b + 1);
    if (std::find(arms.begin(), arms.end(), p.arm) == arms.end()) {
      throw InputError("--perturb '" + text + "': no arm '" + p.arm + "' in this run");
    }
    if (run != "all") {
      try {
        p.run = std::stoll(run);
      } catch (const std::exception&) {
        p.run = -1;
      }
      if (p.run < 1 || p.run > repeats) {
        throw InputError("--perturb '" + text + "': RUN must be 1.." + std::to_string(repeats) +
                         " or 'all'");
      }
    }
    out.push_back(p);
  }
  return out;
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
    LaunchAll();
    if (infrastructure_error_.empty() && InterruptSignal() != 0) {  // during the last run's end
      interrupted_ = InterruptSignal();
      infrastructure_error_ = "interrupted by " + SignalName(interrupted_);
    }
    if (infrastructure_error_.empty()) {
      RunChecks();
      Localize();
      Attribute();
      UpdateGolden();
    } else {
      RecordChecksNotRun();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return Finish(seconds);
  }

 private:
  void Prepare() {
    for (const std::string& warning : CheckResources(recipe_, LocalMachine())) {
      console_ << "warning: " << warning << "\n";
    }
    arms_ = options_.arms.empty() ? recipe_.arm_names() : options_.arms;
    for (const std::string& arm : arms_) recipe_.arm(arm);  // InputError if unknown
    // The baseline first, then the others in name order.
    std::stable_partition(arms_.begin(), arms_.end(),
                          [&](const std::string& a) { return a == recipe_.compare.baseline; });
    if (options_.repeats < 1) throw InputError("--repeats must be >= 1");
    for (size_t i = 0; i < arms_.size(); ++i) {
      if (std::count(arms_.begin(), arms_.end(), arms_[i]) > 1) {
        throw InputError("--arms names '" + arms_[i] +
                         "' twice; each arm trains once into its own folder");
      }
    }
    if (options_.update_golden && options_.no_golden) {
      throw InputError(
          "--update-golden with --no-golden: a golden is replaced only after it was compared "
          "(drop --no-golden; a golden that cannot be read must be removed by hand)");
    }
    if (options_.update_golden && !developer_switches_.empty()) {
      throw InputError("--update-golden with developer switches set (" +
                       developer_switches_.front() +
                       "): a golden must come from an unmodified run; unset them");
    }
    if (options_.update_golden && options_.repeats < 2) {
      throw InputError(
          "--update-golden needs --repeats >= 2: a golden comes from a run whose "
          "reproducibility was checked, got --repeats " +
          std::to_string(options_.repeats));
    }
    perturbations_ = ParsePerturbations(options_.perturb, arms_, options_.repeats);
    out_dir_ = options_.out_dir.empty() ? "out/" + recipe_.name : options_.out_dir;
    baseline_ = recipe_.compare.baseline;
    localize_budget_ = options_.localize_runs;  // shared by every rerun that names a difference
    fingerprint_ = LocalFingerprint(recipe_);
    std::error_code ec;
    if (fs::exists(goldens_.dir(), ec) && !fs::is_directory(goldens_.dir(), ec)) {
      throw InputError(goldens_.dir() + ": the golden store is not a directory");
    }
    if (options_.update_golden) LockGoldenFolder();
    LoadGolden();
    PrepareOutput();
  }

  // --update-golden holds the recipe's folder of the golden store from before the golden is read
  // until it is replaced, so that two updates of one golden cannot interleave their compare and
  // replace. Runs that only check a golden take no lock: a replacement is a rename, so they read
  // the old golden or the new one.
  void LockGoldenFolder() {
    const fs::path folder = fs::path(goldens_.PathFor(recipe_.name, fingerprint_)).parent_path();
    std::error_code ec;
    fs::create_directories(folder, ec);
    if (ec) {
      throw InputError(folder.string() + ": cannot create the golden directory: " + ec.message());
    }
    golden_lock_ = std::make_unique<OutputLock>(
        folder.string(), "wait for its --update-golden to finish, then run again");
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

  Environment EnvironmentFor(const std::string& arm, int64_t index) const {
    Environment env;
    for (const Perturbation& p : perturbations_) {
      if (p.arm == arm && (p.run == 0 || p.run == index))
        env.push_back({"BITPARITY_PERTURB", p.spec});
    }
    return env;
  }

  LaunchOptions Launch(const std::string& arm, const std::string& trace, const Environment& env) {
    LaunchOptions launch;
    launch.executable = SelfExecutable();
    launch.worker.recipe_path = recipe_.path;
    launch.recipe_text = recipe_.text;
    launch.worker.arm = arm;
    launch.trace_path = trace;
    launch.log_dir = (fs::path(trace).parent_path() / "logs").string();
    launch.world_size = recipe_.world_size();
    launch.timeout_seconds = recipe_.parallel.timeout_seconds;
    launch.environment = env;
    launch.worker.memory_timeline = options_.memory_timeline;
    launch.worker.probes = probes();
    launch.trace_attributes[trace_keys::kCommandLine] = options_.command_line;
    return launch;
  }

  void LaunchAll() {
    const int64_t iterations = recipe_.train.iterations;
    const int64_t total = static_cast<int64_t>(arms_.size()) * options_.repeats * iterations;
    int64_t done = 0;
    const auto start = Clock::now();
    for (const std::string& arm : arms_) {
      for (int64_t k = 1; k <= options_.repeats; ++k) {
        if (InterruptSignal() != 0) {  // between two runs
          interrupted_ = InterruptSignal();
          infrastructure_error_ = "interrupted by " + SignalName(interrupted_);
          return;
        }
        ArmRun run;
        run.arm = arm;
        run.index = k;
        const fs::path dir = fs::path(out_dir_) / arm / ("run" + std::to_string(k));
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) {
          throw InfrastructureError(dir.string() +
                                    ": cannot create the run's output directory: " + ec.message());
        }
        run.trace_path = (dir / "trace.h5").string();
        run.environment = EnvironmentFor(arm, k);
        LaunchOptions launch = Launch(arm, run.trace_path, run.environment);
        if (!options_.quiet) {
          launch.on_progress = [&, arm, k](const ProgressEvent& e) {
            ++done;
            const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
            const double eta = done ? elapsed / done * static_cast<double>(total - done) : 0;
            char line[256];
            std::snprintf(line, sizeof(line),
                          "  %-12s run %lld/%lld  iteration %lld/%lld  loss %.6f  elapsed %.1f s"
                          "  remaining ~%.0f s",
                          arm.c_str(), static_cast<long long>(k),
                          static_cast<long long>(options_.repeats),
                          static_cast<long long>(e.iteration), static_cast<long long>(e.iterations),
                          e.loss, elapsed, eta);
            // On a terminal the run's line is rewritten in place ("\r", then clear to its end).
            console_ << (options_.terminal ? "\r" : "") << line
                     << (options_.terminal ? "\x1b[K" : "\n") << std::flush;
          };
        }
        LaunchResult result = LaunchArm(launch);
        if (options_.terminal && !options_.quiet) console_ << "\n" << std::flush;  // keep its line
        run.seconds = result.seconds;
        if (result.exit_code == kExitBadInput) throw InputError(result.failure);
        if (result.exit_code > 128) interrupted_ = result.exit_code - 128;
        if (result.exit_code != kExitPass) {
          CheckResult error;
          error.kind = CheckKind::kRun;
          error.arm = arm;
          error.name = arm + " run " + std::to_string(k);
          error.verdict = Verdict::kError;
          error.summary = FirstLine(result.failure);
          error.details =
              result.failure.substr(std::min(result.failure.size(), error.summary.size() + 1));
          error.figures["failed_rank"] = result.failed_rank;
          Record(error, {});
          infrastructure_error_ = result.failure;
          return;
        }
        run.trace = std::move(result.trace);
        done = (done / iterations + (done % iterations ? 1 : 0)) * iterations;
        runs_[arm].push_back(std::move(run));
      }
    }
  }

  // After an infrastructure error: every check the run would have made, errored with the reason,
  // so that the JUnit file and the report list the same testcases as a run that completed.
  void RecordChecksNotRun() {
    std::string failed_run;
    for (const CheckResult& c : checks_) {
      if (c.kind == CheckKind::kRun && c.verdict == Verdict::kError) failed_run = c.name;
    }
    const std::string reason =
        interrupted_ != 0 ? "not run: interrupted by " + SignalName(interrupted_)
        : failed_run.empty()
            ? "not run: " + FirstLine(infrastructure_error_)
            : "not run: " + failed_run + " failed (" + FirstLine(infrastructure_error_) + ")";
    auto not_run = [&](CheckKind kind, const std::string& arm, const std::string& name) {
      for (const CheckResult& c : checks_) {
        if (c.name == name) return;
      }
      CheckResult check;
      check.kind = kind;
      check.arm = arm;
      check.name = name;
      check.verdict = Verdict::kError;
      check.summary = reason;
      Record(check, {});
    };
    const ComparePolicy& policy = recipe_.compare;
    for (const std::string& arm : arms_)
      not_run(CheckKind::kReproduces, arm, arm + " reproduces itself");
    for (const std::string& arm : arms_) {
      if (arm == baseline_ || std::find(arms_.begin(), arms_.end(), baseline_) == arms_.end()) {
        continue;
      }
      for (const auto& [kind, what] :
           std::vector<std::pair<CheckKind, std::string>>{{CheckKind::kLoss, "loss"},
                                                          {CheckKind::kGradients, "gradients"},
                                                          {CheckKind::kParameters, "parameters"}}) {
        not_run(kind, arm, arm + " vs " + baseline_ + ": " + what);
      }
    }
    if (policy.memory_model > 0) {
      for (const std::string& arm : arms_) {
        not_run(CheckKind::kMemoryModel, arm, arm + ": peak memory vs model");
      }
    }
    for (const MemoryBound& bound : policy.memory) {
      not_run(CheckKind::kMemory, bound.arm, MemoryCheckName(bound));
    }
    for (const OverlapBound& bound : policy.overlap) {
      not_run(CheckKind::kOverlap, bound.arm, OverlapCheckName(bound));
    }
    if (probes()) {
      for (const std::string& arm : arms_) {
        not_run(CheckKind::kReplay, arm, arm + ": replays equal first pass");
      }
    }
    for (const std::string& arm : arms_) {
      if (TakesCensus(arm)) not_run(CheckKind::kCensus, arm, arm + ": recompute census");
    }
    if (std::find(arms_.begin(), arms_.end(), baseline_) != arms_.end()) {
      not_run(CheckKind::kGolden, baseline_, "golden: " + baseline_);
      not_run(CheckKind::kGoldenMemory, baseline_, "golden memory: " + baseline_);
    }
  }

  // Whether an arm replays recompute segments (the overlap arm under full recompute): its ranks
  // record the recompute census.
  bool TakesCensus(const std::string& arm) const {
    const ArmConfig& config = recipe_.arm(arm);
    return config.engine == EngineKind::kOverlap && config.recompute.full();
  }

  // Whether the ranks record node probes (--probes or [trace] probes = "nodes"); a run that
  // records a golden does, so that a later run under another fingerprint can be told the first
  // operation that differs from it.
  bool probes() const {
    return options_.probes || options_.update_golden || recipe_.trace.node_probes;
  }

  const Trace& TraceOf(const std::string& arm, int64_t index) const {
    return *runs_.at(arm).at(static_cast<size_t>(index - 1)).trace;
  }

  void RunChecks() {
    for (const std::string& arm : arms_) {
      std::vector<const Trace*> traces;
      for (const ArmRun& r : runs_.at(arm)) traces.push_back(&*r.trace);
      if (traces.size() >= 2) {
        Record(CheckReproduces(arm, traces),
               {{arm, 1}, {arm, static_cast<int64_t>(traces.size())}});
        if (checks_.back().verdict == Verdict::kFail) {
          pairs_.back() = {{arm, 1}, {arm, checks_.back().differing_run}};
        }
      } else {
        CheckResult skipped;
        skipped.kind = CheckKind::kReproduces;
        skipped.arm = arm;
        skipped.name = arm + " reproduces itself";
        skipped.verdict = Verdict::kSkipped;
        skipped.summary = "one run only (--repeats 1)";
        Record(skipped, {});
      }
    }
    if (probes()) {
      for (const std::string& arm : arms_) {
        std::vector<const Trace*> traces;
        for (const ArmRun& r : runs_.at(arm)) traces.push_back(&*r.trace);
        Record(CheckReplays(arm, traces), {});
      }
    }
    for (const std::string& arm : arms_) {
      if (!TakesCensus(arm)) continue;
      std::vector<const Trace*> traces;
      for (const ArmRun& r : runs_.at(arm)) traces.push_back(&*r.trace);
      Record(CheckRecomputeCensus(arm, traces), {});
    }
    const bool have_baseline = runs_.count(baseline_) > 0;
    const ComparePolicy& policy = recipe_.compare;
    for (const std::string& arm : arms_) {
      if (arm == baseline_ || !have_baseline) continue;
      const Trace& a = TraceOf(arm, 1);
      const Trace& b = TraceOf(baseline_, 1);
      Record(CheckLosses(arm, a, baseline_, b, policy.loss), {{arm, 1}, {baseline_, 1}});
      Record(CheckGradients(arm, a, baseline_, b, policy.gradients), {{arm, 1}, {baseline_, 1}});
      Record(CheckParameters(arm, a, baseline_, b, policy.params), {{arm, 1}, {baseline_, 1}});
      for (size_t c = checks_.size() - 3; c < checks_.size(); ++c) {
        if (checks_[c].verdict != Verdict::kFail) continue;
        AddFirstDivergentOperations(a, b, /*across_arms=*/true, &checks_[c]);
      }
    }
    if (policy.memory_model > 0) {
      for (const std::string& arm : arms_) {
        Record(CheckMemoryModel(arm, TraceOf(arm, 1), policy.memory_model), {});
      }
    }
    for (const MemoryBound& bound : policy.memory) {
      if (!runs_.count(bound.arm) || !runs_.count(bound.of)) {
        CheckResult skipped;
        skipped.kind = CheckKind::kMemory;
        skipped.arm = bound.arm;
        skipped.name = MemoryCheckName(bound);
        skipped.verdict = Verdict::kSkipped;
        skipped.summary =
            "arm '" + (runs_.count(bound.arm) ? bound.of : bound.arm) + "' was not run (--arms)";
        Record(skipped, {});
        continue;
      }
      Record(CheckMemory(bound, PeakBytes(TraceOf(bound.arm, 1)), PeakBytes(TraceOf(bound.of, 1))),
             {});
    }
    for (const OverlapBound& bound : policy.overlap) {
      if (!runs_.count(bound.arm)) {
        CheckResult skipped;
        skipped.kind = CheckKind::kOverlap;
        skipped.arm = bound.arm;
        skipped.name = OverlapCheckName(bound);
        skipped.verdict = Verdict::kSkipped;
        skipped.summary = "arm '" + bound.arm + "' was not run (--arms)";
        Record(skipped, {});
        continue;
      }
      std::vector<const Trace*> traces;
      for (const ArmRun& r : runs_.at(bound.arm)) traces.push_back(&*r.trace);
      Record(CheckOverlap(bound, traces), {});
    }
    if (have_baseline) {
      RecordGoldenChecks();
    } else {
      for (CheckKind kind : {CheckKind::kGolden, CheckKind::kGoldenMemory}) {
        CheckResult skipped;
        skipped.kind = kind;
        skipped.arm = baseline_;
        skipped.name = (kind == CheckKind::kGolden ? "golden: " : "golden memory: ") + baseline_;
        skipped.verdict = Verdict::kSkipped;
        skipped.summary = "the baseline arm '" + baseline_ + "' was not run (--arms)";
        Record(skipped, {});
      }
    }
  }

  void RecordGoldenChecks() {
    GoldenCheckInput input;
    input.arm = baseline_;
    input.run = &TraceOf(baseline_, 1);
    input.lookup = &golden_lookup_;
    input.fingerprint = fingerprint_;
    input.recipe_path = recipe_.path;
    input.require = options_.require_golden;
    input.memory_tolerance = recipe_.compare.golden_memory;
    input.skip_reason = golden_skip_;
    const Fingerprint recorded = TraceFingerprint(*input.run);
    if (recorded.key != fingerprint_.key) {
      input.skip_reason = "the ranks ran under fingerprint " + recorded.key + ", not " +
                          fingerprint_.key + " (differs in " +
                          fingerprint_.DifferingFields(recorded) + ")";
    }
    input.rerun_with_probes = [this](int64_t iteration) {
      return Rerun({baseline_, 1}, iteration, "golden_explain");
    };
    std::vector<CheckResult> results = CheckGoldens(input);
    Record(results[0], {{baseline_, 1}, {"", 0}});
    Record(results[1], {});
  }

  void Record(CheckResult check, std::vector<ComparedRun> runs) {
    // The check's time is its runs' (each counted once); an arm-wide check takes all its runs.
    std::vector<const ArmRun*> timed;
    auto add = [&](const ArmRun& run) {
      if (std::find(timed.begin(), timed.end(), &run) == timed.end()) timed.push_back(&run);
    };
    for (const ComparedRun& r : runs) {
      auto arm = runs_.find(r.arm);
      if (arm != runs_.end() && r.run >= 1 && r.run <= static_cast<int64_t>(arm->second.size())) {
        add(arm->second[static_cast<size_t>(r.run - 1)]);
      }
    }
    if (runs.empty() && runs_.count(check.arm)) {
      for (const ArmRun& run : runs_.at(check.arm)) add(run);
    }
    for (const ArmRun* run : timed) check.seconds += run->seconds;
    checks_.push_back(std::move(check));
    pairs_.push_back(std::move(runs));
  }

  // Reruns one run up to `iteration` with full grad dumps there; nullopt if it failed or the
  // rerun budget is spent.
  std::optional<Trace> Rerun(const ComparedRun& ref, int64_t iteration, const std::string& label) {
    // Checks that compared the same runs (loss, gradients, parameters of one arm pair) share the
    // reruns.
    const std::string key =
        ref.arm + "/" + std::to_string(ref.run) + "@" + std::to_string(iteration);
    if (auto cached = reruns_.find(key); cached != reruns_.end()) return cached->second;
    if (localize_budget_ <= 0) return std::nullopt;
    --localize_budget_;
    const fs::path dir = fs::path(out_dir_) / "localize" / label;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return std::nullopt;  // localizing is a help; the check's verdict stands without it
    const std::string trace = (dir / "trace.h5").string();
    LaunchOptions launch =
        Launch(ref.arm, trace, runs_.at(ref.arm).at(static_cast<size_t>(ref.run - 1)).environment);
    launch.worker.dump_at = {iteration};
    launch.worker.stop_after = iteration;
    launch.worker.probes = true;
    if (!options_.quiet) {
      console_ << "  localizing: rerunning " << ref.arm << " run " << ref.run
               << " with full gradient dumps at iteration " << iteration << " and node probes\n";
    }
    LaunchResult result = LaunchArm(launch);
    if (result.exit_code != kExitPass) return std::nullopt;
    reruns_[key] = std::move(result.trace);
    return reruns_[key];
  }

  void Localize() {
    LocalizeFailures(checks_, pairs_, golden(),
                     [this](const ComparedRun& run, int64_t iteration, const std::string& label) {
                       return Rerun(run, iteration, label);
                     });
  }

  // Two reruns of `arm` up to `window` with probes and the factor `request` changes; the
  // reproducibility check over them, or nullopt when one did not finish.
  std::optional<CheckResult> RerunPair(const std::string& arm, int64_t window,
                                       const std::string& label, int64_t threads,
                                       bool deterministic_algorithms) {
    std::vector<Trace> traces;
    for (int64_t k = 1; k <= 2; ++k) {
      const fs::path dir =
          fs::path(out_dir_) / "attribute" / arm / label / ("run" + std::to_string(k));
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) return std::nullopt;
      LaunchOptions launch =
          Launch(arm, (dir / "trace.h5").string(), runs_.at(arm).front().environment);
      launch.worker.stop_after = window;
      launch.worker.probes = true;
      launch.worker.threads = threads;
      launch.worker.deterministic_algorithms = deterministic_algorithms;
      LaunchResult result = LaunchArm(launch);
      if (result.exit_code != kExitPass) return std::nullopt;
      traces.push_back(std::move(result.trace));
    }
    return CheckReproduces(arm, {&traces[0], &traces[1]});
  }

  void Attribute() {
    if (!options_.attribution) return;
    for (CheckResult& check : checks_) {
      if (check.kind != CheckKind::kReproduces || check.verdict != Verdict::kFail) continue;
      // A developer switch that changes one run is the difference: nothing to attribute.
      const auto perturbed =
          std::find_if(perturbations_.begin(), perturbations_.end(),
                       [&](const Perturbation& p) { return p.arm == check.arm && p.run != 0; });
      if (perturbed != perturbations_.end()) {
        check.details += "attribution: not run: run " + std::to_string(perturbed->run) + " of " +
                         check.arm + " carries --perturb " + perturbed->spec +
                         ", which is the difference\n";
        continue;
      }
      AttributeFailure(
          recipe_.parallel.threads, recipe_.train.iterations,
          [&](const std::string& label, int64_t window, int64_t threads, bool deterministic) {
            return RerunPair(check.arm, window, label, threads, deterministic);
          },
          options_.quiet ? nullptr : &console_, &check);
    }
  }

  void UpdateGolden() {
    if (!options_.update_golden || !runs_.count(baseline_)) return;
    CheckResult* golden = nullptr;
    int failed = 0;
    for (CheckResult& c : checks_) {
      if (c.kind == CheckKind::kGolden && c.arm == baseline_) {
        golden = &c;
      } else if (c.kind == CheckKind::kGoldenMemory) {
        continue;  // against the golden being replaced
      } else if (c.verdict == Verdict::kFail || c.verdict == Verdict::kError) {
        ++failed;
      }
    }
    if (!golden) return;
    if (failed > 0) {
      golden->verdict = Verdict::kFail;
      golden->summary = "not updated: " + std::to_string(failed) +
                        " other check(s) failed, and a golden must come from a passing run";
      return;
    }
    // Say what the new golden replaced: updating is explicit, but a mismatch it papers over
    // must stay visible in the report.
    std::string replaced;
    if (golden->verdict == Verdict::kFail) {
      replaced = "; the golden it replaced differed: " + golden->summary;
      golden->details = "the replaced golden differed:\n" + golden->details;
      golden->figures["replaced_a_differing_golden"] = true;
    } else {
      replaced = golden->verdict == Verdict::kSkipped ? "; before: " + golden->summary
                                                      : "; the golden it replaced matched";
      golden->details.clear();
      golden->figures["replaced_a_differing_golden"] = false;
    }
    goldens_.Replace(golden_path_, TraceOf(baseline_, 1), fingerprint_, options_.command_line);
    golden->verdict = Verdict::kPass;
    golden->summary = "updated: wrote " + golden_path_ + replaced;
    golden->difference.reset();
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
    for (const std::string& arm : arms_) {
      if (!runs_.count(arm)) continue;
      ArmReport a{arm, ToString(recipe_.arm(arm).engine), {}};
      for (const ArmRun& r : runs_.at(arm)) {
        a.runs.push_back(SummarizeRun(*r.trace, r.trace_path, r.seconds, r.index));
      }
      report.arms.push_back(std::move(a));
    }
    std::vector<Throughput*> throughputs;  // one MFU denominator for every arm
    for (ArmReport& a : report.arms) {
      for (ArmRunReport& r : a.runs) throughputs.push_back(&r.throughput);
    }
    ShareBestCeiling(throughputs);
    report.checks = checks_;
    std::set<std::string> mapped;
    for (size_t c = 0; c < checks_.size() && c < pairs_.size(); ++c) {
      const std::vector<ComparedRun>& sides = pairs_[c];
      if (checks_[c].verdict != Verdict::kFail || sides.size() != 2 || sides[0].arm.empty() ||
          sides[1].arm.empty() || !runs_.count(sides[0].arm) || !runs_.count(sides[1].arm)) {
        continue;
      }
      const std::string title = sides[0].arm + " run " + std::to_string(sides[0].run) + " vs " +
                                sides[1].arm + " run " + std::to_string(sides[1].run);
      if (!mapped.insert(title).second) continue;
      DifferenceMap map = MapDifferences(title, TraceOf(sides[0].arm, sides[0].run),
                                         TraceOf(sides[1].arm, sides[1].run));
      if (!map.rows.empty()) report.difference_maps.push_back(std::move(map));
    }
    report.seconds = seconds;
    report.timestamp = started_utc_;
    report.developer_switches = developer_switches_;
    report.out_dir = out_dir_;
    report.exit_code = interrupted_ != 0 ? 128 + interrupted_ : ExitCodeOf(checks_);
    WriteFileAtomically((fs::path(out_dir_) / "junit.xml").string(), JunitReport({report}));
    WriteFileAtomically((fs::path(out_dir_) / "report.json").string(),
                        JsonReport(report).dump(2) + "\n");
    WriteFileAtomically((fs::path(out_dir_) / "report.html").string(), HtmlReport(report));
    console_ << ConsoleReport(report) << std::flush;
    return report;
  }

  const RunOptions& options_;
  std::ostream& console_;
  Recipe recipe_;
  std::vector<std::string> arms_;
  std::vector<Perturbation> perturbations_;
  std::string out_dir_;
  std::string baseline_;
  Fingerprint fingerprint_;
  GoldenStore goldens_;
  std::string golden_path_;
  GoldenLookup golden_lookup_;
  std::string golden_skip_;
  std::map<std::string, std::vector<ArmRun>> runs_;
  std::vector<CheckResult> checks_;
  std::vector<std::vector<ComparedRun>> pairs_;  // per check: the runs it compared
  std::string started_utc_ = UtcTimestamp(/*with_zone=*/false);
  const std::vector<std::string> developer_switches_ = ActiveDeveloperSwitches();
  std::unique_ptr<OutputFolder> output_;     // out_dir_, locked from PrepareOutput to the end
  std::unique_ptr<OutputLock> golden_lock_;  // on the golden's folder, with --update-golden
  std::map<std::string, Trace> reruns_;      // the localizer's, by "arm/run@iteration"
  int interrupted_ = 0;                      // the signal that interrupted the run (0: none)
  std::string infrastructure_error_;
  int64_t localize_budget_ = 0;
};

}  // namespace

RunReport RunRecipe(const RunOptions& options, std::ostream& console) {
  return RecipeRun(options, console).Run();
}

}  // namespace bitparity
