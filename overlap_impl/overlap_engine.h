#ifndef BITPARITY_OVERLAP_IMPL_OVERLAP_ENGINE_H_
#define BITPARITY_OVERLAP_IMPL_OVERLAP_ENGINE_H_

// The overlap arm: every layer split into schedule nodes, microbatches interleaved by the
// combined 1F1B plan so that each all-to-all of one microbatch is in flight while a compute
// node of the other runs, and full activation recompute per layer segment. With pipeline
// parallelism the plan is the rank's interleaved combined 1F1B over its model chunks, with the
// point-to-point transfers between stages as operations of the plan. The runner is a loop over
// the plan's operations, each handed to the ChunkSchedule of its (chunk, microbatch) with the
// gradient that pass's previous backward operation produced.

#include <memory>
#include <string>
#include <vector>

#include "model/engine.h"
#include "model/gpt.h"
#include "overlap_impl/chunk_schedule.h"
#include "overlap_impl/combined_step_plan.h"
#include "overlap_impl/overlap_bugs.h"
#include "overlap_impl/stale_routing_fault.h"

namespace bitparity {

class OverlapEngine : public Engine {
 public:
  // `bugs` re-creates silent bugs for the tests that show they are caught: as a faulty plan
  // (overlap_impl/faulty_plans.h) or the stale-routing fault; off by default.
  // `pipeline`: this rank's pipeline group when pp > 1, else null; `lanes`: how its transfers
  // are ordered (comm/pipeline_channel.h). The plan is the arm's
  // (PlanForArm): its recompute, and its delay_wgrad, with which the attn and mlp weight
  // gradients run as the plan's wgrad operations.
  OverlapEngine(GptModel* model, const ArmConfig& arm, int64_t microbatches,
                const OverlapBugs& bugs = OverlapBugs(),
                std::shared_ptr<Communicator> pipeline = nullptr,
                PipelineLanes lanes = PipelineLanes::kPerKind);

  std::vector<MicrobatchLosses> RunIteration(std::vector<ChunkState>& microbatches) override;
  std::vector<std::string> warnings() const override;
  std::vector<SegmentReplayMark> segment_replays() const override { return segment_replays_; }
  void RecordScheduleTimeline(bool on) override { set_record_timeline(on); }
  std::vector<ScheduleInterval> ScheduleTimeline() const override;

  const CombinedStepPlan& plan() const { return plan_; }

  // Records the all-to-all and compute intervals of the next iterations (off by default).
  void set_record_timeline(bool on) { record_timeline_ = on; }
  const std::vector<TimelineEvent>& timeline() const { return timeline_; }

  // Called after every operation of the plan, with the chunk schedules, the one of (chunk c,
  // microbatch m) at c x microbatches + m (structural tests).
  std::function<void(size_t op, const NodeOp&, std::vector<std::unique_ptr<ChunkSchedule>>&)>
      after_op;

 private:
  GptModel* model_;
  CombinedStepPlan plan_;
  std::shared_ptr<Communicator> pipeline_;
  std::unique_ptr<PipelineChannel> channel_;  // over pipeline_, when pp > 1
  std::unique_ptr<RoutingSource> routing_;    // CarriedRouting, or the stale-routing fault
  OverlapContext context_;
  std::vector<PendingTransfer> sends_;  // started this iteration, not yet through
  bool record_timeline_ = false;
  std::vector<TimelineEvent> timeline_;
  std::vector<SegmentReplayMark> segment_replays_;
};

}  // namespace bitparity

#endif  // BITPARITY_OVERLAP_IMPL_OVERLAP_ENGINE_H_
