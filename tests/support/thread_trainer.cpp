#include "tests/support/thread_trainer.h"

#include <gtest/gtest.h>

#include <sstream>

#include "core/float_bits.h"
#include "tests/support/thread_world.h"

namespace bitparity::testing {

RankRecords TrainOnThreads(const Recipe& recipe, const std::string& arm,
                           const ThreadTrainOptions& options) {
  const int64_t world = recipe.world_size();
  RankRecords records;
  records.records.resize(static_cast<size_t>(world));
  records.params.resize(static_cast<size_t>(world));
  RunOnThreadWorld(
      world,
      [&](int64_t rank, Communicator& comm) {
        // Each thread owns its communicator; the trainer only borrows it.
        std::shared_ptr<Communicator> borrowed(&comm, [](Communicator*) {});
        ParallelLayout layout =
            ParallelLayout::Make(rank, world, recipe.parallel.ep, recipe.model.experts);
        Trainer trainer(recipe, recipe.arm(arm), layout, borrowed, options.bugs);
        if (options.on_trainer) options.on_trainer(rank, trainer);
        records.params[static_cast<size_t>(rank)] = trainer.DescribeRank().param_names;
        for (int64_t it = 1; it <= recipe.train.iterations; ++it) {
          records.records[static_cast<size_t>(rank)].push_back(trainer.RunIteration(it, nullptr));
        }
      },
      options.timeout, recipe.parallel.device);
  return records;
}

std::string FirstDifference(const RankRecords& a, const RankRecords& b) {
  if (a.records.size() != b.records.size()) return "different world sizes";
  for (size_t i = 0; i < a.records[0].size(); ++i) {
    for (size_t r = 0; r < a.records.size(); ++r) {
      const IterationRecord& x = a.records[r][i];
      const IterationRecord& y = b.records[r][i];
      std::ostringstream where;
      where << "iteration " << x.iteration << ", rank " << r << ": ";
      if (FloatBits(x.loss) != FloatBits(y.loss)) return where.str() + "loss";
      if (FloatBits(x.lm_loss) != FloatBits(y.lm_loss)) return where.str() + "lm_loss";
      if (FloatBits(x.mtp_loss) != FloatBits(y.mtp_loss)) return where.str() + "mtp_loss";
      if (FloatBits(x.aux_loss) != FloatBits(y.aux_loss)) return where.str() + "aux_loss";
      if (DoubleBits(x.grad_norm) != DoubleBits(y.grad_norm)) return where.str() + "grad_norm";
      for (size_t p = 0; p < x.grad_digests.size(); ++p) {
        if (x.grad_digests[p] != y.grad_digests[p]) {
          return where.str() + "main grad of " + a.params[r][p];
        }
      }
      for (size_t p = 0; p < x.param_digests.size(); ++p) {
        if (x.param_digests[p] != y.param_digests[p]) {
          return where.str() + "parameter " + a.params[r][p] + " after the step";
        }
      }
    }
  }
  return "";
}

}  // namespace bitparity::testing

namespace bitparity::testing {

std::vector<std::string> DifferingGrads(const RankRecords& a, const RankRecords& b,
                                        int64_t iteration, int64_t rank) {
  std::vector<std::string> names;
  const IterationRecord& x = a.records[rank][iteration - 1];
  const IterationRecord& y = b.records[rank][iteration - 1];
  for (size_t p = 0; p < x.grad_digests.size(); ++p) {
    if (x.grad_digests[p] != y.grad_digests[p]) names.push_back(a.params[rank][p]);
  }
  return names;
}

RankRecords ExpectOverlapEqualsReferences(const Recipe& recipe) {
  RankRecords reference = TrainOnThreads(recipe, "reference");
  RankRecords overlap = TrainOnThreads(recipe, "overlap");
  EXPECT_EQ(FirstDifference(reference, overlap), "") << "overlap vs reference";
  EXPECT_EQ(FirstDifference(TrainOnThreads(recipe, "reference_none"), overlap), "")
      << "overlap vs reference_none";
  return overlap;
}

}  // namespace bitparity::testing
