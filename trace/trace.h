#ifndef BITPARITY_TRACE_TRACE_H_
#define BITPARITY_TRACE_TRACE_H_

// A trace is what one run of one arm leaves behind: per iteration and rank the loss terms,
// gradient norm, digests of every parameter's main grad and of every parameter after the step,
// memory and time; full main-grad tensors at chosen iterations; the recipe and provenance.
// It is stored as one HDF5 file whose layout is documented in docs/trace-format.md.
// This header is torch-free so that the harness can read traces without LibTorch.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/memory.h"

namespace bitparity {

inline constexpr char kTraceSchema[] = "bitparity.trace";
inline constexpr int64_t kTraceSchemaVersion = 1;

// Scalars and digests of one iteration on one rank.
struct IterationRecord {
  int64_t iteration = 0;  // 1-based
  float loss = 0;         // global training loss, identical on every rank
  float lm_loss = 0;      // this rank's language-model loss (mean over its microbatches)
  float mtp_loss = 0;     // this rank's MTP loss (mean over depths and microbatches)
  float aux_loss = 0;     // this rank's load-balancing loss (sum over MoE layers, mean over µb)
  double grad_norm = 0;   // global main-grad norm before clipping
  double learning_rate = 0;
  int64_t peak_bytes = 0;   // peak CPU tensor bytes during the iteration (reported, not gated)
  int64_t end_bytes = 0;    // live CPU tensor bytes at the end of the iteration
  double step_seconds = 0;  // wall time (reported, not gated)
  double comm_seconds = 0;  // all-to-alls in flight, summed (reported)
  double comm_exposed_seconds = 0;         // of which the rank posted or waited for them (reported)
  double comm_count_exchange_seconds = 0;  // of which token-count exchanges (reported)
  int64_t comm_count = 0;                  // all-to-alls completed (reported)
  int64_t p2p_count = 0;                   // pipeline point-to-point transfers (reported)
  int64_t p2p_bytes = 0;                   // their bytes (reported)
  double p2p_exposed_seconds = 0;          // time spent waiting for them (reported)
  double record_seconds = 0;               // spent on digests and dumps for the trace (reported)
  // Counted GEMM FLOPs of this rank (numerics/flop_count.h; reported): by pass, and by category
  // over every pass.
  int64_t gemm_flops_forward = 0;
  int64_t gemm_flops_replay = 0;
  int64_t gemm_flops_backward = 0;
  int64_t gemm_flops_attention = 0;
  int64_t gemm_flops_dense = 0;
  int64_t gemm_flops_expert = 0;
  int64_t gemm_flops_head = 0;
  int64_t gemm_flops_other = 0;
  // Where training stands after the iteration (trace/checkpoint_file.h's TrainingPosition; the
  // restart-replay check compares a resumed run's with the uninterrupted run's).
  int64_t optimizer_steps = 0;
  int64_t lr_steps = 0;
  int64_t data_batches = 0;
  std::vector<uint64_t> grad_digests;   // XXH3-64 of each parameter's fp32 main grad
  std::vector<uint64_t> param_digests;  // XXH3-64 of each fp32 master parameter after the step
};

// A full fp32 tensor stored in the trace (a main grad at a dump iteration).
struct TensorDump {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// One tensor at one schedule operation (node probes, [trace] probes = "nodes";
// trace/node_probes.h): an output of a forward or replay pass, or the gradient a backward pass
// returned for one of its inputs.
struct ProbeRecord {
  int64_t iteration = 0;
  int64_t microbatch = 0;
  int64_t chunk = 0;
  std::string layer;    // "decoder 2", "mtp 0", or "" for an operation of the whole chunk
  std::string node;     // attn, mlp, moe_combine, mhc_post, mtp_post_process, ...
  std::string phase;    // forward, replay or backward
  int64_t slot = 0;     // which output (forward, replay) or input gradient (backward)
  uint64_t digest = 0;  // XXH3-64 of the tensor's bytes
  std::string dtype;
  std::vector<int64_t> shape;
};

// One recompute segment's replay in an iteration of the overlap arm: its chunk, microbatch and
// segment (the plan's `segment replay_done` operation). The measured marks (model/engine.h) and
// the memory model's levels (runtime/memory_model.h) meet at equal points.
struct SegmentReplayPoint {
  int64_t chunk = 0;
  int64_t microbatch = 0;
  int64_t segment = 0;
  bool operator==(const SegmentReplayPoint& other) const {
    return chunk == other.chunk && microbatch == other.microbatch && segment == other.segment;
  }
};

// The recompute census at one segment replay of the overlap arm (its `replay_done` marker): the
// live tensor bytes above the iteration's start, measured, next to the memory model's level
// there and the activation bytes one segment's replayed layers hold (runtime/memory_model.h).
struct ReplayCensusSample {
  int64_t iteration = 0;
  int64_t chunk = 0;
  int64_t microbatch = 0;
  int64_t segment = 0;
  int64_t live_bytes = 0;
  int64_t model_bytes = 0;
  int64_t segment_bytes = 0;
};

// One compute or communication interval of the overlap arm's schedule in the last iteration, in
// nanoseconds from the start of the iteration's first interval (the report's overlap timeline).
struct ScheduleInterval {
  std::string node;  // e.g. "attn", "moe_dispatch", "p2p_recv"
  int64_t microbatch = 0;
  int64_t comm = 0;      // 1: an all-to-all or transfer, from its start to its completion
  int64_t begin_ns = 0;  // compute: its start; comm: when it was started
  int64_t end_ns = 0;    // compute: its end; comm: when the collective library completed it
  std::string phase;     // forward, backward, replay or wgrad ("" in older traces)
  int64_t wait_ns = 0;   // comm: how long the schedule waited for its result (0: not at all)
};

// Everything one rank recorded. Parameters are in the rank's own order; expert parameters
// differ between ranks, so names are per rank.
struct RankTrace {
  int64_t rank = 0;
  std::vector<std::string> param_names;
  std::vector<std::vector<int64_t>> param_shapes;
  std::vector<IterationRecord> iterations;
  std::map<int64_t, std::vector<TensorDump>> grad_dumps;  // iteration -> main grads
  std::map<std::string, std::string> attributes;          // per-rank provenance
  std::vector<MemorySample> memory_timeline;              // only with --memory-timeline
  std::vector<ProbeRecord> probes;  // in the order the rank ran them; only with probes on
  std::vector<ReplayCensusSample> replay_census;    // overlap arms with recompute segments
  std::vector<ScheduleInterval> schedule_timeline;  // the overlap arm's, last iteration
};

struct Trace {
  std::map<std::string, std::string> attributes;  // recipe text, arm, engine, provenance
  std::vector<RankTrace> ranks;                   // sorted by rank

  const std::string& attribute(const std::string& key) const;  // "" when absent
};

// Writes `trace` to `path` atomically (temporary file in the same directory, then rename).
// Throws InfrastructureError when the file system refuses.
void WriteTrace(const std::string& path, const Trace& trace);

// Reads and checks a trace. Any problem (missing file, not HDF5, truncated, wrong schema or
// layout) throws InputError naming the file and the reason. A complete trace holds ranks
// 0..world_size-1; a rank's part (written by a rank process before the launcher merges the
// parts) holds only that rank.
Trace ReadTrace(const std::string& path, bool require_complete = true);

}  // namespace bitparity

#endif  // BITPARITY_TRACE_TRACE_H_
