#ifndef BITPARITY_SCHEDULE_SCHEDULE_VOCABULARY_H_
#define BITPARITY_SCHEDULE_SCHEDULE_VOCABULARY_H_

// The words every part of bitparity uses for a schedule's operations, each spelled once: the
// node kinds a layer and a chunk are split into (after Megatron-LM's TransformerLayerNode and
// its pre/post-process nodes), the phases an operation runs in, and the stream it runs on. The
// overlap plan, the nodes that run it, the reference engine's probe sites, the memory model, node
// probes and timelines in traces, and the reports all name them through these tables, so a new
// node is one enum value, one name, and a compile error at every switch that does not handle it.
// Torch-free: the harness reads the names back from traces.

#include <optional>
#include <string>

#include "core/enum_names.h"

namespace bitparity {

enum class NodeKind {
  kPreProcess,       // embedding (and the first stage's pipeline input)
  kAttn,             // norm, attention, residual, norm, router, local permute (+ MTP prologue)
  kDispatch,         // the dispatch all-to-all (comm)
  kMlp,              // the experts, or the dense MLP
  kCombine,          // the combine all-to-all (comm)
  kCombineEpilogue,  // the combine's compute: wait for its all-to-all, unpermute, residual
  kMhcPost,          // under mHC: the streams' update after the MLP sublayer (compute)
  kMtpPostProcess,   // an MTP depth's final norm
  kPostProcess,      // final norm, output head, losses
  kP2pRecv,          // a pipeline receive: forward, the activation; backward, the output's gradient
  kP2pSend,          // a pipeline send: forward, the chunk's output; backward, its input's gradient
  kSegment,          // a recompute segment: capture, replay, release
  kChunk,            // a microbatch as a whole: gradient flush, release of recomputed activations
};

enum class Phase {
  kForward,
  kBackward,
  kCapture,             // segment: keep the head's input and a chunk-state snapshot
  kReplay,              // segment: restore its snapshot; a node: run its forward again
  kReplayDone,          // segment: the replay ran (a marker; the memory timeline samples here)
  kRelease,             // segment: drop what Capture kept
  kFlushGrads,          // chunk: add the microbatch's .grad into the fp32 main grads
  kReleaseActivations,  // chunk: drop what the no-grad forward of recomputed layers held
  kWgrad,               // attn, mlp: the weight gradients their backward left (delay_wgrad)
  // Only in the faulty plans that re-create silent bugs (overlap_impl/faulty_plans.h):
  kWait,        // moe_dispatch, moe_combine: wait for the all-to-all the node just started
  kKeepGraphs,  // segment: its replayed nodes keep their graphs past their backward
};

enum class Stream { kCompute, kComm, kNone };

inline constexpr EnumName<NodeKind> kNodeKindNames[] = {
    {NodeKind::kPreProcess, "pre_process"},
    {NodeKind::kAttn, "attn"},
    {NodeKind::kDispatch, "moe_dispatch"},
    {NodeKind::kMlp, "mlp"},
    {NodeKind::kCombine, "moe_combine"},
    {NodeKind::kCombineEpilogue, "moe_combine_epilogue"},
    {NodeKind::kMhcPost, "mhc_post"},
    {NodeKind::kMtpPostProcess, "mtp_post_process"},
    {NodeKind::kPostProcess, "post_process"},
    {NodeKind::kP2pRecv, "p2p_recv"},
    {NodeKind::kP2pSend, "p2p_send"},
    {NodeKind::kSegment, "segment"},
    {NodeKind::kChunk, "chunk"}};
inline constexpr EnumName<Phase> kPhaseNames[] = {
    {Phase::kForward, "forward"},
    {Phase::kBackward, "backward"},
    {Phase::kCapture, "capture"},
    {Phase::kReplay, "replay"},
    {Phase::kReplayDone, "replay_done"},
    {Phase::kRelease, "release"},
    {Phase::kFlushGrads, "flush_grads"},
    {Phase::kReleaseActivations, "release_activations"},
    {Phase::kWgrad, "wgrad"},
    {Phase::kWait, "wait"},
    {Phase::kKeepGraphs, "keep_graphs"}};
inline constexpr EnumName<Stream> kStreamNames[] = {
    {Stream::kCompute, "compute"}, {Stream::kComm, "comm"}, {Stream::kNone, "-"}};

inline const char* ToString(NodeKind kind) { return NameIn(kNodeKindNames, kind); }
inline const char* ToString(Phase phase) { return NameIn(kPhaseNames, phase); }
inline const char* ToString(Stream stream) { return NameIn(kStreamNames, stream); }

// The kind a trace's node name spells (nullopt: none).
inline std::optional<NodeKind> NodeKindNamed(const std::string& name) {
  return ValueIn(kNodeKindNames, name);
}

// Whether a node moves tokens between the EP ranks (the dispatch and combine all-to-alls).
inline bool IsAllToAll(NodeKind kind) {
  return kind == NodeKind::kDispatch || kind == NodeKind::kCombine;
}

}  // namespace bitparity

#endif  // BITPARITY_SCHEDULE_SCHEDULE_VOCABULARY_H_
