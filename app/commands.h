#ifndef BITPARITY_APP_COMMANDS_H_
#define BITPARITY_APP_COMMANDS_H_

// What the small `bitparity` subcommands do once their options are parsed (app/subcommands.h
// declares them): info, validate, arm, diff, timeline and merge. Each returns the exit code;
// errors escape as exceptions (core/errors.h).

#include <cstdint>
#include <string>
#include <vector>

namespace bitparity {

// This build's LibTorch, BLAS, oneDNN and CPU levels, and the GPUs it sees; pins nothing.
int Info();

// A recipe checked and described: model, parallel layout, pipeline orders, each arm's segments.
int Validate(const std::string& path);

// `bitparity arm`: one arm trained once on its world of rank processes, its trace written.
struct ArmOptions {
  std::string recipe;
  std::string arm;
  std::string out;
  std::string log_dir;
  bool quiet = false;
  bool memory_timeline = false;
  bool probes = false;
  // Restart replay (runtime/checkpoint.h): save after these iterations into
  // <checkpoint_dir>/iteration_<K>/; start from the checkpoint folder resume_from.
  std::vector<int64_t> checkpoint_at;
  std::string checkpoint_dir;
  std::string resume_from;
};
int RunArm(const ArmOptions& options, const std::string& command_line);

// Two traces compared record by record (or, `explain`, across fingerprints).
int Diff(const std::string& path_a, const std::string& path_b, int64_t show, bool explain);

// A trace's memory timeline, one line (or CSV row) per phase mark.
int Timeline(const std::string& path, int64_t rank, int64_t iteration, bool csv);

// Rank parts merged into one trace.
int Merge(const std::string& parts_dir, const std::string& out);

}  // namespace bitparity

#endif  // BITPARITY_APP_COMMANDS_H_
