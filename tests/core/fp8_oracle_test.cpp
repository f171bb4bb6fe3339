// The FP8 emulation checked against an independent oracle: PyTorch's own float8 casts
// (float8_e4m3fn, float8_e5m2, float8_e8m0fnu), which the emulation shares no code with.
//
//   - every one of the 2^32 float bit patterns encodes to the code PyTorch's cast gives, once
//     both saturate (the emulation saturates to the largest finite value, as Hopper's and
//     Blackwell's "satfinite" conversions do; a plain cast turns overflow into NaN or infinity);
//   - every code decodes to the float PyTorch's cast back gives;
//   - every scale the emulation computes is what the tensor quantizer of numerics/fp8_tensor.h
//     computes, over every binade of amax values and densely around every point where a scale
//     changes, and MXFP8's scales are E8M0 values;
//   - whole matrices, with ragged blocks, zeros, NaNs, infinities and saturating values, come
//     out of the tensor quantizer (PyTorch's casts) bit for bit as out of the emulation, for the
//     block shapes of both recipes' forward, dgrad and wgrad GEMMs.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "numerics/float_bits.h"
#include "numerics/fp8.h"
#include "numerics/fp8_tensor.h"
#include "numerics/random.h"

namespace bitparity {
namespace {

// "0x..." of a float's bits (AssertionResult streams each operand separately, so std::hex would
// not carry over).
std::string Hex(uint32_t value) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "0x%08x", value);
  return buffer;
}

constexpr int64_t kChunk = int64_t{1} << 20;  // 4 MiB of floats: stays in the heap, not mmap

// Float bit patterns [first, first + count) as a tensor of floats.
at::Tensor BitPatterns(int64_t first, int64_t count) {
  return at::arange(first, first + count, at::kLong).to(at::kUInt32).view(at::kFloat);
}

// Runs `check` over every float bit pattern in chunks; stops at the first failing chunk.
// The sweeps use two intra-op threads (the values are independent of the thread count).
template <typename Check>
void ForEveryFloat(int64_t first, int64_t end, const Check& check) {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  for (int64_t start = first; start < end; start += kChunk) {
    if (!check(BitPatterns(start, std::min(kChunk, end - start)))) break;
  }
  at::set_num_threads(threads);
}

// Codes from our encoder for every element of `values`, computed on all intra-op threads.
template <typename Encode>
at::Tensor EncodeAll(const at::Tensor& values, Encode encode) {
  at::Tensor codes = at::empty({values.numel()}, at::kByte);
  const float* in = values.data_ptr<float>();
  uint8_t* out = codes.data_ptr<uint8_t>();
  at::parallel_for(0, values.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = encode(in[i]);
  });
  return codes;
}

// PyTorch's cast of `values` to `dtype` after saturating to +-max (NaNs kept), as raw bytes.
at::Tensor TorchCodes(const at::Tensor& values, at::ScalarType dtype, double max) {
  at::Tensor saturated = at::where(at::isnan(values), values, values.clamp(-max, max));
  return saturated.to(dtype).view(at::kByte);
}

// Reports the first element where two byte tensors differ, with the float it came from.
::testing::AssertionResult SameCodes(const at::Tensor& values, const at::Tensor& ours,
                                     const at::Tensor& theirs) {
  if (at::equal(ours, theirs)) return ::testing::AssertionSuccess();
  at::Tensor differ = ours.ne(theirs);
  const int64_t i = differ.nonzero()[0][0].item<int64_t>();
  const float v = values[i].item<float>();
  return ::testing::AssertionFailure()
         << differ.sum().item<int64_t>() << " codes differ; first: bits " << Hex(FloatBits(v))
         << " (" << v << "): emulation " << Hex(ours[i].item<uint8_t>()) << ", PyTorch "
         << Hex(theirs[i].item<uint8_t>());
}

// Every float bit pattern through `encode`, against PyTorch's cast to `dtype` (both saturating).
void ExpectEveryFloatEncodesLikePyTorch(uint8_t (*encode)(float), at::ScalarType dtype,
                                        double max) {
  ForEveryFloat(0, int64_t{1} << 32, [&](const at::Tensor& values) {
    auto same = SameCodes(values, EncodeAll(values, encode), TorchCodes(values, dtype, max));
    EXPECT_TRUE(same);
    return static_cast<bool>(same);
  });
}

TEST(Fp8Oracle, EveryFloatEncodesToPyTorchsE4M3Code) {
  ExpectEveryFloatEncodesLikePyTorch(fp8::EncodeE4M3, at::kFloat8_e4m3fn, fp8::kE4M3Max);
}

TEST(Fp8Oracle, EveryFloatEncodesToPyTorchsE5M2Code) {
  ExpectEveryFloatEncodesLikePyTorch(fp8::EncodeE5M2, at::kFloat8_e5m2, fp8::kE5M2Max);
}

TEST(Fp8Oracle, EveryCodeDecodesToPyTorchsValue) {
  at::Tensor codes = at::arange(256, at::kInt).to(at::kByte);
  at::Tensor e4m3 = codes.view(at::kFloat8_e4m3fn).to(at::kFloat);
  at::Tensor e5m2 = codes.view(at::kFloat8_e5m2).to(at::kFloat);
  at::Tensor e8m0 = codes.view(at::kFloat8_e8m0fnu).to(at::kFloat);
  for (int c = 0; c < 256; ++c) {
    const float ours4 = fp8::DecodeE4M3(static_cast<uint8_t>(c));
    const float ours5 = fp8::DecodeE5M2(static_cast<uint8_t>(c));
    const float theirs4 = e4m3[c].item<float>(), theirs5 = e5m2[c].item<float>();
    EXPECT_TRUE(std::isnan(ours4) ? std::isnan(theirs4) : FloatBits(ours4) == FloatBits(theirs4))
        << "E4M3 code " << c << ": " << ours4 << " vs " << theirs4;
    EXPECT_TRUE(std::isnan(ours5) ? std::isnan(theirs5) : FloatBits(ours5) == FloatBits(theirs5))
        << "E5M2 code " << c << ": " << ours5 << " vs " << theirs5;
    // E8M0, the MXFP8 scale format: code c stands for 2^(c - 127), 255 for NaN.
    const float theirs8 = e8m0[c].item<float>();
    if (c == 255) {
      EXPECT_TRUE(std::isnan(theirs8));
    } else {
      EXPECT_EQ(FloatBits(theirs8), FloatBits(std::ldexp(1.0f, c - 127))) << "E8M0 code " << c;
    }
  }
}

// Scales as functions of a block's amax: the emulation's scale against the tensor quantizer's,
// and every MXFP8 scale an E8M0 value (PyTorch's cast to float8_e8m0fnu keeps it exactly).
::testing::AssertionResult SameScales(const at::Tensor& amax) {
  at::Tensor blockwise = fp8::DequantizationScales(amax, fp8::Scaling::kBlockwise);
  at::Tensor mx = fp8::DequantizationScales(amax, fp8::Scaling::kMx);
  at::Tensor ours_blockwise = at::empty_like(amax), ours_mx = at::empty_like(amax);
  const float* in = amax.data_ptr<float>();
  float* ob = ours_blockwise.data_ptr<float>();
  float* om = ours_mx.data_ptr<float>();
  at::parallel_for(0, amax.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      ob[i] = 1.0f / fp8::BlockwiseScale(in[i]);  // the dequantization multiplier
      om[i] = fp8::MxScale(in[i]);
    }
  });
  if (!at::equal(blockwise.view(at::kInt), ours_blockwise.view(at::kInt)) ||
      !at::equal(mx.view(at::kInt), ours_mx.view(at::kInt))) {
    at::Tensor differ = blockwise.view(at::kInt)
                            .ne(ours_blockwise.view(at::kInt))
                            .logical_or(mx.view(at::kInt).ne(ours_mx.view(at::kInt)));
    const int64_t i = differ.nonzero()[0][0].item<int64_t>();
    return ::testing::AssertionFailure()
           << "amax bits " << Hex(FloatBits(in[i])) << ": blockwise "
           << ours_blockwise[i].item<float>() << " vs " << blockwise[i].item<float>() << ", mx "
           << ours_mx[i].item<float>() << " vs " << mx[i].item<float>();
  }
  if (!at::equal(mx.to(at::kFloat8_e8m0fnu).to(at::kFloat), mx)) {
    return ::testing::AssertionFailure() << "an MXFP8 scale is not an E8M0 value";
  }
  return ::testing::AssertionSuccess();
}

// Every binade of positive amax values (one bit pattern in 61, so that the low mantissa bits
// vary too), +inf, every subnormal amax, and dense neighbourhoods (8192 patterns) around every
// place where a scale changes: 448 * 2^k, where 448 / amax and amax / 448 cross a power of two.
TEST(Fp8Oracle, EveryScaleBoundaryGivesTheSameScaleInTheEmulationAndTheTensorQuantizer) {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  at::Tensor every_binade =
      at::arange(0, int64_t{0x7F800001}, 61, at::kLong).to(at::kUInt32).view(at::kFloat);
  EXPECT_TRUE(SameScales(every_binade));
  EXPECT_TRUE(SameScales(BitPatterns(0, int64_t{1} << 23)));  // 0 and every subnormal
  EXPECT_TRUE(SameScales(at::full({1}, std::numeric_limits<float>::infinity())));
  std::vector<int64_t> boundaries;
  for (int k = -160; k <= 130; ++k) {
    const float b = std::ldexp(fp8::kE4M3Max, k);
    if (b > 0 && std::isfinite(b)) boundaries.push_back(FloatBits(b));
  }
  at::Tensor centres = at::tensor(boundaries, at::kLong).view({-1, 1});
  at::Tensor around = (centres + at::arange(-4096, 4096, at::kLong).view({1, -1}))
                          .clamp(0, int64_t{0x7F800000})
                          .view({-1});
  EXPECT_TRUE(SameScales(around.to(at::kUInt32).view(at::kFloat)));
  at::set_num_threads(threads);
}

// Random matrices with the awkward values mixed in: zeros, signed zeros, NaNs, infinities,
// values that saturate, subnormal magnitudes, and an all-zero block.
at::Tensor AwkwardMatrix(int64_t rows, int64_t cols, uint64_t stream) {
  at::Tensor m = at::empty({rows, cols}, at::kFloat);
  float* data = m.data_ptr<float>();
  Rng rng(23, {stream});
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::infinity(),
                            1e30f,
                            -7e5f,
                            1e-40f,
                            448.0f,
                            464.0f,
                            2e-38f};
  for (int64_t i = 0; i < m.numel(); ++i) {
    const double u = rng.Uniform();
    if (u < 0.02) {
      data[i] = specials[rng.Below(10)];
    } else {
      // Magnitudes over many binades, so that blocks get very different scales.
      data[i] = static_cast<float>(rng.Normal() * std::ldexp(1.0, static_cast<int>(u * 40) - 20));
    }
  }
  if (rows >= 8 && cols >= 8) m.narrow(0, 0, 8).narrow(1, 0, 8).zero_();
  return m;
}

TEST(Fp8Oracle, MatricesQuantizeBitForBitLikeTheEmulation) {
  struct Case {
    int64_t rows, cols, block_rows, block_cols;
    fp8::Scaling scaling;
  };
  const fp8::Scaling kB = fp8::Scaling::kBlockwise, kMx = fp8::Scaling::kMx;
  const Case cases[] = {
      {300, 260, 1, 128, kB}, {300, 260, 128, 128, kB}, {300, 260, 128, 1, kB},
      {257, 64, 1, 128, kB},  {64, 64, 128, 128, kB},   {300, 260, 1, 32, kMx},
      {300, 260, 32, 1, kMx}, {70, 33, 1, 32, kMx},     {5, 1000, 1, 128, kB},
      {1000, 5, 128, 1, kB},  {1, 1, 1, 128, kB},       {129, 129, 128, 128, kB},
  };
  uint64_t stream = 0;
  for (const Case& c : cases) {
    at::Tensor m = AwkwardMatrix(c.rows, c.cols, ++stream);
    at::Tensor emulated = m.clone();
    fp8::QuantizeDequantize(emulated.data_ptr<float>(), c.rows, c.cols, c.block_rows, c.block_cols,
                            c.scaling);
    fp8::QuantizedMatrix q = fp8::QuantizeBlocks(m, c.block_rows, c.block_cols, c.scaling);
    ASSERT_EQ(q.codes.scalar_type(), at::kFloat8_e4m3fn);
    at::Tensor dequantized = fp8::Dequantize(q);
    // Bitwise; a NaN matches a NaN (the casts need not agree on a NaN's payload).
    at::Tensor differ =
        dequantized.view(at::kInt)
            .ne(emulated.view(at::kInt))
            .logical_and(at::isnan(dequantized).logical_and(at::isnan(emulated)).logical_not());
    const int64_t n = differ.sum().item<int64_t>();
    EXPECT_EQ(n, 0) << c.rows << "x" << c.cols << " blocks " << c.block_rows << "x" << c.block_cols
                    << (c.scaling == kB ? " blockwise" : " mxfp8") << ": " << n
                    << " elements differ";
    if (n > 0) {
      const int64_t i = differ.view({-1}).nonzero()[0][0].item<int64_t>();
      ADD_FAILURE() << "first at flat index " << i << ": input " << m.view({-1})[i].item<float>()
                    << ", emulation " << emulated.view({-1})[i].item<float>() << ", tensors "
                    << dequantized.view({-1})[i].item<float>();
    }
  }
}

}  // namespace
}  // namespace bitparity
