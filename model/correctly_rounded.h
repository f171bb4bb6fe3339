#ifndef BITPARITY_MODEL_CORRECTLY_ROUNDED_H_
#define BITPARITY_MODEL_CORRECTLY_ROUNDED_H_

// Element-wise math whose every result is the IEEE 754 correctly rounded one, on every host.
//
// ATen computes the square root (and exp, log, tanh) of a CPU fp32 tensor through MKL's vector
// math library, whose results depend on the code branch MKL picks: they change with MKL_CBWR and
// differ between processors of one pinned level (an Intel and an AMD host with AVX-512 disagree in
// the Adam step's square root while every gradient before it agrees). A correctly rounded result
// has one value, whatever computed it: std::sqrt is the IEEE square root on every x86 host, and
// CUDA's sqrtf is correctly rounded too, so the CPU and GPU paths agree with each other as well.

#include <ATen/ATen.h>

namespace bitparity {

// The square root of every element of an fp32 tensor, correctly rounded. CPU tensors are
// computed with std::sqrt (in parallel chunks: each element alone, so independent of threads);
// other devices through at::sqrt, which is correctly rounded there.
at::Tensor CorrectlyRoundedSqrt(const at::Tensor& x);

}  // namespace bitparity

#endif  // BITPARITY_MODEL_CORRECTLY_ROUNDED_H_
