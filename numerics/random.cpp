#include "numerics/random.h"

#include <xxhash.h>

#include <cmath>

namespace bitparity {
namespace {

uint64_t SplitMix64(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

uint64_t MixKeys(std::initializer_list<uint64_t> keys) {
  uint64_t h = 0x6A09E667F3BCC908ull;
  for (uint64_t k : keys) {
    uint64_t x = h ^ k;
    h = SplitMix64(&x);
  }
  return h;
}

Rng::Rng(uint64_t seed, std::string_view stream) {
  uint64_t x = MixKeys({seed, XXH3_64bits(stream.data(), stream.size())});
  for (uint64_t& s : state_) s = SplitMix64(&x);
}

Rng::Rng(uint64_t seed, std::initializer_list<uint64_t> keys) {
  uint64_t x = seed;
  for (uint64_t k : keys) x = MixKeys({x, k});
  for (uint64_t& s : state_) s = SplitMix64(&x);
}

// xoshiro256**
uint64_t Rng::NextU64() {
  const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = Rotl(state_[3], 45);
  return result;
}

double Rng::Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

double Rng::Normal() {
  double u1 = Uniform();
  double u2 = Uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

uint64_t Rng::Below(uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t v;
  do {
    v = NextU64();
  } while (v >= limit);
  return v % n;
}

}  // namespace bitparity
