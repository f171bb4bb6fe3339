#ifndef BITPARITY_TRACE_NODE_PROBES_H_
#define BITPARITY_TRACE_NODE_PROBES_H_

// Node probes ([trace] probes = "nodes", or --probes): every tensor that crosses the boundary of
// a schedule operation (an output of a forward or replay pass, a gradient a backward pass
// returns for one of its inputs) is recorded as a ProbeRecord (trace/trace.h): its XXH3-64 digest,
// dtype and shape under the operation's key, in the order this rank ran the operations. Two runs
// compared record by record name the first operation whose output differs while everything the
// rank computed before it (its inputs included) matched: the operation that broke the bits.
//
// Both engines record the same keys at the same boundaries. The overlap engine probes its
// schedule's nodes as it runs them. The reference engine runs a layer as one graph
// (GptModel::DecoderLayer) and probes the same points inside it: the outputs where the overlap's
// nodes end (RecordOutputs) and, through tensor hooks, the gradients that reach the tensors where
// they begin (RecordInputGradients); a checkpoint's replay is marked (SetReplaying) so that its
// outputs are "replay" records.
//
// The recorder belongs to the thread that trains a rank (a rank process has one; the test
// harness runs ranks as threads); a hook keeps a pointer to it, so that a backward pass run on
// another thread records into the right rank. Off, every call is one thread-local flag test.

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/schedule_vocabulary.h"
#include "trace/trace.h"

namespace bitparity {

// Where a probed tensor was: the operation's key without the slot.
struct ProbeSite {
  int64_t microbatch = 0;
  int64_t chunk = 0;
  std::string layer;  // the model's name of the layer ("decoder 2", "mtp 0"), "" for chunk-wide
  NodeKind node = NodeKind::kAttn;
  Phase phase = Phase::kForward;  // forward, replay or backward
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

  // The reference engine's side. While replaying is set, RecordOutputs records "replay" records,
  // else "forward" ones; `site.phase` is ignored.
  static void SetReplaying(bool replaying);
  static bool replaying();
  // The model chunk the reference engine is running (its pipeline schedule sets it; 0 without),
  // for ReferenceProbeSite.
  static void SetChunk(int64_t chunk);
  static void RecordOutputs(const ProbeSite& site, const std::vector<at::Tensor>& tensors);
  // Records, when the backward pass reaches them, the gradients of `tensors` as `site.node`'s
  // input gradients (slot k for tensors[k]) under phase backward; a tensor that requires no
  // gradient (a no-grad first pass) is skipped.
  static void RecordInputGradients(const ProbeSite& site, const std::vector<at::Tensor>& tensors);
};

// The probe name of a model layer: "decoder K" for K < decoder_layers, else "mtp D".
std::string ProbeLayerName(int64_t model_layer, int64_t decoder_layers);

// The site of `node` of model layer `model_layer` for `microbatch` in the chunk the reference
// engine is running (NodeProbes::chunk()); its phase is set by the recording call.
ProbeSite ReferenceProbeSite(int64_t microbatch, int64_t model_layer, int64_t decoder_layers,
                             NodeKind node);

// While alive, the thread's RecordOutputs are "replay" records (a checkpoint's replay).
class ProbeReplayScope {
 public:
  ProbeReplayScope() : previous_(NodeProbes::replaying()) { NodeProbes::SetReplaying(true); }
  ~ProbeReplayScope() { NodeProbes::SetReplaying(previous_); }
  ProbeReplayScope(const ProbeReplayScope&) = delete;
  ProbeReplayScope& operator=(const ProbeReplayScope&) = delete;

 private:
  bool previous_;
};

}  // namespace bitparity

#endif  // BITPARITY_TRACE_NODE_PROBES_H_
