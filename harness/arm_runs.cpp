#include "harness/arm_runs.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <ostream>

#include "comm/rank_protocol.h"
#include "core/errors.h"
#include "harness/restart_replay.h"
#include "trace/checkpoint_file.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

Perturbation ParsePerturbation(const std::string& text, const std::vector<std::string>& arms,
                               int64_t repeats) {
  const size_t a = text.find(':');
  const size_t b = a == std::string::npos ? a : text.find(':', a + 1);
  if (b == std::string::npos) {
    throw InputError("--perturb '" + text + "': expected ARM:RUN:SPEC (RUN a number or 'all')");
  }
  Perturbation p;
  p.text = text;
  p.arm = text.substr(0, a);
  const std::string run = text.substr(a + 1, b - a - 1);
  p.spec = text.substr(b + 1);
  try {
    p.parsed = ParseGradPerturbation(p.spec);
  } catch (const InputError& e) {
    throw InputError("--perturb '" + text + "': " + e.what());
  }
  if (!p.parsed.active()) throw InputError("--perturb '" + text + "': SPEC is empty");
  if (std::find(arms.begin(), arms.end(), p.arm) == arms.end()) {
    throw InputError("--perturb '" + text + "': no arm '" + p.arm + "' in this run");
  }
  if (run == "all") return p;
  try {
    p.run = std::stoll(run);
  } catch (const std::exception&) {
    p.run = -1;
  }
  if (p.run < 1 || p.run > repeats) {
    throw InputError("--perturb '" + text + "': RUN must be 1.." + std::to_string(repeats) +
                     " or 'all'");
  }
  return p;
}

}  // namespace

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

std::vector<Perturbation> ParsePerturbations(const std::vector<std::string>& texts,
                                             const std::vector<std::string>& arms,
                                             int64_t repeats) {
  std::vector<Perturbation> out;
  for (const std::string& text : texts) out.push_back(ParsePerturbation(text, arms, repeats));
  return out;
}

ArmRuns::ArmRuns(const Recipe& recipe, const RunOptions& options, std::string out_dir,
                 std::vector<Perturbation> perturbations, bool probes, std::ostream& console)
    : recipe_(recipe),
      options_(options),
      out_dir_(std::move(out_dir)),
      perturbations_(std::move(perturbations)),
      probes_(probes),
      console_(console),
      localize_budget_(options.localize_runs) {}

const Trace& ArmRuns::TraceOf(const std::string& arm, int64_t index) const {
  return *runs_.at(arm).at(static_cast<size_t>(index - 1)).trace;
}

std::vector<const Trace*> ArmRuns::TracesOf(const std::string& arm) const {
  std::vector<const Trace*> traces;
  for (const ArmRun& r : runs_.at(arm)) traces.push_back(&*r.trace);
  return traces;
}

Environment ArmRuns::EnvironmentFor(const std::string& arm, int64_t index) const {
  Environment env;
  for (const Perturbation& p : perturbations_) {
    if (p.arm == arm && (p.run == 0 || p.run == index))
      env.push_back({"BITPARITY_PERTURB", p.spec});
  }
  return env;
}

LaunchOptions ArmLaunch(const Recipe& recipe, const std::string& arm, const std::string& trace) {
  LaunchOptions launch;
  launch.executable = SelfExecutable();
  if (const ArmConfig& config = recipe.arm(arm); config.engine == EngineKind::kExternal) {
    launch.external = ResolveExternalCommand(recipe, config);
    // A built-in rank pins its environment itself; an external one gets it before its first
    // LibTorch call (and a rerun's own variables after it).
    launch.environment = ExternalLibrarySettings(recipe);
  }
  launch.worker.recipe_path = recipe.path;
  launch.recipe_text = recipe.text;
  launch.worker.arm = arm;
  launch.trace_path = trace;
  launch.log_dir = (fs::path(trace).parent_path() / "logs").string();
  launch.world_size = recipe.world_size();
  launch.timeout_seconds = recipe.parallel.timeout_seconds;
  return launch;
}

LaunchOptions ArmRuns::Launch(const std::string& arm, const std::string& trace,
                              const Environment& env) const {
  LaunchOptions launch = ArmLaunch(recipe_, arm, trace);
  launch.environment.insert(launch.environment.end(), env.begin(), env.end());
  launch.worker.memory_timeline = options_.memory_timeline;
  launch.worker.probes = probes_;
  launch.trace_attributes[trace_keys::kCommandLine] = options_.command_line;
  return launch;
}

std::optional<RunsStopped> ArmRuns::RunAll(const std::vector<std::string>& arms) {
  iterations_total_ =
      static_cast<int64_t>(arms.size()) * options_.repeats * recipe_.train.iterations;
  const std::vector<PlannedResume> resumes = PlanResumes(recipe_, arms);
  for (const PlannedResume& resume : resumes) {
    iterations_total_ += recipe_.train.iterations - resume.after_iteration;
  }
  iterations_done_ = 0;
  start_ = Clock::now();
  for (const std::string& arm : arms) {
    for (int64_t k = 1; k <= options_.repeats; ++k) {
      if (std::optional<RunsStopped> stopped = InterruptedBetweenRuns()) return stopped;
      if (std::optional<RunsStopped> stopped = RunOne(arm, k)) return stopped;
    }
  }
  for (const PlannedResume& resume : resumes) {
    if (std::optional<RunsStopped> stopped = InterruptedBetweenRuns()) return stopped;
    if (std::optional<RunsStopped> stopped = RunResume(resume)) return stopped;
  }
  return std::nullopt;
}

std::optional<RunsStopped> ArmRuns::InterruptedBetweenRuns() const {
  if (InterruptSignal() == 0) return std::nullopt;
  RunsStopped stopped;
  stopped.signal = InterruptSignal();
  stopped.reason = "interrupted by " + SignalName(stopped.signal);
  return stopped;
}

void ArmRuns::PrintProgress(const std::string& arm, const std::string& run,
                            const ProgressEvent& event) {
  ++iterations_done_;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  const double eta = elapsed / static_cast<double>(iterations_done_) *
                     static_cast<double>(iterations_total_ - iterations_done_);
  char line[256];
  std::snprintf(line, sizeof(line),
                "  %-12s %s  iteration %lld/%lld  loss %.6f  elapsed %.1f s  remaining ~%.0f s",
                arm.c_str(), run.c_str(), static_cast<long long>(event.iteration),
                static_cast<long long>(event.iterations), event.loss, elapsed, eta);
  // On a terminal the run's line is rewritten in place ("\r", then clear to its end).
  console_ << (options_.terminal ? "\r" : "") << line << (options_.terminal ? "\x1b[K" : "\n")
           << std::flush;
}

std::string ArmRuns::CheckpointsOf(const std::string& arm) const {
  return fs::absolute(fs::path(out_dir_) / arm / "run1" / "checkpoints").string();
}

std::optional<RunsStopped> ArmRuns::RunOne(const std::string& arm, int64_t index) {
  ArmRun run;
  run.arm = arm;
  run.index = index;
  run.environment = EnvironmentFor(arm, index);
  const fs::path dir = fs::path(out_dir_) / arm / ("run" + std::to_string(index));
  run.trace_path = (dir / "trace.h5").string();
  LaunchOptions launch = Launch(arm, run.trace_path, run.environment);
  if (index == 1 && SavesCheckpoints(recipe_, arm)) {
    launch.worker.checkpoint_at = recipe_.train.checkpoint_at;
    launch.worker.checkpoint_dir = CheckpointsOf(arm);
  }
  const std::string label = "run " + std::to_string(index) + "/" + std::to_string(options_.repeats);
  std::optional<RunsStopped> stopped = Launched(launch, label, std::to_string(index), &run);
  if (stopped) return stopped;
  // A run ends with all its iterations counted, whatever rank 0 printed.
  const int64_t iterations = recipe_.train.iterations;
  iterations_done_ = (iterations_done_ + iterations - 1) / iterations * iterations;
  runs_[arm].push_back(std::move(run));
  return std::nullopt;
}

std::optional<RunsStopped> ArmRuns::RunResume(const PlannedResume& resume) {
  ResumedRun resumed;
  resumed.plan = resume;
  ArmRun& run = resumed.run;
  run.arm = resume.arm;
  run.index = 0;
  run.environment = runs_.at(resume.arm).front().environment;  // the run it must equal
  run.trace_path = (fs::path(out_dir_) / ResumeFolder(resume) / "trace.h5").string();
  LaunchOptions launch = Launch(resume.arm, run.trace_path, run.environment);
  launch.worker.resume_from =
      CheckpointFolder(CheckpointsOf(resume.source), resume.after_iteration);
  const std::string label = "resume@" + std::to_string(resume.after_iteration) +
                            (resume.source == resume.arm ? "" : " from " + resume.source);
  std::optional<RunsStopped> stopped = Launched(launch, label, label, &run, /*own_input=*/true);
  if (!stopped) resumes_.push_back(std::move(resumed));
  return stopped;
}

// Runs `launch` for `run` (its trace and seconds filled in); the runs' stop when it did not
// finish, its error check named "<arm> run <name>". A rank's bad input is the user's (rethrown as
// InputError) unless `own_input`: a resumed run reads the checkpoint this command wrote, so a
// rank that refuses it is a failed run.
std::optional<RunsStopped> ArmRuns::Launched(LaunchOptions launch, const std::string& label,
                                             const std::string& name, ArmRun* run, bool own_input) {
  std::error_code ec;
  const fs::path dir = fs::path(run->trace_path).parent_path();
  fs::create_directories(dir, ec);
  if (ec) {
    throw InfrastructureError(dir.string() +
                              ": cannot create the run's output directory: " + ec.message());
  }
  const std::string arm = run->arm;
  if (!options_.quiet) {
    launch.on_progress = [this, arm, label](const ProgressEvent& e) {
      PrintProgress(arm, label, e);
    };
  }
  LaunchResult result = LaunchArm(launch);
  if (options_.terminal && !options_.quiet) console_ << "\n" << std::flush;  // keep its line
  run->seconds = result.seconds;
  if (result.exit_code == kExitBadInput && !own_input) throw InputError(result.failure);
  if (result.exit_code != kExitPass) {
    RunsStopped stopped;
    stopped.signal = result.exit_code > 128 ? result.exit_code - 128 : 0;
    stopped.reason = result.failure;
    CheckResult error;
    error.kind = CheckKind::kRun;
    error.arm = arm;
    error.name = CheckName(CheckKind::kRun, arm, name);
    error.verdict = Verdict::kError;
    error.summary = FirstLine(result.failure);
    error.details =
        result.failure.substr(std::min(result.failure.size(), error.summary.size() + 1));
    error.figures["failed_rank"] = result.failed_rank;
    stopped.failed_run = std::move(error);
    return stopped;
  }
  run->trace = std::move(result.trace);
  return std::nullopt;
}

const Trace* ArmRuns::ResumedTrace(const PlannedResume& resume) const {
  for (const ResumedRun& r : resumes_) {
    if (r.plan.arm == resume.arm && r.plan.source == resume.source &&
        r.plan.after_iteration == resume.after_iteration) {
      return &*r.run.trace;
    }
  }
  return nullptr;
}

std::optional<Trace> ArmRuns::Rerun(const ComparedRun& ref, int64_t iteration,
                                    const std::string& label) {
  // Checks that compared the same runs (loss, gradients, parameters of one arm pair) share the
  // reruns.
  const std::string key = ref.arm + "/" + std::to_string(ref.run) + "@" + std::to_string(iteration);
  if (auto cached = reruns_.find(key); cached != reruns_.end()) return cached->second;
  if (localize_budget_ <= 0 || InterruptSignal() != 0) return std::nullopt;  // none after a signal
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
             << " with full gradient dumps at iteration " << iteration << " and node probes\n"
             << std::flush;  // a log followed while it runs shows what the wait is for
  }
  LaunchResult result = LaunchArm(launch);
  if (result.exit_code != kExitPass) return std::nullopt;
  reruns_[key] = std::move(result.trace);
  return reruns_[key];
}

std::optional<CheckResult> ArmRuns::RerunPair(const std::string& arm, int64_t window,
                                              const std::string& label, int64_t threads,
                                              bool deterministic_algorithms) {
  std::vector<Trace> traces;
  for (int64_t k = 1; k <= 2; ++k) {
    if (InterruptSignal() != 0) return std::nullopt;  // no rerun starts after a signal
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

}  // namespace bitparity
