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
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/rank_protocol.h"
#include "harness/external_command.h"
#include "trace/trace.h"

namespace bitparity {

struct LaunchOptions {
  std::string executable;  // the bitparity binary (its `worker` subcommand)
  // An external arm: its program runs instead, with the request as variables
  // (ExternalRankVariables) and the recipe's folder as its working directory.
  std::optional<ExternalCommand> external;
  // What every rank is asked to do; the launcher sets out_dir to its own parts directory.
  WorkerRequest worker;
  // The recipe as the caller read it (non-empty): the ranks train this exact text, from a copy
  // in the launcher's own parts directory, never the recipe file again (an edit of the file
  // during the run changes nothing); each rank checks the copy's digest.
  std::string recipe_text;
  std::string trace_path;  // where the merged trace goes (written atomically)
  std::string log_dir;     // rank_<r>.log for every rank
  int64_t world_size = 1;
  double timeout_seconds = 300;
  std::vector<std::pair<std::string, std::string>> environment;  // extra variables for ranks
  std::map<std::string, std::string> trace_attributes;           // added to the merged trace
  std::function<void(const ProgressEvent&)> on_progress;         // rank 0's progress lines
  // False for ranks that write no part (worker.check_switches_only): success is every rank
  // exiting 0, and the result holds no trace.
  bool merge_trace = true;
};

struct LaunchResult {
  int exit_code = 0;  // kExitPass, kExitBadInput or kExitInfrastructure
  int64_t failed_rank = -1;
  std::string failure;  // what went wrong, with the failing rank's log tail
  double seconds = 0;
  Trace trace;  // the merged trace, as written to trace_path, when exit_code is kExitPass
};

// Runs the ranks and merges their trace. When the launcher process is interrupted
// (InterruptScope), the ranks are ended and the result's exit_code is 128 + the signal.
LaunchResult LaunchArm(const LaunchOptions& options);

// While one is alive, SIGINT and SIGTERM do not end the bitparity process: they are recorded,
// and the launcher ends its ranks, removes its temporaries and returns, so that the command can
// write its report (checks errored with "interrupted") and exit with 128 + the signal (130 for
// SIGINT, 143 for SIGTERM). The previous handlers come back with its end.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

// The signal recorded since the InterruptScope began (0: none).
int InterruptSignal();
// "SIGINT", "SIGTERM" or "signal N".
std::string SignalName(int signal);

// Removes what interrupted or killed bitparity processes left in `dir`: folders
// <name>.parts.<mark> and files <name>.tmp.<mark> whose mark (core/temporary_mark.h) proves the
// owner gone. Nothing without bitparity's mark, and nothing of another host or container.
void RemoveDeadProcessDebris(const std::string& dir);

// A TCP port on the loopback interface that nothing listens on at this moment (the OS's pick).
// InfrastructureError when no socket can be made.
int FreeLoopbackPort();

// The absolute path of the running executable.
std::string SelfExecutable();

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_LAUNCHER_H_
