#ifndef BITPARITY_NUMERICS_FLOP_COUNT_H_
#define BITPARITY_NUMERICS_FLOP_COUNT_H_

// Counted model FLOPs: every GEMM the model runs (model/ops.h's Linear, attention's two batched
// products, the router, mHC's mappings) adds 2 * batch * m * n * k to the counter of the thread
// that trains the rank, tagged with what the GEMM belongs to (GemmCategory, set by the caller's
// GemmCategoryScope) and the pass it runs in: a first forward pass, a recompute replay
// (FlopReplayScope, set by both engines where they replay), or the backward pass. A GEMM run with
// gradients on adds its backward when it runs: one GEMM of its size per operand that requires a
// gradient (dgrad and wgrad of a linear layer), since every graph a training step builds is
// backpropagated exactly once. Expert GEMMs are counted at the rows each local expert received,
// so the figure follows the routing actually taken.
//
// Off (no FlopCounter installed on the thread), a count is one thread-local pointer test.

#include <array>
#include <cstddef>
#include <cstdint>

namespace bitparity {

enum class GemmCategory { kAttention, kDense, kExpert, kHead, kOther };
inline constexpr size_t kGemmCategories = 5;
enum class FlopPass { kForward, kReplay, kBackward };
inline constexpr size_t kFlopPasses = 3;

const char* ToString(GemmCategory category);  // attention, dense, expert, head, other
const char* ToString(FlopPass pass);          // forward, replay, backward

// FLOPs by pass and category.
struct FlopCount {
  std::array<std::array<int64_t, kGemmCategories>, kFlopPasses> flops{};

  int64_t of(FlopPass pass) const;
  int64_t of(GemmCategory category) const;  // over every pass
  int64_t total() const;
  // The model FLOPs of a training step: forward and backward, without recompute replays (the
  // figure MFU divides; replays are work the optimization chooses to redo).
  int64_t model() const { return of(FlopPass::kForward) + of(FlopPass::kBackward); }
  FlopCount& operator+=(const FlopCount& other);
};

// Counts the GEMMs of the thread that installed it, while alive (one per rank thread).
class FlopCounter {
 public:
  FlopCounter();
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  // What was counted since the last Take, forgotten here.
  FlopCount Take();

  // The counter installed on this thread, or nullptr.
  static FlopCounter* current();

  // Adds one GEMM of `batch` products of [m, k] x [k, n] to the thread's counter (if any), in the
  // current pass and category, with `backward_products` GEMMs of the same size to the backward
  // pass (0 without gradients).
  static void CountGemm(int64_t batch, int64_t m, int64_t n, int64_t k, int backward_products);

 private:
  FlopCount count_;
  FlopCounter* previous_;
};

// While alive, `counter` (nullptr: none) counts this thread's GEMMs: a replay that the autograd
// engine runs on a thread of its own (a GPU's) counts into the rank's counter.
class FlopCounterScope {
 public:
  explicit FlopCounterScope(FlopCounter* counter);
  ~FlopCounterScope();
  FlopCounterScope(const FlopCounterScope&) = delete;
  FlopCounterScope& operator=(const FlopCounterScope&) = delete;

 private:
  FlopCounter* previous_;
};

// While alive, the thread's GEMMs count as `category`.
class GemmCategoryScope {
 public:
  explicit GemmCategoryScope(GemmCategory category);
  ~GemmCategoryScope();
  GemmCategoryScope(const GemmCategoryScope&) = delete;
  GemmCategoryScope& operator=(const GemmCategoryScope&) = delete;

 private:
  GemmCategory previous_;
};

// While alive, the thread's forward GEMMs count as a recompute replay.
class FlopReplayScope {
 public:
  FlopReplayScope();
  ~FlopReplayScope();
  FlopReplayScope(const FlopReplayScope&) = delete;
  FlopReplayScope& operator=(const FlopReplayScope&) = delete;

 private:
  bool previous_;
};

}  // namespace bitparity

#endif  // BITPARITY_NUMERICS_FLOP_COUNT_H_
