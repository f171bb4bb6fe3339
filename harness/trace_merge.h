#ifndef BITPARITY_HARNESS_TRACE_MERGE_H_
#define BITPARITY_HARNESS_TRACE_MERGE_H_

// One trace from the per-rank parts that rank processes write into a folder (RankPartFileName,
// comm/rank_protocol.h): rank 0's attributes, every rank's records. The launcher merges the parts
// its own ranks wrote; `bitparity merge` merges parts from torchrun or Slurm, from outside.
//
// The contract: every part is the part of its rank and of one run. Each agrees with rank 0's part
// on the world size, the arm, the recipe text, the recipe digest, the run identity
// (Communicator::run_identity) and the developer switches its rank saw; each part's digest is its
// recipe text's; no part of a rank outside the world lies in the folder (a stray of a run of
// another world size). Anything else is InputError naming the part and what differs.

#include <functional>
#include <string>

#include "trace/trace.h"

namespace bitparity {

// Reads one part (an incomplete trace: a single rank's records).
using TracePartReader = std::function<Trace(const std::string& path)>;

// ReadTrace of a part in this process: for the parts the launcher's own ranks wrote.
Trace ReadOwnTracePart(const std::string& path);

Trace MergeTraceParts(const std::string& parts_dir, const TracePartReader& read = ReadOwnTracePart);

// The parts MergeTraceParts reads in `parts_dir` (world size from rank 0's part).
std::vector<std::string> TracePartPaths(const std::string& parts_dir, int64_t world_size);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_TRACE_MERGE_H_
