#include "numerics/fp8.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "numerics/float_bits.h"

namespace bitparity {
namespace fp8 {

namespace {

// What rounding an fp32 value to one FP8 format needs.
struct Fp8Encoding {
  int mantissa_bits;        // 3 (E4M3) or 2 (E5M2)
  float max_finite;         // values at or above it saturate to max_code
  uint8_t max_code;         // the largest finite code
  float min_normal;         // below it, the codes are multiples of the smallest subnormal
  float subnormal_inverse;  // 1 / the smallest subnormal
  uint32_t bias_offset;     // (127 - the format's exponent bias) << mantissa_bits
};
constexpr Fp8Encoding kE4M3{3, kE4M3Max, 0x7E, 0x1p-6f, 512.0f, 120u << 3};
constexpr Fp8Encoding kE5M2{2, kE5M2Max, 0x7B, 0x1p-14f, 65536.0f, 112u << 2};

// Rounds to nearest, ties to even, saturating; NaN stays NaN (code 0x7F with the sign).
inline uint8_t Encode(float value, const Fp8Encoding& format) {
  const uint32_t bits = FloatBits(value);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return sign | 0x7F;  // NaN
  const float a = FloatFromBits(magnitude);
  if (a >= format.max_finite) return sign | format.max_code;  // infinity included
  if (a < format.min_normal) {
    return sign | static_cast<uint8_t>(std::nearbyint(a * format.subnormal_inverse));
  }
  // Round the fp32 mantissa to the format's bits, ties to even; a carry moves into the exponent.
  const int shift = 23 - format.mantissa_bits;
  const uint32_t rounded =
      (magnitude + ((1u << (shift - 1)) - 1u) + ((magnitude >> shift) & 1u)) >> shift;
  const uint32_t code = std::min<uint32_t>(rounded - format.bias_offset, format.max_code);
  return sign | static_cast<uint8_t>(code);
}

}  // namespace

uint8_t EncodeE4M3(float value) { return Encode(value, kE4M3); }

uint8_t EncodeE5M2(float value) { return Encode(value, kE5M2); }

namespace {

float DecodeE4M3Slow(uint8_t code) {
  const bool negative = code & 0x80;
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  float value;
  if (exponent == 0xF && mantissa == 0x7) {
    value = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -9);
  } else {
    value = std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
  }
  return negative ? -value : value;
}

}  // namespace

float DecodeE4M3(uint8_t code) {
  static const auto* const kTable = [] {
    auto* table = new float[256];
    for (int c = 0; c < 256; ++c) table[c] = DecodeE4M3Slow(static_cast<uint8_t>(c));
    return table;
  }();
  return kTable[code];
}

float DecodeE5M2(uint8_t code) {
  const bool negative = code & 0x80;
  const int exponent = (code >> 2) & 0x1F;
  const int mantissa = code & 0x3;
  float value;
  if (exponent == 0x1F) {
    value = mantissa == 0 ? std::numeric_limits<float>::infinity()
                          : std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -16);
  } else {
    value = std::ldexp(1.0f + mantissa / 4.0f, exponent - 15);
  }
  return negative ? -value : value;
}

float BlockwiseScale(float amax) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 1.0f;
  const float scale = kE4M3Max / amax;
  if (!std::isfinite(scale)) return 0x1p127f;
  int exponent = 0;
  std::frexp(scale, &exponent);  // scale = f * 2^exponent, f in [0.5, 1)
  return std::ldexp(1.0f, std::min(exponent - 1, 127));
}

float MxScale(float amax) {
  // amax 0: E8M0 code 0x00, 2^-127, as Transformer Engine's float_to_e8m0(0) stores it.
  if (amax == 0.0f) return 0x1p-127f;
  if (!(amax > 0.0f)) return 1.0f;
  const float t = amax / kE4M3Max;
  if (t == 0.0f) return 0x1p-127f;
  if (!std::isfinite(t)) return 0x1p127f;
  int exponent = 0;
  const float fraction = std::frexp(t, &exponent);         // t = fraction * 2^exponent
  int power = fraction == 0.5f ? exponent - 1 : exponent;  // round up to a power of two
  power = std::clamp(power, -127, 127);
  return std::ldexp(1.0f, power);
}

void QuantizeDequantize(float* data, int64_t rows, int64_t cols, int64_t block_rows,
                        int64_t block_cols, Scaling scaling) {
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    const int64_t r1 = std::min(rows, r0 + block_rows);
    for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      const int64_t c1 = std::min(cols, c0 + block_cols);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        const float* row = data + r * cols;
        for (int64_t c = c0; c < c1; ++c) {
          const float a = std::fabs(row[c]);
          if (a > amax) amax = a;  // NaNs are ignored by the comparison
        }
      }
      if (scaling == Scaling::kBlockwise) {
        const float scale = BlockwiseScale(amax);
        for (int64_t r = r0; r < r1; ++r) {
          float* row = data + r * cols;
          for (int64_t c = c0; c < c1; ++c) row[c] = DecodeE4M3(EncodeE4M3(row[c] * scale)) / scale;
        }
      } else {
        const float scale = MxScale(amax);
        for (int64_t r = r0; r < r1; ++r) {
          float* row = data + r * cols;
          for (int64_t c = c0; c < c1; ++c) row[c] = DecodeE4M3(EncodeE4M3(row[c] / scale)) * scale;
        }
      }
    }
  }
}

}  // namespace fp8
}  // namespace bitparity
