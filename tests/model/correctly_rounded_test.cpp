// CorrectlyRoundedSqrt gives the IEEE 754 correctly rounded square root of every fp32 element,
// whatever MKL's vector math would have given, for any thread count.

#include "model/correctly_rounded.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <vector>

namespace bitparity {
namespace {

// fp32 values over the whole positive range (every exponent, random mantissas), with zero, the
// smallest subnormal, the largest float and infinity.
at::Tensor Values() {
  std::vector<float> values = {0.0f, std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::min(), std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::infinity()};
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < (1 << 18); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t bits = static_cast<uint32_t>(state >> 33) & 0x7fffffffu;  // positive, any exponent
    if ((bits >> 23) == 0xff) bits &= 0x7f7fffffu;                     // not inf or NaN
    float v;
    std::memcpy(&v, &bits, sizeof(v));
    values.push_back(v);
  }
  return at::tensor(values);
}

// How many elements of `root` are not the correctly rounded square root of `x`'s: the square root
// in double is correctly rounded and exact enough that rounding it to float is too.
int64_t Misrounded(const at::Tensor& x, const at::Tensor& root) {
  const float* in = x.const_data_ptr<float>();
  const float* out = root.const_data_ptr<float>();
  int64_t wrong = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float exact = static_cast<float>(std::sqrt(static_cast<double>(in[i])));
    wrong += std::memcmp(&exact, &out[i], sizeof(float)) != 0;
  }
  return wrong;
}

TEST(CorrectlyRoundedSqrt, EveryElementIsTheCorrectlyRoundedRoot) {
  const at::Tensor x = Values();
  EXPECT_EQ(Misrounded(x, CorrectlyRoundedSqrt(x)), 0);
  // What it replaces: ATen's root of the same tensor, here (MKL's vector math, whose results
  // depend on the host and MKL's branch; not asserted, it may be exact on some host).
  std::cout << "at::sqrt misrounds " << Misrounded(x, x.sqrt()) << " of " << x.numel()
            << " elements on this host\n";
}

TEST(CorrectlyRoundedSqrt, TheCheckSeesOneUlp) {
  const at::Tensor x = Values();
  at::Tensor root = CorrectlyRoundedSqrt(x);
  float* data = root.mutable_data_ptr<float>();
  data[1000] = std::nextafter(data[1000], 2 * data[1000]);
  EXPECT_EQ(Misrounded(x, root), 1);
}

TEST(CorrectlyRoundedSqrt, NonContiguousInputAndAnyThreadCountGiveTheSameBits) {
  const at::Tensor x = Values().narrow(0, 0, 1 << 18).view({512, 512});
  const at::Tensor strided = x.t();
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor one = CorrectlyRoundedSqrt(strided);
  at::set_num_threads(2);
  const at::Tensor two = CorrectlyRoundedSqrt(strided);
  at::set_num_threads(threads);
  EXPECT_TRUE(at::equal(one, two));
  EXPECT_EQ(Misrounded(strided.contiguous(), one), 0);
}

TEST(CorrectlyRoundedSqrt, RefusesOtherDtypes) {
  EXPECT_THROW(CorrectlyRoundedSqrt(at::ones({4}, at::kDouble)), std::invalid_argument);
}

}  // namespace
}  // namespace bitparity
