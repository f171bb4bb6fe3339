#ifndef BITPARITY_CORE_RNG_STATE_H_
#define BITPARITY_CORE_RNG_STATE_H_

// The state of LibTorch's default CPU generator, kept and put back around recompute replays (the
// shape of Megatron's _fork_rng): a replay draws what the first pass drew, and leaves the state
// it found to whatever runs next. Both arms' replays use it. (Dropout masks do not depend on it:
// they come from generators keyed by their site, ops::Dropout.)

#include <ATen/ATen.h>

namespace bitparity {

// A copy of the default CPU generator's state.
at::Tensor CpuRngState();
// Makes `state` the default CPU generator's state.
void SetCpuRngState(const at::Tensor& state);

// Sets `state` for the object's lifetime, then restores the state it found.
class ScopedCpuRngState {
 public:
  explicit ScopedCpuRngState(const at::Tensor& state) : ambient_(CpuRngState()) {
    SetCpuRngState(state);
  }
  ~ScopedCpuRngState() { SetCpuRngState(ambient_); }
  ScopedCpuRngState(const ScopedCpuRngState&) = delete;
  ScopedCpuRngState& operator=(const ScopedCpuRngState&) = delete;

 private:
  at::Tensor ambient_;
};

}  // namespace bitparity

#endif  // BITPARITY_CORE_RNG_STATE_H_
