#include "tests/support/thread_trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "numerics/float_bits.h"
#include "tests/support/thread_world.h"

namespace bitparity::testing {

RankRecords TrainOnThreads(const Recipe& recipe, const std::string& arm,
                           const ThreadTrainOptions& options) {
  const int64_t world = recipe.world_size();
  RankRecords records;
  records.records.resize(static_cast<size_t>(world));
  records.params.resize(static_cast<size_t>(world));
  records.replicated.resize(static_cast<size_t>(world));
  RunOnThreadWorld(
      world,
      [&](int64_t rank, Communicator& comm) {
        // Each thread owns its communicator; the trainer only borrows it.
        std::shared_ptr<Communicator> borrowed(&comm, [](Communicator*) {});
        ParallelLayout layout = ParallelLayout::Make(rank, world, recipe.parallel.ep,
                                                     recipe.model.experts, recipe.parallel.pp);
        Trainer trainer(recipe, recipe.arm(arm), layout, borrowed, options.bugs);
        if (options.on_trainer) options.on_trainer(rank, trainer);
        records.params[static_cast<size_t>(rank)] = trainer.DescribeRank().param_names;
        for (const Parameter& p : trainer.model().parameters().all()) {
          records.replicated[static_cast<size_t>(rank)].push_back(p.is_expert ? 0 : 1);
        }
        // From where on_trainer left it (a hook may have run an iteration itself).
        for (int64_t it = trainer.position().iteration + 1; it <= recipe.train.iterations; ++it) {
          records.records[static_cast<size_t>(rank)].push_back(trainer.RunIteration(it, nullptr));
        }
      },
      options.timeout, recipe.parallel.device);
  return records;
}

std::string ReplicaDivergence(const RankRecords& records) {
  const size_t ranks = records.records.size();
  for (size_t i = 0; i < records.records[0].size(); ++i) {
    for (size_t p = 0; p < records.params[0].size(); ++p) {
      if (!records.replicated[0][p]) continue;
      for (size_t r = 1; r < ranks; ++r) {
        const auto& names = records.params[r];
        const size_t q = static_cast<size_t>(
            std::find(names.begin(), names.end(), records.params[0][p]) - names.begin());
        if (q == names.size()) continue;
        const IterationRecord& x = records.records[0][i];
        const IterationRecord& y = records.records[r][i];
        std::ostringstream where;
        where << "iteration " << x.iteration << ": ";
        const std::string ranks_named = " differs between rank 0 and rank " + std::to_string(r);
        if (x.grad_digests[p] != y.grad_digests[q]) {
          return where.str() + "main grad of " + records.params[0][p] + ranks_named;
        }
        if (x.param_digests[p] != y.param_digests[q]) {
          return where.str() + "parameter " + records.params[0][p] + " after the step" +
                 ranks_named;
        }
      }
    }
  }
  return "";
}

// Where the shapes of two runs' records differ (ranks, iterations, parameters), or "".
std::string ShapeDifference(const RankRecords& a, const RankRecords& b) {
  if (a.records.size() != b.records.size()) {
    return "different world sizes: " + std::to_string(a.records.size()) + " vs " +
           std::to_string(b.records.size()) + " ranks";
  }
  for (size_t r = 0; r < a.records.size(); ++r) {
    const std::string rank = "rank " + std::to_string(r) + ": ";
    if (a.records[r].size() != b.records[r].size()) {
      return rank + std::to_string(a.records[r].size()) + " vs " +
             std::to_string(b.records[r].size()) + " iterations";
    }
    if (a.params[r] != b.params[r]) return rank + "different parameters";
    for (size_t i = 0; i < a.records[r].size(); ++i) {
      const IterationRecord& x = a.records[r][i];
      const IterationRecord& y = b.records[r][i];
      if (x.grad_digests.size() != y.grad_digests.size() ||
          x.param_digests.size() != y.param_digests.size() ||
          x.grad_digests.size() != a.params[r].size()) {
        return rank + "iteration " + std::to_string(x.iteration) + ": different digest counts";
      }
    }
  }
  return "";
}

std::string FirstDifference(const RankRecords& a, const RankRecords& b) {
  if (std::string shape = ShapeDifference(a, b); !shape.empty()) return shape;
  if (a.records.empty()) return "";
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

namespace {

// Every record that differs in the first iteration where any does, on every rank (at most 24
// lines): what a rare failure needs in its log to tell a gradient from an update difference.
std::string DifferencesOfFirstIteration(const RankRecords& a, const RankRecords& b) {
  std::ostringstream out;
  int lines = 0;
  for (size_t i = 0; i < a.records[0].size() && lines == 0; ++i) {
    for (size_t r = 0; r < a.records.size(); ++r) {
      const IterationRecord& x = a.records[r][i];
      const IterationRecord& y = b.records[r][i];
      auto note = [&](const std::string& what) {
        if (++lines <= 24) out << "\n  iteration " << x.iteration << ", rank " << r << ": " << what;
      };
      if (FloatBits(x.loss) != FloatBits(y.loss)) note("loss");
      if (DoubleBits(x.grad_norm) != DoubleBits(y.grad_norm)) note("grad_norm");
      for (size_t p = 0; p < x.grad_digests.size(); ++p) {
        if (x.grad_digests[p] != y.grad_digests[p]) note("main grad of " + a.params[r][p]);
      }
      for (size_t p = 0; p < x.param_digests.size(); ++p) {
        if (x.param_digests[p] != y.param_digests[p]) note("parameter " + a.params[r][p]);
      }
    }
  }
  if (lines > 24) out << "\n  ... " << lines - 24 << " more";
  return out.str();
}

void ExpectEqualRecords(const RankRecords& a, const RankRecords& b, const char* what) {
  const std::string first = FirstDifference(a, b);
  EXPECT_EQ(first, "") << what << "; every difference of that iteration:"
                       << DifferencesOfFirstIteration(a, b);
}

}  // namespace

RankRecords ExpectOverlapEqualsReferences(const Recipe& recipe) {
  RankRecords reference = TrainOnThreads(recipe, "reference");
  RankRecords overlap = TrainOnThreads(recipe, "overlap");
  RankRecords reference_none = TrainOnThreads(recipe, "reference_none");
  // A run whose own replicas disagree is broken inside itself; say so before comparing arms.
  EXPECT_EQ(ReplicaDivergence(reference), "") << "replicas of the arm reference";
  EXPECT_EQ(ReplicaDivergence(overlap), "") << "replicas of the arm overlap";
  EXPECT_EQ(ReplicaDivergence(reference_none), "") << "replicas of the arm reference_none";
  ExpectEqualRecords(reference, overlap, "overlap vs reference");
  ExpectEqualRecords(reference_none, overlap, "overlap vs reference_none");
  return overlap;
}

}  // namespace bitparity::testing
