#include "model/fp8_linear.h"

#include <ATen/BlasBackend.h>
#include <torch/torch.h>

#include <stdexcept>
#include <vector>

#include "model/gemm.h"
#include "model/ops.h"
#include "numerics/fp8.h"
#include "numerics/fp8_tensor.h"

namespace bitparity {
namespace ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Every element replaced by the value its FP8 code stands for, with blocks of
// block_rows x block_cols along a [rows, cols] matrix; returned in bf16 (exact there). On the
// CPU the software emulation of numerics/fp8.h; elsewhere the tensor quantizer of
// numerics/fp8_tensor.h, which gives the same bits (tests/core/fp8_oracle_test.cpp).
at::Tensor Fp8RoundTrip(const at::Tensor& matrix, int64_t block_rows, int64_t block_cols,
                        fp8::Scaling scaling) {
  if (!matrix.is_cpu()) {
    return fp8::Dequantize(fp8::QuantizeBlocks(matrix, block_rows, block_cols, scaling))
        .to(at::kBFloat16);
  }
  at::Tensor values = matrix.to(at::kFloat).contiguous().clone();
  fp8::QuantizeDequantize(values.data_ptr<float>(), values.size(0), values.size(1), block_rows,
                          block_cols, scaling);
  return values.to(at::kBFloat16);
}

// a @ b^T on FP8 tensor cores (sm_90, cuBLASLt's blockwise scaling), bf16 out with fp32
// accumulation: `a` [m, k] quantized in 1 x 128 tiles along k, `b` [n, k] in 128 x 128 blocks or
// 1 x 128 tiles along k; k a multiple of 128 (callers pad), n a multiple of 16.
at::Tensor NativeBlockwiseGemm(const fp8::QuantizedMatrix& a, const fp8::QuantizedMatrix& b) {
  using ScalingType = at::blas::ScalingType;
  const int64_t m = a.codes.size(0), n = b.codes.size(0), k = a.codes.size(1);
  if (m == 0 || n == 0 || k == 0) {  // an expert without tokens
    return at::zeros({m, n}, a.codes.options().dtype(at::kBFloat16));
  }
  const int64_t k_blocks = k / 128, k_blocks_padded = (k_blocks + 3) / 4 * 4;
  // cuBLASLt wants row-major a, column-major b, and scales that run along m (a) and along the
  // reduction blocks (b), the latter padded to a multiple of 4.
  at::Tensor a_scales = a.scales.t().contiguous().t();  // [m, k / 128], strides (1, m)
  at::Tensor b_scales;
  int64_t b_recipe;
  if (b.block_rows == 128) {
    b_scales = at::constant_pad_nd(b.scales, {0, k_blocks_padded - k_blocks}, 0.0)
                   .contiguous()
                   .t();  // [round_up(k / 128, 4), n / 128], strides (1, round_up(k / 128, 4))
    b_recipe = static_cast<int64_t>(ScalingType::BlockWise128x128);
  } else {
    b_scales = b.scales.t().contiguous().t();  // [n, k / 128], strides (1, n)
    b_recipe = static_cast<int64_t>(ScalingType::BlockWise1x128);
  }
  const int64_t a_recipe = static_cast<int64_t>(ScalingType::BlockWise1x128);
  return at::_scaled_mm_v2(a.codes.contiguous(), b.codes.contiguous().t(), {a_scales}, {a_recipe},
                           {}, {b_scales}, {b_recipe}, {}, std::nullopt, at::kBFloat16, {},
                           /*use_fast_accum=*/false);
}

// [rows, cols] with zero columns appended up to a multiple of 128 (quantization blocks along the
// columns keep their amax, so their codes do not change; the zeros add nothing to a GEMM).
at::Tensor PadColumnsTo128(const at::Tensor& t) {
  const int64_t pad = (128 - t.size(1) % 128) % 128;
  return pad == 0 ? t : at::constant_pad_nd(t, {0, pad}, 0.0);
}

// Quantization blocks of one operand: block_rows x block_cols along its [rows, cols] matrix.
struct Fp8Blocks {
  int64_t rows;
  int64_t cols;
};

// The operands of one GEMM a @ b as the emulation multiplies them.
struct Fp8GemmOperands {
  Fp8Blocks a;
  Fp8Blocks b;
};

// One FP8 recipe: its scaling and the blocks of each GEMM's operands.
//   forward  x [tokens, k] @ weight^T (weight [n, k])
//   dgrad    g [tokens, n] @ weight
//   wgrad    g^T @ x (blocks of g and x given along their [tokens, .] matrices)
struct Fp8Recipe {
  fp8::Scaling scaling;
  Fp8GemmOperands forward;
  Fp8GemmOperands dgrad;
  Fp8GemmOperands wgrad;
};

const Fp8Recipe& Fp8RecipeOf(PrecisionRecipe recipe) {
  static const Fp8Recipe kBlockwise = {fp8::Scaling::kBlockwise,
                                       {{1, 128}, {128, 128}},
                                       {{1, 128}, {128, 128}},
                                       {{128, 1}, {128, 1}}};
  static const Fp8Recipe kMx = {
      fp8::Scaling::kMx, {{1, 32}, {1, 32}}, {{1, 32}, {32, 1}}, {{32, 1}, {32, 1}}};
  switch (recipe) {
    case PrecisionRecipe::kBlockwise:
      return kBlockwise;
    case PrecisionRecipe::kMxfp8:
      return kMx;
    case PrecisionRecipe::kFp32:
    case PrecisionRecipe::kBf16:
      break;
  }
  throw std::invalid_argument(std::string("Fp8RecipeOf: \"") + ToString(recipe) +
                              "\" is not an FP8 recipe");
}

// How one backend computes the three GEMMs of a recipe.
class Fp8Gemms {
 public:
  virtual ~Fp8Gemms() = default;
  virtual at::Tensor Forward(const at::Tensor& x2, const at::Tensor& weight,
                             const Fp8Recipe& recipe) const = 0;
  virtual at::Tensor Dgrad(const at::Tensor& g, const at::Tensor& weight,
                           const Fp8Recipe& recipe) const = 0;
  virtual at::Tensor Wgrad(const at::Tensor& g, const at::Tensor& x2,
                           const Fp8Recipe& recipe) const = 0;
};

// Quantize-dequantize in software, then the dequantized values on the process's GEMM path.
class EmulatedFp8Gemms : public Fp8Gemms {
 public:
  at::Tensor Forward(const at::Tensor& x2, const at::Tensor& weight,
                     const Fp8Recipe& r) const override {
    return gemm::Multiply(RoundTrip(x2, r.forward.a, r), RoundTrip(weight, r.forward.b, r).t());
  }
  at::Tensor Dgrad(const at::Tensor& g, const at::Tensor& weight,
                   const Fp8Recipe& r) const override {
    return gemm::Multiply(RoundTrip(g, r.dgrad.a, r), RoundTrip(weight, r.dgrad.b, r));
  }
  at::Tensor Wgrad(const at::Tensor& g, const at::Tensor& x2, const Fp8Recipe& r) const override {
    return gemm::Multiply(RoundTrip(g, r.wgrad.a, r).t(), RoundTrip(x2, r.wgrad.b, r));
  }

 private:
  static at::Tensor RoundTrip(const at::Tensor& m, const Fp8Blocks& blocks, const Fp8Recipe& r) {
    return Fp8RoundTrip(m, blocks.rows, blocks.cols, r.scaling);
  }
};

// The blockwise recipe's codes and scales on FP8 tensor cores (sm_90), in the layouts cuBLASLt
// takes: the reduction dimension along the columns of both operands, padded to 128 for wgrad.
class NativeFp8Gemms : public Fp8Gemms {
 public:
  at::Tensor Forward(const at::Tensor& x2, const at::Tensor& weight,
                     const Fp8Recipe& r) const override {
    return NativeBlockwiseGemm(fp8::QuantizeBlocks(x2, 1, 128, r.scaling),
                               fp8::QuantizeBlocks(weight, 128, 128, r.scaling));
  }
  at::Tensor Dgrad(const at::Tensor& g, const at::Tensor& weight,
                   const Fp8Recipe& r) const override {
    return NativeBlockwiseGemm(fp8::QuantizeBlocks(g, 1, 128, r.scaling),
                               fp8::QuantizeBlocks(weight.t(), 128, 128, r.scaling));
  }
  at::Tensor Wgrad(const at::Tensor& g, const at::Tensor& x2, const Fp8Recipe& r) const override {
    return NativeBlockwiseGemm(fp8::QuantizeBlocks(PadColumnsTo128(g.t()), 1, 128, r.scaling),
                               fp8::QuantizeBlocks(PadColumnsTo128(x2.t()), 1, 128, r.scaling));
  }
};

const Fp8Gemms& Fp8GemmsOf(Fp8Backend backend) {
  static const EmulatedFp8Gemms kEmulated;
  static const NativeFp8Gemms kNative;
  switch (backend) {
    case Fp8Backend::kEmulated:
      return kEmulated;
    case Fp8Backend::kNative:
      return kNative;
  }
  throw std::logic_error("Fp8GemmsOf: an Fp8Backend without an implementation");
}

class Fp8LinearFunction : public torch::autograd::Function<Fp8LinearFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            int64_t recipe, int64_t backend) {
    const at::Tensor x2 = SaveLinearInputs(ctx, x, weight);
    ctx->saved_data["recipe"] = recipe;
    ctx->saved_data["backend"] = backend;
    const at::Tensor y =
        Fp8GemmsOf(static_cast<Fp8Backend>(backend))
            .Forward(x2, weight, Fp8RecipeOf(static_cast<PrecisionRecipe>(recipe)));
    return y.view(WithLastDimension(x.sizes(), weight.size(0)));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const SavedLinear saved = SavedLinearOf(ctx);
    const at::Tensor& x2 = saved.x2;
    const at::Tensor& weight = saved.weight;
    const Fp8Recipe& recipe =
        Fp8RecipeOf(static_cast<PrecisionRecipe>(ctx->saved_data["recipe"].toInt()));
    const Fp8Gemms& gemms = Fp8GemmsOf(static_cast<Fp8Backend>(ctx->saved_data["backend"].toInt()));
    const int64_t n = weight.size(0);
    const at::Tensor g = grads[0].to(at::kBFloat16).reshape({-1, n}).contiguous();
    const at::Tensor dx = gemms.Dgrad(g, weight, recipe);
    auto wgrad = [g, x2, weight, &recipe, &gemms] {
      return gemms.Wgrad(g, x2, recipe).to(weight.scalar_type());
    };
    const at::Tensor dw = WeightGradientNowOrLater(saved.wgrad_sink, weight, std::move(wgrad));
    return {dx.view(WithLastDimension(grads[0].sizes(), weight.size(1))).to(grads[0].scalar_type()),
            dw, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor Fp8Linear(const at::Tensor& x, const at::Tensor& weight,
                     const PrecisionConfig& precision) {
  Fp8RecipeOf(precision.recipe);  // std::invalid_argument for a recipe that is not FP8
  return Fp8LinearFunction::apply(x, weight, static_cast<int64_t>(precision.recipe),
                                  static_cast<int64_t>(precision.fp8_backend));
}

}  // namespace ops
}  // namespace bitparity
