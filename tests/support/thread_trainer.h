#ifndef BITPARITY_TESTS_SUPPORT_THREAD_TRAINER_H_
#define BITPARITY_TESTS_SUPPORT_THREAD_TRAINER_H_

// Trains an arm of a recipe with one thread per rank (real Gloo collectives between them) and
// returns every rank's iteration records: the in-process way to compare arms bit for bit.

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "runtime/trainer.h"
#include "trace/trace.h"

namespace bitparity::testing {

struct RankRecords {
  std::vector<std::vector<IterationRecord>> records;  // [rank][iteration]
  std::vector<std::vector<std::string>> params;       // [rank][parameter]
  std::vector<std::vector<char>> replicated;          // [rank][parameter]: not an expert's
};

struct ThreadTrainOptions {
  InjectedBugs bugs;
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  // Called on each rank's thread after the trainer is built (e.g. to install hooks).
  std::function<void(int64_t rank, Trainer& trainer)> on_trainer;
};

RankRecords TrainOnThreads(const Recipe& recipe, const std::string& arm,
                           const ThreadTrainOptions& options = {});

// "" when identical, else the first difference: first of the records' shapes (ranks, iterations,
// parameters, digest counts), then of their values (iteration, rank, record, parameter).
std::string FirstDifference(const RankRecords& a, const RankRecords& b);

// "" when every replicated (non-expert) parameter and its main grad are bitwise equal on every
// rank at every iteration, as they must be: else the first iteration, parameter and ranks where
// one run's replicas disagree (a difference inside one run, not between arms).
std::string ReplicaDivergence(const RankRecords& records);

// Trains the arms of RecipeBuilder::ParityArms and expects the overlap arm to equal both
// reference arms bit for bit (with and without recompute); returns the overlap arm's records.
RankRecords ExpectOverlapEqualsReferences(const Recipe& recipe);

// The parameters whose main grad differs at 1-based `iteration` on `rank`.
std::vector<std::string> DifferingGrads(const RankRecords& a, const RankRecords& b,
                                        int64_t iteration, int64_t rank);

}  // namespace bitparity::testing

#endif  // BITPARITY_TESTS_SUPPORT_THREAD_TRAINER_H_
