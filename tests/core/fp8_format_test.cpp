// FP8 formats and block-scaled quantizers, bit-exact to their rules: every code decodes to the
// value its fields define; every float of a dense sweep (ties and boundaries included) encodes
// to the code an exact nearest-value search picks; blockwise and MXFP8 scales and round trips
// match hand-computed cases, including amax 0, one huge value, negative blocks, saturation and
// ragged last blocks.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "numerics/float_bits.h"
#include "numerics/fp8.h"

namespace bitparity {
namespace {

struct Format {
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool ieee_specials;  // E5M2: all-ones exponent = inf/NaN; E4M3: only S.1111.111 is NaN
  double max_finite;
  uint8_t (*encode)(float);
  float (*decode)(uint8_t);
};

const Format kE4M3{"E4M3", 4, 3, 7, false, 448.0, fp8::EncodeE4M3, fp8::DecodeE4M3};
const Format kE5M2{"E5M2", 5, 2, 15, true, 57344.0, fp8::EncodeE5M2, fp8::DecodeE5M2};

// The value a code stands for, from the format's definition, in double arithmetic.
double Definition(const Format& f, uint8_t code) {
  const int e = (code >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int m = code & ((1 << f.mantissa_bits) - 1);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int all_ones = (1 << f.exponent_bits) - 1;
  if (f.ieee_specials && e == all_ones) {
    return m == 0 ? sign * INFINITY : NAN;
  }
  if (!f.ieee_specials && e == all_ones && m == (1 << f.mantissa_bits) - 1) return NAN;
  const double fraction = static_cast<double>(m) / (1 << f.mantissa_bits);
  if (e == 0) return sign * std::ldexp(fraction, 1 - f.bias);
  return sign * std::ldexp(1.0 + fraction, e - f.bias);
}

// The exact reference encoder: nearest finite value, ties to the even code, saturation beyond
// the max finite value, NaN to the NaN code.
class ReferenceEncoder {
 public:
  explicit ReferenceEncoder(const Format& f) : format_(f) {
    for (int c = 0; c < 0x80; ++c) {
      const double v = Definition(f, static_cast<uint8_t>(c));
      if (std::isfinite(v)) values_.push_back({v, static_cast<uint8_t>(c)});
    }
    std::sort(values_.begin(), values_.end());
  }

  uint8_t Encode(float x) const {
    const uint8_t sign = std::signbit(x) ? 0x80 : 0;
    if (std::isnan(x)) return sign | 0x7F;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= format_.max_finite) return sign | values_.back().second;
    auto upper = std::lower_bound(values_.begin(), values_.end(), std::make_pair(a, uint8_t{0}));
    if (upper->first == a) return sign | upper->second;
    auto lower = upper - 1;
    const double below = a - lower->first, above = upper->first - a;
    if (below < above) return sign | lower->second;
    if (above < below) return sign | upper->second;
    return sign | ((lower->second & 1) == 0 ? lower->second : upper->second);
  }

  const std::vector<std::pair<double, uint8_t>>& values() const { return values_; }

 private:
  const Format& format_;
  std::vector<std::pair<double, uint8_t>> values_;
};

class Fp8FormatTest : public ::testing::TestWithParam<const Format*> {};

TEST_P(Fp8FormatTest, EveryCodeDecodesToItsDefinition) {
  const Format& f = *GetParam();
  for (int c = 0; c < 256; ++c) {
    const double expected = Definition(f, static_cast<uint8_t>(c));
    const float got = f.decode(static_cast<uint8_t>(c));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << f.name << " code " << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), expected) << f.name << " code " << c;
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << f.name << " code " << c;
    }
  }
}

TEST_P(Fp8FormatTest, DenseSweepEncodesLikeTheExactReference) {
  const Format& f = *GetParam();
  ReferenceEncoder reference(f);
  int64_t checked = 0;
  auto check = [&](float x) {
    const uint8_t want = reference.Encode(x), got = f.encode(x);
    ++checked;
    if (want != got) {
      ADD_FAILURE() << f.name << ": " << x << " (bits 0x" << std::hex << FloatBits(x)
                    << ") encodes to 0x" << int(got) << ", expected 0x" << int(want);
      return false;
    }
    return true;
  };
  // Every float across the subnormal / normal boundary of the format, both signs.
  const float low = f.exponent_bits == 4 ? 0x1p-12f : 0x1p-20f;
  const float high = f.exponent_bits == 4 ? 0x1p-3f : 0x1p-11f;
  for (uint32_t bits = FloatBits(low); bits <= FloatBits(high); ++bits) {
    if (!check(FloatFromBits(bits)) || !check(-FloatFromBits(bits))) return;
  }
  // Every float of the top binades up to past saturation.
  const float top = static_cast<float>(f.max_finite) / 2;
  for (uint32_t bits = FloatBits(top); bits <= FloatBits(top * 8); ++bits) {
    if (!check(FloatFromBits(bits))) return;
  }
  // The whole 32-bit range, sparsely (NaNs, infinities, huge and tiny values).
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 4099) {
    if (!check(FloatFromBits(static_cast<uint32_t>(bits)))) return;
  }
  // Every tie (midpoint of two neighbouring values) and its two neighbouring floats.
  const auto& values = reference.values();
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    const float mid = static_cast<float>((values[i].first + values[i + 1].first) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      if (!check(x) || !check(-x)) return;
    }
  }
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, std::numeric_limits<float>::denorm_min(),
                  static_cast<float>(f.max_finite),
                  std::nextafter(static_cast<float>(f.max_finite), INFINITY)}) {
    if (!check(x)) return;
  }
  EXPECT_GT(checked, 10000000);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8FormatTest, ::testing::Values(&kE4M3, &kE5M2),
                         [](const ::testing::TestParamInfo<const Format*>& info) {
                           return std::string(info.param->name);
                         });

TEST(Fp8Format, SaturationAndSpecials) {
  EXPECT_EQ(fp8::EncodeE4M3(448.0f), 0x7E);
  EXPECT_EQ(fp8::EncodeE4M3(464.0f), 0x7E);  // the would-be tie with 480 saturates
  EXPECT_EQ(fp8::EncodeE4M3(1e30f), 0x7E);
  EXPECT_EQ(fp8::EncodeE4M3(-INFINITY), 0xFE);
  EXPECT_EQ(fp8::EncodeE4M3(NAN) & 0x7F, 0x7F);
  EXPECT_EQ(fp8::EncodeE4M3(0x1p-9f), 0x01);    // smallest subnormal
  EXPECT_EQ(fp8::EncodeE4M3(0x1p-10f), 0x00);   // a tie between 0 and 2^-9: to even
  EXPECT_EQ(fp8::EncodeE4M3(0x1.8p-9f), 0x02);  // 1.5 x 2^-9: a tie, to even (2)
  EXPECT_EQ(fp8::EncodeE4M3(0x1p-6f), 0x08);    // smallest normal
  EXPECT_EQ(fp8::EncodeE5M2(57344.0f), 0x7B);
  EXPECT_EQ(fp8::EncodeE5M2(INFINITY), 0x7B);
  EXPECT_TRUE(std::isinf(fp8::DecodeE5M2(0x7C)));
  EXPECT_TRUE(std::isnan(fp8::DecodeE5M2(0x7D)));
}

std::vector<float> RoundTrip(std::vector<float> values, int64_t rows, int64_t cols,
                             int64_t block_rows, int64_t block_cols, fp8::Scaling scaling) {
  fp8::QuantizeDequantize(values.data(), rows, cols, block_rows, block_cols, scaling);
  return values;
}

TEST(BlockwiseScaling, ScaleIs448OverAmaxRoundedDownToAPowerOfTwo) {
  EXPECT_EQ(fp8::BlockwiseScale(0.0f), 1.0f);      // amax 0 -> 1
  EXPECT_EQ(fp8::BlockwiseScale(448.0f), 1.0f);    // 448 / 448 = 1, a power of two already
  EXPECT_EQ(fp8::BlockwiseScale(1000.0f), 0.25f);  // 0.448 -> 0.25
  EXPECT_EQ(fp8::BlockwiseScale(1.0f), 256.0f);    // 448 -> 256
  EXPECT_EQ(fp8::BlockwiseScale(0.7f), 512.0f);    // 640 -> 512
}

TEST(BlockwiseScaling, HandComputedRoundTrips) {
  // One huge value: scale 0.25; 1000 -> 250 -> E4M3 256 -> 1024; 1 -> 0.25 exact -> 1;
  // 0.001 -> 0.00025 is below half the smallest subnormal (2^-10) -> 0.
  std::vector<float> block = {1000.0f, 1.0f, 0.001f, -3.0f};
  EXPECT_EQ(RoundTrip(block, 1, 4, 1, 128, fp8::Scaling::kBlockwise),
            (std::vector<float>{1024.0f, 1.0f, 0.0f, -3.0f}));
  // amax 0: everything stays 0.
  EXPECT_EQ(RoundTrip({0.0f, -0.0f, 0.0f}, 1, 3, 1, 128, fp8::Scaling::kBlockwise),
            (std::vector<float>{0.0f, -0.0f, 0.0f}));
  // All negative: amax 0.7 -> scale 512; -0.3 -> -153.6 -> -160 -> -0.3125; -0.7 -> -358.4 ->
  // -352 -> -0.6875 (step 32 between 256 and 448).
  EXPECT_EQ(RoundTrip({-0.3f, -0.7f}, 1, 2, 1, 128, fp8::Scaling::kBlockwise),
            (std::vector<float>{-0.3125f, -0.6875f}));
}

TEST(BlockwiseScaling, SaturationBoundaryRoundTrips) {
  // amax 448: scale 1, so the values are encoded as they are. Between 416 and 448 the E4M3 step
  // is 32: 447 and 440 round up to 448, 424 down to 416, and the tie 432 goes to the even
  // mantissa (448 = 1.110b x 2^8). Nothing exceeds 448.
  EXPECT_EQ(RoundTrip({448.0f, -448.0f, 447.0f, 440.0f, 432.0f, 424.0f}, 1, 6, 1, 128,
                      fp8::Scaling::kBlockwise),
            (std::vector<float>{448.0f, -448.0f, 448.0f, 448.0f, 448.0f, 416.0f}));
  // Just above the boundary: amax 449 gives scale 0.5 (448 / 449 rounded down), 449 -> 224.5 ->
  // 224 -> 448, and 1 -> 0.5 exact -> 1.
  EXPECT_EQ(RoundTrip({449.0f, 1.0f}, 1, 2, 1, 128, fp8::Scaling::kBlockwise),
            (std::vector<float>{448.0f, 1.0f}));
}

TEST(BlockwiseScaling, RaggedLastTileUsesItsOwnAmax) {
  // 130 columns in 1x128 tiles: columns 128..129 form a tile of 2 with its own scale.
  // Scaled by the first tile's 2^-8 (amax 1e5), 0.3 would fall to the subnormal 2^-9 (0.5).
  std::vector<float> row(130, 0.5f);
  row[0] = 1e5f;
  row[128] = 0.3f;
  row[129] = -0.7f;
  std::vector<float> out = RoundTrip(row, 1, 130, 1, 128, fp8::Scaling::kBlockwise);
  EXPECT_EQ(out[128], 0.3125f);
  EXPECT_EQ(out[129], -0.6875f);
  std::vector<float> alone = RoundTrip({0.3f, -0.7f}, 1, 2, 1, 128, fp8::Scaling::kBlockwise);
  EXPECT_EQ(out[128], alone[0]);
  EXPECT_EQ(out[129], alone[1]);
}

TEST(BlockwiseScaling, WeightBlocksAre128By128) {
  // A 130 x 130 matrix: the block [128.., 0..127] is scaled by its own amax, not by the
  // huge value in block [0.., 0..].
  std::vector<float> m(130 * 130, 0.2f);
  m[0] = 1e5f;
  std::vector<float> out = RoundTrip(m, 130, 130, 128, 128, fp8::Scaling::kBlockwise);
  EXPECT_EQ(out[1], 0.0f);  // same block as 1e5: 0.2 x 2^-8 is below 2^-10 -> 0
  EXPECT_EQ(out[127], 0.0f);
  EXPECT_EQ(out[128], 0.203125f);  // block [0..127] x [128..129]: scale 2048, 409.6 -> 416
  EXPECT_EQ(out[129 * 130 + 5], 0.203125f);  // block [128..129] x [0..127]
}

TEST(MxScaling, ScaleIsAmaxOver448RoundedUpToAPowerOfTwo) {
  EXPECT_EQ(fp8::MxScale(0.0f), 0x1p-127f);  // E8M0 0x00, as Transformer Engine stores it
  EXPECT_EQ(fp8::MxScale(448.0f), 1.0f);     // exactly 1: already a power of two
  EXPECT_EQ(fp8::MxScale(449.0f), 2.0f);
  EXPECT_EQ(fp8::MxScale(1000.0f), 4.0f);      // 2.23 -> 4
  EXPECT_EQ(fp8::MxScale(1.0f), 0x1p-8f);      // 1/448 = 2^-8.8 -> 2^-8
  EXPECT_EQ(fp8::MxScale(1e-44f), 0x1p-127f);  // saturates at the smallest E8M0 scale
  EXPECT_EQ(fp8::MxScale(std::numeric_limits<float>::max()), 0x1p120f);
  EXPECT_EQ(fp8::MxScale(INFINITY), 0x1p127f);  // and at the largest
}

TEST(MxScaling, HandComputedRoundTripsIn32ElementBlocks) {
  // 1000 / 4 = 250 -> 256 -> 1024; 1 / 4 = 0.25 exact; -3 / 4 = -0.75 exact.
  std::vector<float> block = {1000.0f, 1.0f, -3.0f};
  EXPECT_EQ(RoundTrip(block, 1, 3, 1, 32, fp8::Scaling::kMx),
            (std::vector<float>{1024.0f, 1.0f, -3.0f}));
  // 40 columns: columns 32..39 are a ragged block with their own scale.
  // Scaled by the first block's 4096 (amax 1e6), 0.3 would fall below the smallest subnormal.
  std::vector<float> row(40, 1.0f);
  row[0] = 1e6f;
  row[32] = 0.3f;
  std::vector<float> out = RoundTrip(row, 1, 40, 1, 32, fp8::Scaling::kMx);
  EXPECT_EQ(out[32], 0.3125f);  // own scale 2^-8: 76.8 -> 80
  std::vector<float> alone(row.begin() + 32, row.end());
  alone = RoundTrip(alone, 1, 8, 1, 32, fp8::Scaling::kMx);
  EXPECT_TRUE(std::equal(alone.begin(), alone.end(), out.begin() + 32));
  // Values at the saturation boundary stay in range: amax / scale <= 448 by construction.
  std::vector<float> edge = RoundTrip({448.0f, -448.0f, 447.0f}, 1, 3, 1, 32, fp8::Scaling::kMx);
  EXPECT_EQ(edge, (std::vector<float>{448.0f, -448.0f, 448.0f}));
}

TEST(MxScaling, AllNegativeAndAllZeroBlocks) {
  // All negative: amax 0.7, 0.7 / 448 = 2^-9.3 rounds up to the scale 2^-9; -0.3 -> -153.6 ->
  // -160 -> -0.3125 and -0.7 -> -358.4 -> -352 -> -0.6875.
  EXPECT_EQ(RoundTrip({-0.3f, -0.7f}, 1, 2, 1, 32, fp8::Scaling::kMx),
            (std::vector<float>{-0.3125f, -0.6875f}));
  // amax 0: scale 1 and zeros keep their signs.
  std::vector<float> zeros = RoundTrip({0.0f, -0.0f, 0.0f}, 1, 3, 1, 32, fp8::Scaling::kMx);
  EXPECT_EQ(zeros, (std::vector<float>{0.0f, 0.0f, 0.0f}));
  EXPECT_TRUE(std::signbit(zeros[1]));
  EXPECT_FALSE(std::signbit(zeros[0]));
}

}  // namespace
}  // namespace bitparity
