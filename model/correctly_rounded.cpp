#include "model/correctly_rounded.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace bitparity {

at::Tensor CorrectlyRoundedSqrt(const at::Tensor& x) {
  if (!x.device().is_cpu()) return x.sqrt();
  if (x.scalar_type() != at::kFloat) {
    throw std::invalid_argument(std::string("CorrectlyRoundedSqrt takes fp32 tensors, got ") +
                                c10::toString(x.scalar_type()));
  }
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  const float* source = in.const_data_ptr<float>();
  float* result = out.mutable_data_ptr<float>();
  at::parallel_for(0, in.numel(), int64_t{1} << 15, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) result[i] = std::sqrt(source[i]);
  });
  return out;
}

}  // namespace bitparity
