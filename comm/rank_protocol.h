#ifndef BITPARITY_COMM_RANK_PROTOCOL_H_
#define BITPARITY_COMM_RANK_PROTOCOL_H_

// The contract between the harness and a rank process (`bitparity worker`), spelled once for
// both sides of the process boundary: the worker's command line, the lines it prints that the
// harness reads, the name of the trace part it writes, and the variables the harness passes it.
// The launcher builds its command lines and parses its output through this header; the worker's
// command line is parsed and its lines are printed through it. Torch-free.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bitparity {

// The subcommand that makes the bitparity binary a rank process.
inline constexpr char kWorkerCommand[] = "worker";

// The worker's flags.
inline constexpr char kWorkerFlagRecipe[] = "--recipe";
inline constexpr char kWorkerFlagArm[] = "--arm";
inline constexpr char kWorkerFlagOutDir[] = "--out-dir";
inline constexpr char kWorkerFlagDumpAt[] = "--dump-at";
inline constexpr char kWorkerFlagStopAfter[] = "--stop-after";
inline constexpr char kWorkerFlagMemoryTimeline[] = "--memory-timeline";
inline constexpr char kWorkerFlagProbes[] = "--probes";
inline constexpr char kWorkerFlagRecipeDigest[] = "--recipe-digest";
inline constexpr char kWorkerFlagThreads[] = "--threads";
inline constexpr char kWorkerFlagDeterministicAlgorithms[] = "--deterministic-algorithms";
inline constexpr char kWorkerFlagCheckpointAt[] = "--checkpoint-at";
inline constexpr char kWorkerFlagCheckpointDir[] = "--checkpoint-dir";
inline constexpr char kWorkerFlagResumeFrom[] = "--resume-from";
inline constexpr char kWorkerFlagCheckSwitches[] = "--check-switches";

// Variables the harness sets for a rank (the world's own, RANK, WORLD_SIZE, MASTER_ADDR, ..., are
// torchrun's and Slurm's; see comm/rank_context.h).
inline constexpr char kFaultVariable[] = "BITPARITY_FAULT";           // runtime/debug_switches.h
inline constexpr char kPerturbVariable[] = "BITPARITY_PERTURB";       // runtime/debug_switches.h
inline constexpr char kInjectBugVariable[] = "BITPARITY_INJECT_BUG";  // the same

// The developer switches set in this process's environment, as "NAME=value" (empty when none):
// each changes what the ranks compute or how they fail, so traces and reports record them.
std::vector<std::string> ActiveDeveloperSwitches();

// How long a rank's collectives wait for a peer before they give up (exit 3): a little less than
// the recipe's timeout_s, so that a rank stuck waiting for a hung peer exits on its own and the
// launcher can tell the hung rank from its victims; and a rank that exits 3 sooner after its
// last progress than this failed on its own, not as a victim.
inline double CollectiveTimeoutSeconds(double recipe_timeout_seconds) {
  return recipe_timeout_seconds * 0.6 > 1.0 ? recipe_timeout_seconds * 0.6 : 1.0;
}

// A rank's exit code when it failed on its own (an unexpected exception, not bad input and not
// a collective that lost its peers): the launcher names such a rank as the culprit. The other
// codes are core/errors.h's: 0 done, 2 bad input, 3 infrastructure (a peer or the machine).
inline constexpr int kRankExitFailed = 1;

// What one rank process is asked to do: train `arm` of the recipe and write its trace part into
// `out_dir` (RankPartFileName).
struct WorkerRequest {
  std::string recipe_path;
  // RecipeDigest of the text the launcher read; the rank refuses a recipe file that differs.
  std::string recipe_digest;
  std::string arm;
  std::string out_dir;
  std::vector<int64_t> dump_at;  // also store full main grads at these iterations
  int64_t stop_after = 0;        // stop after this iteration (0: run them all)
  bool memory_timeline = false;  // record live bytes at every phase mark
  bool probes = false;           // node probes, whatever the recipe's [trace] probes says
  // The factors an attribution rerun changes (harness/attribution.h): intra-op threads instead
  // of the recipe's [parallel] threads (0: the recipe's), and deterministic algorithms forced
  // whatever else in the rank turns them off.
  int64_t threads = 0;
  bool deterministic_algorithms = false;
  // Restart replay (runtime/checkpoint.h): save this rank's checkpoint after each of these
  // iterations into CheckpointFolder(checkpoint_dir, K); start from the checkpoint folder
  // `resume_from` (rank_<r>.h5 per rank) instead of from the initial weights.
  std::vector<int64_t> checkpoint_at;
  std::string checkpoint_dir;
  std::string resume_from;
  // Build the model, check the developer switches against it (a perturbation's parameter and
  // element on the rank it targets), and exit without training or writing a part.
  bool check_switches_only = false;
};

// The arguments that start a rank process for `request`, after the executable:
// {"worker", "--recipe", R, "--arm", A, "--out-dir", D, ...}.
std::vector<std::string> WorkerArguments(const WorkerRequest& request);

// An external arm's rank process (the program of a recipe's [arms.NAME] command) gets the same
// request as variables instead of flags, every path absolute (docs/external-arms.md); the Python
// recorder (python/bitparity/) reads them. Variables for the request's unset options are absent.
inline constexpr char kExternalRecipeVariable[] = "BITPARITY_RECIPE";
inline constexpr char kExternalRecipeDigestVariable[] = "BITPARITY_RECIPE_DIGEST";
inline constexpr char kExternalArmVariable[] = "BITPARITY_ARM";
inline constexpr char kExternalOutDirVariable[] = "BITPARITY_OUT_DIR";
inline constexpr char kExternalDumpAtVariable[] = "BITPARITY_DUMP_AT";        // "3,7"
inline constexpr char kExternalStopAfterVariable[] = "BITPARITY_STOP_AFTER";  // an iteration
inline constexpr char kExternalMemoryTimelineVariable[] = "BITPARITY_MEMORY_TIMELINE";  // "1"
inline constexpr char kExternalProbesVariable[] = "BITPARITY_PROBES";                   // "1"
inline constexpr char kExternalThreadsVariable[] = "BITPARITY_THREADS";
inline constexpr char kExternalDeterministicAlgorithmsVariable[] =
    "BITPARITY_DETERMINISTIC_ALGORITHMS";  // "1"
// The counting CPU allocator's library (core/cpu_memory_library.cpp), set by the launcher.
inline constexpr char kExternalCpuMemoryLibraryVariable[] = "BITPARITY_CPU_MEMORY_LIBRARY";

// The variables that hand `request` to an external rank process.
std::vector<std::pair<std::string, std::string>> ExternalRankVariables(
    const WorkerRequest& request);

// The file name of a rank's trace part inside the worker's --out-dir: rank_00003.h5.
std::string RankPartFileName(int64_t rank);

// The first line every rank prints, naming its process and process group, so that a test can
// check that no member of the group outlives a failed run: "@rank rank=R pid=P pgid=G".
struct RankIdentity {
  int64_t rank = 0;
  int64_t pid = 0;
  int64_t process_group = 0;
};
std::string FormatRankIdentityLine(const RankIdentity& identity);
std::optional<RankIdentity> ParseRankIdentityLine(const std::string& line);

// The line rank 0 prints after every iteration, which the launcher follows for its progress
// display: "@progress iteration=3 iterations=20 loss=... grad_norm=... lr=... step_seconds=...
// peak_bytes=...".
struct ProgressEvent {
  int64_t iteration = 0;
  int64_t iterations = 0;
  double loss = 0;
  double grad_norm = 0;
  double learning_rate = 0;
  double step_seconds = 0;
  int64_t peak_bytes = 0;
};
std::string FormatProgressLine(const ProgressEvent& event);
// nullopt when `line` is not a progress line or a field does not parse.
std::optional<ProgressEvent> ParseProgressLine(const std::string& line);

}  // namespace bitparity

#endif  // BITPARITY_COMM_RANK_PROTOCOL_H_
