#ifndef BITPARITY_MODEL_MODEL_BUGS_H_
#define BITPARITY_MODEL_MODEL_BUGS_H_

// Test hooks that bring back, one at a time, the silent bugs met while building the overlap path
// (and the seed's own), so that tests can show the parity checks catch each of them. Off unless
// a test sets them, or BITPARITY_INJECT_BUG names them (comma-separated) in a rank's environment
// (runtime/debug_switches.h, which parses them into runtime/injected_bugs.h's InjectedBugs).
// The model's share, in both arms: taken through GptModel's constructor and read at two places,
// the norm's choice (GptModel::Norm) and where the aux losses go.

namespace bitparity {

struct ModelBugs {
  bool composite_rms_norm = false;     // RMSNorm's input reached by two autograd edges
  bool aux_loss_in_objective = false;  // aux loss added to the loss instead of injected

  bool any() const { return composite_rms_norm || aux_loss_in_objective; }
};

}  // namespace bitparity

#endif  // BITPARITY_MODEL_MODEL_BUGS_H_
