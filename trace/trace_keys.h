#ifndef BITPARITY_TRACE_TRACE_KEYS_H_
#define BITPARITY_TRACE_TRACE_KEYS_H_

// The names of the trace's attributes (Trace::attributes, RankTrace::attributes) that one side
// writes and another reads: the rank processes write them, the launcher, the checks, the
// fingerprint and the golden store read them. docs/trace-format.md documents each. Torch-free.

namespace bitparity::trace_keys {

// File attributes, written by rank 0's process.
inline constexpr char kRecipe[] = "recipe";               // the recipe's TOML text
inline constexpr char kRecipeDigest[] = "recipe_digest";  // RecipeDigest of that text
// The developer switches a rank saw in its environment ("NAME=value; ..."), when any.
inline constexpr char kDeveloperSwitches[] = "developer_switches";
// Shared by every rank of one process group, different in every run (Communicator::run_identity):
// merge joins only parts that carry the same one.
inline constexpr char kRunIdentity[] = "run_identity";
inline constexpr char kRecipePath[] = "recipe_path";  // where it was read from
inline constexpr char kRecipeName[] = "recipe_name";  // [recipe] name
inline constexpr char kArm[] = "arm";                 // the arm's name
inline constexpr char kEngine[] = "engine";           // reference | overlap
inline constexpr char kPrecision[] = "precision";     // bf16 | fp8-blockwise | mxfp8 | fp32
inline constexpr char kDispatcher[] = "dispatcher";   // alltoall | flex
inline constexpr char kRecompute[] = "recompute";     // none | full/chunk | full/<method>/<n>
inline constexpr char kWorldSize[] = "world_size";    // ranks, decimal
inline constexpr char kThreadsPerRank[] = "threads_per_rank";  // intra-op threads, decimal
inline constexpr char kDevice[] = "device";                    // cpu | cuda
inline constexpr char kCommTransport[] = "comm_transport";     // gloo, nccl, gloo host-staged
inline constexpr char kCreatedUtc[] = "created_utc";           // when the ranks finished
inline constexpr char kWarnings[] = "warnings";                // the trainer's, one a line
// File attributes added by the harness.
inline constexpr char kCommandLine[] = "command_line";  // the bitparity command that ran it
inline constexpr char kGoldenPrefix[] = "golden.";      // only in a stored golden (see below)
inline constexpr char kGoldenFingerprint[] = "golden.fingerprint";
inline constexpr char kGoldenGitRevision[] = "golden.git_revision";
inline constexpr char kGoldenCreatedUtc[] = "golden.created_utc";
inline constexpr char kGoldenCommandLine[] = "golden.command_line";

// Rank attributes.
inline constexpr char kPid[] = "pid";                 // the rank process's pid
inline constexpr char kRankSource[] = "rank_source";  // launcher | torchrun | slurm
// A resumed rank (runtime/checkpoint.h): the checkpoint folder it started from, and the
// iteration that checkpoint was saved after; its records begin with the next one.
inline constexpr char kResumedFrom[] = "resumed_from";
inline constexpr char kResumedAfterIteration[] = "resumed_after_iteration";
// The restored fp32 masters' digests as param_digest records them, "0x%016x" joined by ",".
inline constexpr char kResumedParameterDigests[] = "resumed_parameter_digests";
inline constexpr char kProvenancePrefix[] = "provenance.";  // numerics/provenance.h, one per fact
inline constexpr char kProvenanceGitRevision[] = "provenance.git_revision";
// The memory model's prediction (runtime/memory_model.h), when the recipe gates on it.
inline constexpr char kMemoryModelPredictedPeakBytes[] = "memory_model.predicted_peak_bytes";
inline constexpr char kMemoryModelStaticBytes[] = "memory_model.static_bytes";
inline constexpr char kMemoryModelPeakPhase[] = "memory_model.peak_phase";
inline constexpr char kMemoryModelInputBytes[] = "memory_model.input_bytes";
inline constexpr char kMemoryModelLayerBytes[] = "memory_model.layer_bytes";
// The GEMM ceiling the rank measured before its first iteration (numerics/gemm_throughput.h): the
// best rate in FLOP/s (decimal), and the GEMM it timed.
inline constexpr char kGemmCeilingFlopsPerSecond[] = "gemm_ceiling.flops_per_second";
inline constexpr char kGemmCeilingGemm[] = "gemm_ceiling.gemm";

}  // namespace bitparity::trace_keys

#endif  // BITPARITY_TRACE_TRACE_KEYS_H_
