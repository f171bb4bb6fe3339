#ifndef BITPARITY_NUMERICS_RANDOM_H_
#define BITPARITY_NUMERICS_RANDOM_H_

// Deterministic random numbers keyed by (seed, stream). A stream's values depend only on its key,
// never on which rank draws them or in which order streams are used, so both arms, every EP
// size and every rerun see the same initial weights and the same data.

#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace bitparity {

class Rng {
 public:
  // A generator for the stream named `stream` under `seed`.
  Rng(uint64_t seed, std::string_view stream);
  // A generator for the stream identified by integer keys under `seed`.
  Rng(uint64_t seed, std::initializer_list<uint64_t> keys);

  uint64_t NextU64();
  // Uniform in [0, 1) with 53 random bits.
  double Uniform();
  // Standard normal (Box-Muller, one value per call).
  double Normal();
  // Uniform integer in [0, n), without modulo bias. n must be > 0.
  uint64_t Below(uint64_t n);

 private:
  uint64_t state_[4];
};

// Mixes several 64-bit keys into one (SplitMix64 finalizer chain).
uint64_t MixKeys(std::initializer_list<uint64_t> keys);

}  // namespace bitparity

#endif  // BITPARITY_NUMERICS_RANDOM_H_
