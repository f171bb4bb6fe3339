#include "harness/run_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>

#include "core/errors.h"
#include "core/recipe.h"
#include "core/trace.h"
#include "harness/fingerprint.h"
#include "harness/launcher.h"
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

std::string Format(const char* format, double a, double b = 0, double c = 0) {
  char buffer[128];
  std::snprintf(buffer, sizeof(buffer), format, a, b, c);
  return buffer;
}

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

std::string DefaultGoldenDir(const std::string& recipe_path) {
  fs::path dir = fs::absolute(recipe_path).parent_path();
  if (dir.filename() == "recipes") return (dir.parent_path() / "golden").string();
  return (dir / "golden").string();
}

class RecipeRun {
 public:
  RecipeRun(const RunOptions& options, std::ostream& console)
      : options_(options), console_(console), recipe_(LoadRecipe(options.recipe_path)) {}

  RunOutcome Run() {
    const auto start = Clock::now();
    Prepare();
    LaunchAll();
    if (infrastructure_error_.empty()) {
      RunChecks();
      Localize();
      UpdateGolden();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return Finish(seconds);
  }

 private:
  void Prepare() {
    arms_ = options_.arms.empty() ? recipe_.arm_names() : options_.arms;
    for (const std::string& arm : arms_) recipe_.arm(arm);  // InputError if unknown
    // The baseline first, then the others in name order.
    std::stable_partition(arms_.begin(), arms_.end(),
                          [&](const std::string& a) { return a == recipe_.compare.baseline; });
    if (options_.repeats < 1) throw InputError("--repeats must be >= 1");
    perturbations_ = ParsePerturbations(options_.perturb, arms_, options_.repeats);
    out_dir_ = options_.out_dir.empty() ? "out/" + recipe_.name : options_.out_dir;
    baseline_ = recipe_.compare.baseline;
    fingerprint_ = LocalFingerprint(recipe_);
    golden_dir_ =
        options_.golden_dir.empty() ? DefaultGoldenDir(recipe_.path) : options_.golden_dir;
    golden_path_ = (fs::path(golden_dir_) / recipe_.name / (fingerprint_.key + ".h5")).string();
    LoadGolden();
    std::error_code ec;
    fs::create_directories(out_dir_, ec);
    if (ec) throw InputError(out_dir_ + ": cannot create the output directory: " + ec.message());
  }

  // The golden for this fingerprint, read before any training so that an unusable one is
  // reported as bad input (and never overwritten).
  void LoadGolden() {
    if (options_.no_golden) {
      golden_skip_ = options_.no_golden_reason;
      return;
    }
    if (fs::exists(golden_path_)) {
      try {
        golden_ = ReadTrace(golden_path_);
      } catch (const InputError& e) {
        throw InputError(std::string("golden unusable (left unchanged): ") + e.what());
      }
      return;
    }
    std::string others;
    const fs::path dir = fs::path(golden_dir_) / recipe_.name;
    std::error_code ec;
    if (fs::is_directory(dir, ec)) {
      for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (entry.path().extension() != ".h5") continue;
        std::string why;
        try {
          Fingerprint other = TraceFingerprint(ReadTrace(entry.path().string()));
          why = "differs in " + fingerprint_.DifferingFields(other);
        } catch (const InputError&) {
          why = "unreadable";
        }
        others +=
            (others.empty() ? "" : "; ") + entry.path().filename().string() + " (" + why + ")";
      }
    }
    golden_skip_ = "no golden for this machine's fingerprint " + fingerprint_.key + " in " +
                   dir.string() + (others.empty() ? "" : "; found " + others) +
                   (options_.update_golden ? "" : "; record one with --update-golden");
  }

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
    launch.recipe_path = recipe_.path;
    launch.arm = arm;
    launch.trace_path = trace;
    launch.log_dir = (fs::path(trace).parent_path() / "logs").string();
    launch.world_size = recipe_.world_size();
    launch.timeout_seconds = recipe_.parallel.timeout_seconds;
    launch.environment = env;
    if (options_.memory_timeline) launch.worker_arguments.push_back("--memory-timeline");
    launch.trace_attributes["command_line"] = options_.command_line;
    return launch;
  }

  void LaunchAll() {
    const int64_t iterations = recipe_.train.iterations;
    const int64_t total = static_cast<int64_t>(arms_.size()) * options_.repeats * iterations;
    int64_t done = 0;
    const auto start = Clock::now();
    for (const std::string& arm : arms_) {
      for (int64_t k = 1; k <= options_.repeats; ++k) {
        ArmRun run;
        run.arm = arm;
        run.index = k;
        const fs::path dir = fs::path(out_dir_) / arm / ("run" + std::to_string(k));
        fs::create_directories(dir);
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
                          "  remaining ~%.0f s\n",
                          arm.c_str(), static_cast<long long>(k),
                          static_cast<long long>(options_.repeats),
                          static_cast<long long>(e.iteration), static_cast<long long>(e.iterations),
                          e.loss, elapsed, eta);
            console_ << line << std::flush;
          };
        }
        LaunchResult result = LaunchArm(launch);
        run.seconds = result.seconds;
        if (result.exit_code == kExitBadInput) throw InputError(result.failure);
        if (result.exit_code != kExitPass) {
          CheckResult error;
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
        run.trace = ReadTrace(run.trace_path);
        done = (done / iterations + (done % iterations ? 1 : 0)) * iterations;
        runs_[arm].push_back(std::move(run));
      }
    }
  }

  const Trace& TraceOf(const std::string& arm, int64_t index) const {
    return *runs_.at(arm).at(static_cast<size_t>(index - 1)).trace;
  }

  void RunChecks() {
    for (const std::string& arm : arms_) {
      std::vector<const Trace*> traces;
      for (const ArmRun& r : runs_.at(arm)) traces.push_back(&*r.trace);
      if (traces.size() >= 2) {
        Record(CheckReproduces(arm, traces), {{arm, 1}, {arm, traces.size()}});
        if (checks_.back().verdict == Verdict::kFail) {
          const int64_t k = checks_.back().figures.value("differing_run", int64_t{2});
          pairs_.back() = {{arm, 1}, {arm, k}};
        }
      } else {
        CheckResult skipped;
        skipped.name = arm + " reproduces itself";
        skipped.verdict = Verdict::kSkipped;
        skipped.summary = "one run only (--repeats 1)";
        Record(skipped, {});
      }
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
    }
    if (policy.memory_model > 0) {
      for (const std::string& arm : arms_) {
        Record(CheckMemoryModel(arm, TraceOf(arm, 1), policy.memory_model), {});
      }
    }
    for (const MemoryBound& bound : policy.memory) {
      if (!runs_.count(bound.arm) || !runs_.count(bound.of)) {
        CheckResult skipped;
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
    if (have_baseline) {
      const Trace& run = TraceOf(baseline_, 1);
      Fingerprint recorded = TraceFingerprint(run);
      std::string skip = golden_skip_;
      if (recorded.key != fingerprint_.key) {
        skip = "the ranks ran under fingerprint " + recorded.key + ", not " + fingerprint_.key +
               " (differs in " + fingerprint_.DifferingFields(recorded) + ")";
      }
      Record(CheckGolden(baseline_, run, golden_ ? &*golden_ : nullptr, skip),
             {{baseline_, 1}, {"", 0}});
    } else {
      CheckResult skipped;
      skipped.name = "golden: " + baseline_;
      skipped.verdict = Verdict::kSkipped;
      skipped.summary = "the baseline arm '" + baseline_ + "' was not run (--arms)";
      Record(skipped, {});
    }
  }

  using RunRef = std::pair<std::string, size_t>;  // (arm, 1-based run); arm "" = the golden
  void Record(CheckResult check, std::vector<RunRef> runs) {
    checks_.push_back(std::move(check));
    pairs_.push_back(std::move(runs));
  }

  // Reruns one run up to `iteration` with full grad dumps there; nullopt if it failed.
  std::optional<Trace> Rerun(const RunRef& ref, int64_t iteration, const std::string& label) {
    if (localize_budget_ <= 0) return std::nullopt;
    --localize_budget_;
    const fs::path dir = fs::path(out_dir_) / "localize" / label;
    fs::create_directories(dir);
    const std::string trace = (dir / "trace.h5").string();
    LaunchOptions launch =
        Launch(ref.first, trace, runs_.at(ref.first).at(ref.second - 1).environment);
    launch.worker_arguments.insert(
        launch.worker_arguments.end(),
        {"--dump-at", std::to_string(iteration), "--stop-after", std::to_string(iteration)});
    if (!options_.quiet) {
      console_ << "  localizing: rerunning " << ref.first << " run " << ref.second
               << " with full gradient dumps at iteration " << iteration << "\n";
    }
    LaunchResult result = LaunchArm(launch);
    if (result.exit_code != kExitPass) return std::nullopt;
    return ReadTrace(trace);
  }

  // For failed checks whose first difference is a gradient that was not dumped, rerun the two
  // runs involved with dumps at that iteration and name the first differing element.
  void Localize() {
    localize_budget_ = options_.localize_runs;
    for (size_t i = 0; i < checks_.size(); ++i) {
      CheckResult& check = checks_[i];
      if (check.verdict != Verdict::kFail || !check.difference) continue;
      Difference& d = *check.difference;
      if (d.record != "grad_digest" || d.tensor || pairs_[i].size() != 2) continue;
      const RunRef& first = pairs_[i][0];
      const RunRef& second = pairs_[i][1];
      const std::string label = "check" + std::to_string(i + 1);
      std::optional<Trace> a =
          first.first.empty() ? golden_ : Rerun(first, d.iteration, label + "_a");
      std::optional<Trace> b =
          second.first.empty() ? golden_ : Rerun(second, d.iteration, label + "_b");
      std::string note;
      const TensorDump* da = a ? FindDump(*a, d.rank, d.iteration, d.param) : nullptr;
      const TensorDump* db = b ? FindDump(*b, d.rank, d.iteration, d.param) : nullptr;
      if (!a || !b) {
        note = "not localized further (rerun budget spent or a rerun failed)";
      } else if (!da || !db) {
        note = "not localized further (no dump of " + d.param + " at iteration " +
               std::to_string(d.iteration) + " on both sides)";
      } else {
        TensorComparison c = CompareTensors(*da, *db);
        if (c.differing == 0) {
          note = "the rerun with dumps did not reproduce the difference (nondeterminism?)";
        } else {
          d.tensor = c;
          note = "localized by rerun: " + c.Describe();
          check.figures["first_element"] = c.first_index;
          check.figures["differing_elements"] = c.differing;
          check.figures["max_abs_diff"] = c.max_abs_diff;
          check.figures["max_ulps"] = c.max_ulps;
        }
      }
      check.summary = "first difference at " + d.Describe();
      std::ostringstream details;
      if (check.figures.contains("differing_records")) {
        details << check.figures["differing_records"].get<int64_t>() << " of "
                << check.figures["compared_records"].get<int64_t>() << " records differ\n";
      }
      details << note << "\n";
      check.details = details.str();
    }
  }

  void UpdateGolden() {
    if (!options_.update_golden || !runs_.count(baseline_)) return;
    CheckResult* golden = nullptr;
    int failed = 0;
    for (CheckResult& c : checks_) {
      if (c.name == "golden: " + baseline_) {
        golden = &c;
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
    Trace trace = TraceOf(baseline_, 1);
    trace.attributes["golden.fingerprint"] = fingerprint_.key;
    for (const auto& [field, value] : fingerprint_.fields) {
      trace.attributes["golden.fingerprint." + field] = value;
    }
    trace.attributes["golden.git_revision"] =
        trace.ranks[0].attributes.count("provenance.git_revision")
            ? trace.ranks[0].attributes.at("provenance.git_revision")
            : "unknown";
    trace.attributes["golden.created_utc"] = UtcTimestamp() + "Z";
    trace.attributes["golden.command_line"] = options_.command_line;
    fs::create_directories(fs::path(golden_path_).parent_path());
    WriteTrace(golden_path_, trace);
    golden->verdict = Verdict::kPass;
    golden->summary = "updated: wrote " + golden_path_ + replaced;
    golden->difference.reset();
  }

  RunOutcome Finish(double seconds) {
    RunOutcome outcome;
    outcome.suite.name = recipe_.name;
    outcome.suite.checks = checks_;
    outcome.suite.seconds = seconds;
    outcome.suite.timestamp = UtcTimestamp();
    outcome.suite.properties = {{"recipe", recipe_.path},
                                {"fingerprint", fingerprint_.Describe()},
                                {"baseline", baseline_}};
    bool failed = false, errored = !infrastructure_error_.empty();
    for (const CheckResult& c : checks_) {
      failed |= c.verdict == Verdict::kFail;
      errored |= c.verdict == Verdict::kError;
    }
    outcome.exit_code = errored ? kExitInfrastructure : failed ? kExitCheckFailed : kExitPass;

    nlohmann::json& j = outcome.report;
    j["recipe"] = {{"name", recipe_.name}, {"path", recipe_.path}};
    j["fingerprint"] = {{"key", fingerprint_.key}, {"fields", fingerprint_.fields}};
    j["baseline"] = baseline_;
    j["golden"] = {{"path", golden_path_}, {"present", golden_.has_value()}};
    j["repeats"] = options_.repeats;
    j["seconds"] = seconds;
    j["exit_code"] = outcome.exit_code;
    j["verdict"] = errored ? "error" : failed ? "fail" : "pass";
    j["arms"] = nlohmann::json::object();
    for (const auto& [arm, runs] : runs_) {
      nlohmann::json a;
      a["engine"] = ToString(recipe_.arm(arm).engine);
      a["runs"] = nlohmann::json::array();
      for (const ArmRun& r : runs) {
        nlohmann::json run;
        run["trace"] = r.trace_path;
        run["seconds"] = r.seconds;
        std::vector<float> loss;
        std::vector<double> step_seconds;
        std::vector<int64_t> peak;
        for (const IterationRecord& it : r.trace->ranks[0].iterations) {
          loss.push_back(it.loss);
          step_seconds.push_back(it.step_seconds);
        }
        for (size_t i = 0; i < r.trace->ranks[0].iterations.size(); ++i) {
          int64_t p = 0;
          for (const RankTrace& rank : r.trace->ranks)
            p = std::max(p, rank.iterations[i].peak_bytes);
          peak.push_back(p);
        }
        run["loss"] = loss;
        run["step_seconds"] = step_seconds;
        run["peak_bytes"] = peak;
        run["peak_bytes_max"] = PeakBytes(*r.trace);
        nlohmann::json ranks = nlohmann::json::array();
        for (const RankTrace& rank : r.trace->ranks) {
          ranks.push_back({{"rank", rank.rank},
                           {"peak_bytes", RankPeakBytes(rank)},
                           {"predicted_peak_bytes", PredictedPeakBytes(rank)}});
        }
        run["memory"] = ranks;
        a["runs"].push_back(run);
      }
      j["arms"][arm] = a;
    }
    j["checks"] = nlohmann::json::array();
    for (const CheckResult& c : checks_) {
      nlohmann::json check = {{"name", c.name},
                              {"verdict", ToString(c.verdict)},
                              {"summary", c.summary},
                              {"details", c.details},
                              {"figures", c.figures}};
      if (c.difference) {
        const Difference& d = *c.difference;
        nlohmann::json where = {{"iteration", d.iteration},
                                {"rank", d.rank},
                                {"record", d.record},
                                {"parameter", d.param}};
        if (d.tensor) {
          where["element"] = d.tensor->first_index;
          where["position"] = d.tensor->first_position;
          where["value_a"] = d.tensor->first_a;
          where["value_b"] = d.tensor->first_b;
          where["ulps"] = d.tensor->first_ulps;
          where["differing_elements"] = d.tensor->differing;
          where["max_abs_diff"] = d.tensor->max_abs_diff;
          nlohmann::json histogram = nlohmann::json::object();
          for (const auto& [bucket, count] : d.tensor->ulp_histogram) histogram[bucket] = count;
          where["ulp_histogram"] = histogram;
        }
        check["first_difference"] = where;
      }
      j["checks"].push_back(check);
    }

    WriteJunit((fs::path(out_dir_) / "junit.xml").string(), {outcome.suite});
    WriteJson((fs::path(out_dir_) / "report.json").string(), j);
    PrintSummary(outcome, seconds);
    return outcome;
  }

  void PrintSummary(const RunOutcome& outcome, double seconds) {
    std::ostringstream out;
    out << "\nrecipe " << recipe_.name << " (" << recipe_.path << "), fingerprint "
        << fingerprint_.key << ", " << Format("%.1f", seconds) << " s\n";
    out << "  arm                runs  loss first -> last        peak MiB  model MiB  "
           "s/iteration\n";
    for (const std::string& arm : arms_) {
      if (!runs_.count(arm)) continue;
      const Trace& t = *runs_.at(arm).front().trace;
      const auto& its = t.ranks[0].iterations;
      double step = 0;
      for (const IterationRecord& it : its) step += it.step_seconds;
      int64_t predicted = 0;
      for (const RankTrace& rank : t.ranks)
        predicted = std::max(predicted, PredictedPeakBytes(rank));
      char line[200];
      std::snprintf(line, sizeof(line), "  %-18s %4zu  %.6f -> %.6f    %8.2f   %8.2f   %8.3f\n",
                    arm.c_str(), runs_.at(arm).size(), its.front().loss, its.back().loss,
                    PeakBytes(t) / 1048576.0, predicted / 1048576.0,
                    its.empty() ? 0.0 : step / its.size());
      out << line;
    }
    out << "checks:\n" << FormatChecks(outcome.suite.checks);
    for (const CheckResult& c : outcome.suite.checks) {
      if (c.verdict == Verdict::kFail || c.verdict == Verdict::kError) {
        out << "\n" << c.name << ":\n  " << c.summary << "\n";
        std::istringstream details(c.details);
        std::string line;
        while (std::getline(details, line)) out << "  " << line << "\n";
      }
    }
    const char* verdict = outcome.exit_code == kExitPass          ? "PASS"
                          : outcome.exit_code == kExitCheckFailed ? "FAIL"
                                                                  : "ERROR";
    out << "result: " << verdict << " (exit " << outcome.exit_code << "); reports: " << out_dir_
        << "/junit.xml, " << out_dir_ << "/report.json\n";
    console_ << out.str() << std::flush;
  }

  const RunOptions& options_;
  std::ostream& console_;
  Recipe recipe_;
  std::vector<std::string> arms_;
  std::vector<Perturbation> perturbations_;
  std::string out_dir_;
  std::string baseline_;
  Fingerprint fingerprint_;
  std::string golden_dir_;
  std::string golden_path_;
  std::optional<Trace> golden_;
  std::string golden_skip_;
  std::map<std::string, std::vector<ArmRun>> runs_;
  std::vector<CheckResult> checks_;
  std::vector<std::vector<RunRef>> pairs_;  // per check: the runs it compared
  std::string infrastructure_error_;
  int64_t localize_budget_ = 0;
};

}  // namespace

RunOutcome RunRecipe(const RunOptions& options, std::ostream& console) {
  return RecipeRun(options, console).Run();
}

}  // namespace bitparity
