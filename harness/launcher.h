#ifndef BITPARITY_HARNESS_LAUNCHER_H_
#define BITPARITY_HARNESS_LAUNCHER_H_

// Starts one run of one arm as a group of rank processes on loopback, watches them, and merges
// their trace parts into one trace. Any rank that exits non-zero, dies from a signal, or
// outlives the recipe's timeout ends the whole group (no process is left behind) and the run
// is reported as an infrastructure fault naming the rank, how it failed and its log's tail.
// No trace is written unless every rank finished.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/trace.h"

namespace bitparity {

struct ProgressEvent {
  int64_t iteration = 0;
  int64_t iterations = 0;
  double loss = 0;
  double step_seconds = 0;
};

struct LaunchOptions {
  std::string executable;  // the bitparity binary (its hidden `worker` subcommand)
  std::string recipe_path;
  std::string arm;
  std::string trace_path;  // where the merged trace goes (written atomically)
  std::string log_dir;     // rank_<r>.log for every rank
  int64_t world_size = 1;
  double timeout_seconds = 300;
  std::vector<std::pair<std::string, std::string>> environment;  // extra variables for ranks
  std::vector<std::string> worker_arguments;                     // e.g. --dump-at 3 --stop-after 3
  std::map<std::string, std::string> trace_attributes;           // added to the merged trace
  std::function<void(const ProgressEvent&)> on_progress;         // rank 0's progress lines
};

struct LaunchResult {
  int exit_code = 0;  // kExitPass, kExitBadInput or kExitInfrastructure
  int64_t failed_rank = -1;
  std::string failure;  // what went wrong, with the failing rank's log tail
  double seconds = 0;
};

LaunchResult LaunchArm(const LaunchOptions& options);

// Merges the per-rank trace parts in `parts_dir` (rank_<r>.h5, written by rank processes) into
// one trace: rank 0's attributes, every rank's records. InputError if a part is missing,
// unreadable, or belongs to another world.
Trace MergeTraceParts(const std::string& parts_dir);

// The absolute path of the running executable.
std::string SelfExecutable();

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_LAUNCHER_H_
