#ifndef BITPARITY_RUNTIME_OPTIMIZER_H_
#define BITPARITY_RUNTIME_OPTIMIZER_H_

// Adam with decoupled weight decay (AdamW) on the fp32 master weights, driven by the fp32 main
// grads. Element-wise only, so every element's update is independent of thread count.

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "config/recipe.h"
#include "model/parameters.h"

namespace bitparity {

class AdamOptimizer {
 public:
  AdamOptimizer(const TrainConfig& config, ParameterStore* params);

  // The learning rate at 1-based schedule step `step`: linear warmup, then constant or cosine
  // decay to min_lr at the last iteration.
  double LearningRate(int64_t step) const;

  // Update number `step` (1-based: its bias correction) of every master from its main grad, then
  // the compute weights are refreshed.
  void Step(int64_t step, double learning_rate);

  // Adam's moments, one per parameter in the store's order (a checkpoint saves and restores them).
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }

 private:
  TrainConfig config_;
  ParameterStore* params_;
  std::vector<at::Tensor> exp_avg_;
  std::vector<at::Tensor> exp_avg_sq_;
};

}  // namespace bitparity

#endif  // BITPARITY_RUNTIME_OPTIMIZER_H_
