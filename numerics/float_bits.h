#ifndef BITPARITY_NUMERICS_FLOAT_BITS_H_
#define BITPARITY_NUMERICS_FLOAT_BITS_H_

// Bit-level views of floating-point values: exact equality and ULP distance.

#include <cstdint>
#include <cstring>

namespace bitparity {

inline uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline uint64_t DoubleBits(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float FloatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Maps float bit patterns onto a line where adjacent representable values differ by one, so
// that the distance between two values counts the representable floats between them
// (+0 and -0 are 0 apart).
inline int64_t OrderedFloat(float value) {
  int64_t bits = static_cast<int32_t>(FloatBits(value));
  return bits < 0 ? static_cast<int64_t>(INT32_MIN) - bits : bits;
}

// Units in the last place between two floats; NaNs are compared by bit pattern.
inline uint64_t UlpDistance(float a, float b) {
  int64_t d = OrderedFloat(a) - OrderedFloat(b);
  return static_cast<uint64_t>(d < 0 ? -d : d);
}

// The same for doubles (saturating at INT64_MAX for values of opposite sign far apart).
inline uint64_t UlpDistance(double a, double b) {
  auto ordered = [](double v) {
    int64_t bits = static_cast<int64_t>(DoubleBits(v));
    return bits < 0 ? static_cast<__int128>(INT64_MIN) - bits : static_cast<__int128>(bits);
  };
  __int128 d = ordered(a) - ordered(b);
  if (d < 0) d = -d;
  return d > static_cast<__int128>(UINT64_MAX) ? UINT64_MAX : static_cast<uint64_t>(d);
}

}  // namespace bitparity

#endif  // BITPARITY_NUMERICS_FLOAT_BITS_H_
