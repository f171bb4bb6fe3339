#ifndef BITPARITY_OVERLAP_IMPL_OVERLAP_ENGINE_H_
#define BITPARITY_OVERLAP_IMPL_OVERLAP_ENGINE_H_

// The overlap arm: every layer split into schedule nodes, microbatches interleaved by the
// combined 1F1B plan so that each all-to-all of one microbatch is in flight while a compute
// node of the other runs, and full activation recompute per layer segment. The runner is a
// loop over the plan's operations, each handed to its microbatch's ChunkSchedule with the
// gradient the microbatch's previous backward operation produced.

#include <memory>
#include <string>
#include <vector>

#include "model/engine.h"
#include "model/gpt.h"
#include "model/injected_bugs.h"
#include "overlap_impl/chunk_schedule.h"
#include "overlap_impl/combined_step_plan.h"
#include "overlap_impl/stale_routing_fault.h"

namespace bitparity {

class OverlapEngine : public Engine {
 public:
  // `bugs` re-creates silent bugs for the tests that show they are caught: as a faulty plan
  // (overlap_impl/faulty_plans.h) or the stale-routing fault; off by default.
  OverlapEngine(GptModel* model, const RecomputeConfig& recompute, int64_t microbatches,
                const OverlapBugs& bugs = OverlapBugs());

  std::vector<MicrobatchLosses> RunIteration(std::vector<ChunkState>& microbatches) override;
  std::vector<std::string> warnings() const override { return plan_.recompute.warnings; }

  const CombinedStepPlan& plan() const { return plan_; }

  // Records the all-to-all and compute intervals of the next iterations (off by default).
  void set_record_timeline(bool on) { record_timeline_ = on; }
  const std::vector<TimelineEvent>& timeline() const { return timeline_; }

  // Called after every operation of the plan, with the chunk schedules (structural tests).
  std::function<void(size_t op, const NodeOp&, std::vector<std::unique_ptr<ChunkSchedule>>&)>
      after_op;

 private:
  GptModel* model_;
  CombinedStepPlan plan_;
  std::unique_ptr<StaleRoutingFault> stale_routing_;
  OverlapContext context_;
  bool record_timeline_ = false;
  std::vector<TimelineEvent> timeline_;
};

}  // namespace bitparity

#endif  // BITPARITY_OVERLAP_IMPL_OVERLAP_ENGINE_H_
