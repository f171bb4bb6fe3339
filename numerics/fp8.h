#ifndef BITPARITY_NUMERICS_FP8_H_
#define BITPARITY_NUMERICS_FP8_H_

// FP8 formats and block-scaled quantizers, emulated exactly in software (the CPU has no FP8
// arithmetic; tests/core/fp8_oracle_test.cpp checks every encoding against PyTorch's casts):
//
//   E4M3: bias 7, 3 mantissa bits, max finite 448, subnormals down to 2^-9, no infinities,
//         NaN = S.1111.111.
//   E5M2: bias 15, 2 mantissa bits, max finite 57344, subnormals down to 2^-16, IEEE-style
//         infinities and NaNs.
//
// Encoding rounds to nearest, ties to even, and saturates to the max finite value (infinities
// included: "satfinite", as the Hopper/Blackwell conversions TE uses); NaN stays NaN.
//
// Block scaling, both "current scaling" (scales come from the block at hand, so a recompute
// replay reproduces them bit for bit):
//   blockwise (DeepSeek-V3 / TE Float8BlockScaling): fp32 scale = 448 / amax rounded down to a
//     power of two (amax 0 -> 1); q = E4M3(x * scale); x' = q / scale.
//   MXFP8 (OCP MX): E8M0 scale = amax / 448 rounded up to a power of two, saturating to
//     [2^-127, 2^127] (amax 0 -> 2^-127, E8M0 code 0x00, as Transformer Engine stores it);
//     q = E4M3(x / scale); x' = q * scale.
// Blocks run along the reduction dimension; a dimension that is not a multiple of the block
// length ends with a shorter block (its amax covers only the elements that exist).

#include <cstdint>

namespace bitparity {
namespace fp8 {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;

uint8_t EncodeE4M3(float value);
float DecodeE4M3(uint8_t code);
uint8_t EncodeE5M2(float value);
float DecodeE5M2(uint8_t code);

// The blockwise scale for a block whose largest magnitude is `amax`.
float BlockwiseScale(float amax);
// The MXFP8 (E8M0) scale for a block whose largest magnitude is `amax`, as a power of two.
float MxScale(float amax);

enum class Scaling { kBlockwise, kMx };

// Quantizes and dequantizes a row-major [rows, cols] matrix in place, with blocks of
// `block_rows` x `block_cols` elements (ragged at the edges): every element becomes the value
// its FP8 code stands for. Returns nothing; `data` holds the dequantized values.
void QuantizeDequantize(float* data, int64_t rows, int64_t cols, int64_t block_rows,
                        int64_t block_cols, Scaling scaling);

}  // namespace fp8
}  // namespace bitparity

#endif  // BITPARITY_NUMERICS_FP8_H_
