// The overlap is real: in combined steps each all-to-all of one microbatch is in flight while
// compute nodes of the other microbatch run, instead of being serialized with them. Measured
// from the recorded start and completion of every all-to-all and the compute intervals.

#include <gtest/gtest.h>

#include <mutex>

#include "config/recipe.h"
#include "overlap_impl/overlap_engine.h"
#include "runtime/trainer.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/thread_world.h"

namespace bitparity {
namespace {

std::string RecipeText() {
  return testing::RecipeBuilder(4, 0)
      .ModelShape(64, 64, 128, 128, 32)
      .Batches(16, 2)
      .Arm("overlap", "overlap", testing::FullRecompute("uniform", 1))
      .Text();
}

TEST(OverlapTimeline, AllToAllsCompleteWhileTheOtherMicrobatchComputes) {
  Recipe recipe = ParseRecipe(RecipeText(), "timeline.toml");
  const int64_t microbatches = recipe.microbatches_per_rank();
  std::vector<TimelineEvent> timeline;
  testing::RunOnThreadWorld(2, [&](int64_t rank, Communicator& comm) {
    std::shared_ptr<Communicator> borrowed(&comm, [](Communicator*) {});
    Trainer trainer(recipe, recipe.arm("overlap"),
                    ParallelLayout::Make(rank, 2, 2, recipe.model.experts), borrowed);
    auto* engine = dynamic_cast<OverlapEngine*>(&trainer.engine());
    trainer.RunIteration(1, nullptr);
    engine->set_record_timeline(true);
    trainer.RunIteration(2, nullptr);
    if (rank == 0) timeline = engine->timeline();
  });

  int64_t combined = 0, overlapped = 0, completed_before_wait = 0;
  double in_flight = 0, exposed = 0;
  for (const TimelineEvent& c : timeline) {
    if (!c.comm || c.phase == Phase::kReplay) continue;  // replays are exposed by design
    // F0's forward and B(M-1)'s backward have no partner microbatch.
    const bool forward = c.phase == Phase::kForward;
    if (forward && c.microbatch == 0) continue;
    if (!forward && c.microbatch == microbatches - 1) continue;
    const int64_t partner = forward ? c.microbatch - 1 : c.microbatch + 1;
    ++combined;
    in_flight += static_cast<double>(c.completed_ns - c.begin_ns);
    exposed += static_cast<double>(std::max<int64_t>(0, c.end_ns - c.wait_begin_ns));
    if (c.completed_ns <= c.wait_begin_ns) ++completed_before_wait;
    for (const TimelineEvent& k : timeline) {
      if (k.comm || k.microbatch != partner) continue;
      if (k.begin_ns < c.completed_ns && k.end_ns > c.begin_ns) {
        ++overlapped;
        break;
      }
    }
  }
  std::printf(
      "combined-step all-to-alls: %lld, overlapping the other microbatch's compute: "
      "%lld, finished before being waited for: %lld; waiting exposed %.1f%% of their "
      "in-flight time\n",
      static_cast<long long>(combined), static_cast<long long>(overlapped),
      static_cast<long long>(completed_before_wait), 100.0 * exposed / in_flight);
  ASSERT_GT(combined, 0);
  EXPECT_GE(overlapped * 2, combined) << "most all-to-alls should run under the other "
                                         "microbatch's compute";
  EXPECT_GT(completed_before_wait, 0);
}

}  // namespace
}  // namespace bitparity
