#ifndef BITPARITY_MODEL_FP8_LINEAR_H_
#define BITPARITY_MODEL_FP8_LINEAR_H_

// The linear layer of the FP8 recipes (blockwise, mxfp8): each of its three GEMMs (forward,
// dgrad, wgrad) quantizes both operands from the high-precision tensors, in blocks along the
// GEMM's reduction dimension, as the recipe's table says:
//   blockwise  activations and gradients in 1 x 128 tiles, weights in 128 x 128 blocks, fp32
//              scales (DeepSeek-V3's recipe, Transformer Engine's Float8BlockScaling);
//   mxfp8      every operand in 1 x 32 blocks, power-of-two (E8M0) scales.
// Two backends compute the GEMMs: emulated (quantize-dequantize exactly in software, then a bf16
// GEMM with fp32 accumulation on the process's GEMM path, model/gemm.h), and native (blockwise on
// sm_90: the same codes and scales on FP8 tensor cores through cuBLASLt). A DelayWgradScope
// delays the wgrad GEMM as it does a bf16 layer's.

#include <ATen/ATen.h>

#include "config/recipe.h"

namespace bitparity {
namespace ops {

// x @ weight^T for an FP8 precision (InvalidArgument otherwise); x: [..., k], weight: [n, k].
at::Tensor Fp8Linear(const at::Tensor& x, const at::Tensor& weight,
                     const PrecisionConfig& precision);

}  // namespace ops
}  // namespace bitparity

#endif  // BITPARITY_MODEL_FP8_LINEAR_H_
