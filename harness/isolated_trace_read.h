#ifndef BITPARITY_HARNESS_ISOLATED_TRACE_READ_H_
#define BITPARITY_HARNESS_ISOLATED_TRACE_READ_H_

#include <string>

#include "trace/trace.h"

namespace bitparity {

// ReadTrace for a file from outside (diff's inputs, goldens, timeline): the file is read first in
// a child process, because the HDF5 library (1.10) trusts lengths stored in a file's global heap
// and a crafted or corrupt file makes it crash. A child that crashes makes the file bad input
// ("the HDF5 library crashed reading it (<signal>)"), never a crash of bitparity; so does a
// child that takes longer than `timeout_seconds` (HDF5 loops forever on some corrupt files).
Trace ReadTraceIsolated(const std::string& path, bool require_complete = true,
                        double timeout_seconds = 120);

// The same defence for a checkpoint file a user hands `bitparity arm --resume-from`: read in a
// child process, it is usable (returns) or bad input naming it (InputError), before any rank
// process opens it.
void CheckCheckpointIsolated(const std::string& path, double timeout_seconds = 120);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_ISOLATED_TRACE_READ_H_
