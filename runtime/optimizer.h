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

  // The learning rate of 1-based `iteration`: linear warmup, then constant or cosine decay to
  // min_lr at the last iteration.
  double LearningRate(int64_t iteration) const;

  // One update of every master from its main grad, then the compute weights are refreshed.
  void Step(int64_t iteration, double learning_rate);

 private:
  TrainConfig config_;
  ParameterStore* params_;
  std::vector<at::Tensor> exp_avg_;
  std::vector<at::Tensor> exp_avg_sq_;
};

}  // namespace bitparity

#endif  // BITPARITY_RUNTIME_OPTIMIZER_H_
