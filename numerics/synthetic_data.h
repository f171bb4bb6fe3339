#ifndef BITPARITY_NUMERICS_SYNTHETIC_DATA_H_
#define BITPARITY_NUMERICS_SYNTHETIC_DATA_H_

// Deterministic synthetic training data with learnable structure: token sequences drawn from a
// fixed random Markov chain in which each token has a few likely successors. A sample is a
// function of (seed, iteration, sample index) alone, so every engine, rank layout and rerun
// reads exactly the same tokens.

#include <cstdint>
#include <vector>

namespace bitparity {

class MarkovCorpus {
 public:
  MarkovCorpus(uint64_t seed, int64_t vocab, int64_t branching);

  // `length` tokens of sample `index` (0-based within the global batch) of `iteration`.
  std::vector<int64_t> Sample(int64_t iteration, int64_t index, int64_t length) const;

  // The length of sample `index` of `iteration`, uniform in [min_length, max_length]; a function
  // of (seed, iteration, index) like the tokens.
  int64_t SampleLength(int64_t iteration, int64_t index, int64_t min_length,
                       int64_t max_length) const;

  // Entropy of the successor distribution in nats: an upper bound on the loss a perfect model
  // reaches (lower when two successor slots of a token coincide).
  double EntropyPerToken() const;

 private:
  uint64_t seed_;
  int64_t vocab_;
  int64_t branching_;
  std::vector<int64_t> successors_;  // [vocab, branching]
  std::vector<double> cumulative_;   // cumulative successor probabilities, [branching]
};

}  // namespace bitparity

#endif  // BITPARITY_NUMERICS_SYNTHETIC_DATA_H_
