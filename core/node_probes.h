#ifndef BITPARITY_CORE_NODE_PROBES_H_
#define BITPARITY_CORE_NODE_PROBES_H_

// Node probes ([trace] probes = "nodes", or --probes): every tensor that crosses the boundary of
// a schedule operation (an output of a forward or replay pass, a gradient a backward pass
// returns for one of its inputs) is recorded as a ProbeRecord (core/trace.h): its XXH3-64 digest,
// dtype and shape under the operation's key, in the order this rank ran the operations. Two runs
// compared record by record name the first operation whose output differs while everything the
// rank computed before it (its inputs included) matched: the operation that broke the bits.
//
// The recorder belongs to the thread that trains a rank (a rank process has one; the test
// harness runs ranks as threads). Off, Record is one thread-local flag test.

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/trace.h"

namespace bitparity {

// Where a probed tensor was: the operation's key without the slot.
struct ProbeSite {
  int64_t microbatch = 0;
  int64_t chunk = 0;
  std::string layer;  // the model's name of the layer ("decoder 2", "mtp 0"), "" for chunk-wide
  std::string node;   // attn, mlp, moe_combine, mhc_post, mtp_post_process, ...
  std::string phase;  // forward, replay or backward
};

class NodeProbes {
 public:
  static void Enable(bool on);
  static bool enabled();
  static void SetIteration(int64_t iteration);
  // Records `tensors` at `site`, slot k for tensors[k] (an undefined tensor is skipped, the
  // slots of the others stay). No-op when disabled.
  static void Record(const ProbeSite& site, const std::vector<at::Tensor>& tensors);
  // The records so far, in order, forgotten here.
  static std::vector<ProbeRecord> Take();
};

}  // namespace bitparity

#endif  // BITPARITY_CORE_NODE_PROBES_H_
