#ifndef BITPARITY_NUMERICS_FP8_TENSOR_H_
#define BITPARITY_NUMERICS_FP8_TENSOR_H_

// The block-scaled FP8 quantizers of numerics/fp8.h as LibTorch tensor operations, on any device:
// the operands of native FP8 GEMMs (float8_e4m3fn codes and fp32 dequantization scales), made
// with PyTorch's own float8 casts. They produce exactly the codes and scales of the software
// emulation (tests/core/fp8_oracle_test.cpp checks every element and scale bit for bit), so a
// native FP8 GEMM and the emulated one multiply the same operands and differ only by the tensor
// cores' accumulation.

#include <ATen/ATen.h>

#include <cstdint>

#include "numerics/fp8.h"

namespace bitparity {
namespace fp8 {

// A [rows, cols] matrix quantized in blocks of block_rows x block_cols (ragged at the edges):
// element (r, c) stands for codes[r][c] * scales[r / block_rows][c / block_cols].
struct QuantizedMatrix {
  at::Tensor codes;   // [rows, cols] float8_e4m3fn
  at::Tensor scales;  // [ceil(rows / block_rows), ceil(cols / block_cols)] fp32, powers of two
  int64_t block_rows = 1;
  int64_t block_cols = 1;
};

// Quantizes `matrix` (any floating dtype, 2-D) with the scaling rules of numerics/fp8.h: the scale
// of a block comes from the largest magnitude of its elements (NaNs ignored), elements saturate
// to +-448, NaN stays NaN.
QuantizedMatrix QuantizeBlocks(const at::Tensor& matrix, int64_t block_rows, int64_t block_cols,
                               Scaling scaling);

// The dequantization scales of blocks whose largest magnitudes (NaNs ignored) are `amax`, an fp32
// tensor of any shape: 1 / BlockwiseScale(amax) or MxScale(amax) of numerics/fp8.h, per element.
at::Tensor DequantizationScales(const at::Tensor& amax, Scaling scaling);

// The values the codes stand for, in fp32 ([rows, cols]).
at::Tensor Dequantize(const QuantizedMatrix& quantized);

}  // namespace fp8
}  // namespace bitparity

#endif  // BITPARITY_NUMERICS_FP8_TENSOR_H_
