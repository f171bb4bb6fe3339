#include "numerics/synthetic_data.h"

#include <cmath>

#include "numerics/random.h"

namespace bitparity {

MarkovCorpus::MarkovCorpus(uint64_t seed, int64_t vocab, int64_t branching)
    : seed_(seed), vocab_(vocab), branching_(branching) {
  Rng rng(seed, "data.successors");
  successors_.resize(static_cast<size_t>(vocab * branching));
  for (auto& s : successors_) s = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(vocab)));
  // Successor j has probability proportional to 2^-j: a peaked but not trivial distribution.
  double total = 0;
  for (int64_t j = 0; j < branching; ++j) total += std::ldexp(1.0, -static_cast<int>(j));
  double running = 0;
  for (int64_t j = 0; j < branching; ++j) {
    running += std::ldexp(1.0, -static_cast<int>(j)) / total;
    cumulative_.push_back(running);
  }
  cumulative_.back() = 1.0;
}

std::vector<int64_t> MarkovCorpus::Sample(int64_t iteration, int64_t index, int64_t length) const {
  Rng rng(seed_, {0x5A4D504C45ull, static_cast<uint64_t>(iteration), static_cast<uint64_t>(index)});
  std::vector<int64_t> tokens(static_cast<size_t>(length));
  int64_t current = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(vocab_)));
  for (int64_t t = 0; t < length; ++t) {
    tokens[static_cast<size_t>(t)] = current;
    double u = rng.Uniform();
    int64_t j = 0;
    while (j + 1 < branching_ && u >= cumulative_[static_cast<size_t>(j)]) ++j;
    current = successors_[static_cast<size_t>(current * branching_ + j)];
  }
  return tokens;
}

int64_t MarkovCorpus::SampleLength(int64_t iteration, int64_t index, int64_t min_length,
                                   int64_t max_length) const {
  if (min_length >= max_length) return max_length;
  Rng rng(seed_,
          {0x4C454E475448ull, static_cast<uint64_t>(iteration), static_cast<uint64_t>(index)});
  return min_length +
         static_cast<int64_t>(rng.Below(static_cast<uint64_t>(max_length - min_length + 1)));
}

double MarkovCorpus::EntropyPerToken() const {
  double h = 0, previous = 0;
  for (double c : cumulative_) {
    double p = c - previous;
    previous = c;
    if (p > 0) h -= p * std::log(p);
  }
  return h;
}

}  // namespace bitparity
