#ifndef BITPARITY_MODEL_MODEL_BUGS_H_
#define BITPARITY_MODEL_MODEL_BUGS_H_

// The model's share of the injected bugs (runtime/injected_bugs.h) in both arms: taken through
// GptModel's constructor and read at two places, the norm's choice (GptModel::Norm) and where
// the aux losses go.

namespace bitparity {

struct ModelBugs {
  bool composite_rms_norm = false;     // RMSNorm's input reached by two autograd edges
  bool aux_loss_in_objective = false;  // aux loss added to the loss instead of injected

  bool any() const { return composite_rms_norm || aux_loss_in_objective; }
};

}  // namespace bitparity

#endif  // BITPARITY_MODEL_MODEL_BUGS_H_
