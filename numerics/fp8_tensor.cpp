#include "numerics/fp8_tensor.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace bitparity {
namespace fp8 {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// fp32 powers of two 2^power for integer powers in [-127, 127], built from their bits (2^-127 is
// subnormal: 0x00400000), so that no math library rounds them.
at::Tensor PowerOfTwo(const at::Tensor& power) {
  at::Tensor normal_bits = (power + 127).bitwise_left_shift(23);
  at::Tensor bits = at::where(power >= -126, normal_bits, at::full_like(power, 0x00400000));
  return bits.to(at::kInt).view(at::kFloat);
}

// The fp32 exponent field and mantissa of positive floats.
at::Tensor ExponentField(const at::Tensor& positive) {
  return positive.contiguous().view(at::kInt).bitwise_right_shift(23).bitwise_and(0xFF);
}
at::Tensor MantissaField(const at::Tensor& positive) {
  return positive.contiguous().view(at::kInt).bitwise_and(0x7FFFFF);
}

// BlockwiseScale of numerics/fp8.cpp per block: 448 / amax rounded down to a power of two, at most
// 2^127; 1 where amax is 0, NaN or infinite.
at::Tensor BlockwiseQuantizationScale(const at::Tensor& amax) {
  at::Tensor ratio = at::full_like(amax, kE4M3Max).div(amax);  // normal, or +inf for tiny amax
  at::Tensor power = (ExponentField(ratio) - 127).clamp_max(127);
  at::Tensor valid = (amax > 0).logical_and(at::isfinite(amax));
  return at::where(valid, PowerOfTwo(power.to(at::kLong)), at::ones_like(amax));
}

// MxScale of numerics/fp8.cpp per block: amax / 448 rounded up to a power of two in
// [2^-127, 2^127] (2^-127 where amax is 0, Transformer Engine's E8M0 0x00); 1 where it is NaN.
at::Tensor MxQuantizationScale(const at::Tensor& amax) {
  // A true division by a tensor: with a scalar, CUDA multiplies by fl(1 / 448) instead.
  at::Tensor ratio = amax.div(at::full_like(amax, kE4M3Max));  // subnormal or 0 for tiny amax
  at::Tensor exponent = ExponentField(ratio).to(at::kLong);
  at::Tensor mantissa = MantissaField(ratio).to(at::kLong);
  // Normal: 2^(e-127) exactly when the mantissa is 0, else the next power up. Subnormal (and 0):
  // at most 2^-126, and 2^-127 unless the value exceeds it. Infinite: clamped to 2^127.
  at::Tensor normal_power = at::where(mantissa == 0, exponent - 127, exponent - 126);
  at::Tensor subnormal_power = at::where(
      mantissa > (int64_t{1} << 22), at::full_like(exponent, -126), at::full_like(exponent, -127));
  at::Tensor power = at::where(exponent == 0, subnormal_power, normal_power).clamp(-127, 127);
  return at::where(amax >= 0, PowerOfTwo(power), at::ones_like(amax));
}

// Saturates to the largest finite E4M3 value, keeping NaNs (and their sign) as they are.
at::Tensor SaturateE4M3(const at::Tensor& x) {
  return at::where(at::isnan(x), x, x.clamp(-kE4M3Max, kE4M3Max));
}

}  // namespace

at::Tensor DequantizationScales(const at::Tensor& amax, Scaling scaling) {
  return scaling == Scaling::kBlockwise ? BlockwiseQuantizationScale(amax).reciprocal()
                                        : MxQuantizationScale(amax);
}

QuantizedMatrix QuantizeBlocks(const at::Tensor& matrix, int64_t block_rows, int64_t block_cols,
                               Scaling scaling) {
  if (matrix.dim() != 2 || block_rows < 1 || block_cols < 1) {
    throw std::invalid_argument("QuantizeBlocks: needs a matrix and positive block sizes, got " +
                                std::to_string(matrix.dim()) + " dimensions, blocks " +
                                std::to_string(block_rows) + "x" + std::to_string(block_cols));
  }
  const int64_t rows = matrix.size(0), cols = matrix.size(1);
  const int64_t row_blocks = CeilDiv(rows, block_rows), col_blocks = CeilDiv(cols, block_cols);
  at::Tensor x = matrix.to(at::kFloat).contiguous();
  // Zero padding completes the ragged edge blocks without changing their amax.
  at::Tensor padded =
      at::constant_pad_nd(x, {0, col_blocks * block_cols - cols, 0, row_blocks * block_rows - rows},
                          0.0)
          .view({row_blocks, block_rows, col_blocks, block_cols});
  at::Tensor magnitude = padded.abs();
  magnitude = at::where(at::isnan(magnitude), at::zeros_like(magnitude), magnitude);
  at::Tensor amax = magnitude.amax({1, 3});  // [row_blocks, col_blocks]

  QuantizedMatrix out;
  out.block_rows = block_rows;
  out.block_cols = block_cols;
  at::Tensor scaled;
  if (scaling == Scaling::kBlockwise) {
    at::Tensor scale = BlockwiseQuantizationScale(amax);
    scaled = padded * scale.view({row_blocks, 1, col_blocks, 1});
    out.scales = scale.reciprocal();  // exact: the reciprocal of a power of two
  } else {
    at::Tensor scale = MxQuantizationScale(amax);
    scaled = padded / scale.view({row_blocks, 1, col_blocks, 1});
    out.scales = scale;
  }
  out.codes = SaturateE4M3(scaled)
                  .view({row_blocks * block_rows, col_blocks * block_cols})
                  .narrow(0, 0, rows)
                  .narrow(1, 0, cols)
                  .to(at::kFloat8_e4m3fn)
                  .contiguous();
  return out;
}

at::Tensor Dequantize(const QuantizedMatrix& quantized) {
  const int64_t rows = quantized.codes.size(0), cols = quantized.codes.size(1);
  at::Tensor multiplier = quantized.scales.repeat_interleave(quantized.block_rows, 0)
                              .narrow(0, 0, rows)
                              .repeat_interleave(quantized.block_cols, 1)
                              .narrow(1, 0, cols);
  return quantized.codes.to(at::kFloat) * multiplier;
}

}  // namespace fp8
}  // namespace bitparity
