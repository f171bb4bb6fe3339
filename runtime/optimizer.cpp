#include "runtime/optimizer.h"

#include <torch/torch.h>

#include <cmath>

#include "model/correctly_rounded.h"

namespace bitparity {

AdamOptimizer::AdamOptimizer(const TrainConfig& config, ParameterStore* params)
    : config_(config), params_(params) {
  for (const Parameter& p : params->all()) {
    exp_avg_.push_back(at::zeros_like(p.master));
    exp_avg_sq_.push_back(at::zeros_like(p.master));
  }
}

double AdamOptimizer::LearningRate(int64_t step) const {
  if (config_.warmup_iterations > 0 && step <= config_.warmup_iterations) {
    return config_.lr * static_cast<double>(step) / static_cast<double>(config_.warmup_iterations);
  }
  if (config_.lr_schedule == LrSchedule::kConstant) return config_.lr;
  const int64_t decay = config_.iterations - config_.warmup_iterations;
  if (decay <= 0) return config_.lr;
  double progress = static_cast<double>(step - config_.warmup_iterations) / decay;
  double cosine = 0.5 * (1.0 + std::cos(M_PI * std::min(progress, 1.0)));
  return config_.min_lr + (config_.lr - config_.min_lr) * cosine;
}

void AdamOptimizer::Step(int64_t step, double lr) {
  torch::NoGradGuard no_grad;
  const double b1 = config_.adam_beta1, b2 = config_.adam_beta2;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(step));
  std::vector<Parameter>& all = params_->all();
  for (size_t i = 0; i < all.size(); ++i) {
    at::Tensor& master = all[i].master;
    const at::Tensor& grad = all[i].main_grad;
    exp_avg_[i].mul_(b1).add_(grad, 1.0 - b1);
    exp_avg_sq_[i].mul_(b2).addcmul_(grad, grad, 1.0 - b2);
    // The square root correctly rounded: ATen's goes through MKL's vector math, whose bits
    // differ between hosts (model/correctly_rounded.h).
    at::Tensor denom =
        (CorrectlyRoundedSqrt(exp_avg_sq_[i]) / std::sqrt(bias2)).add_(config_.adam_eps);
    if (config_.weight_decay > 0) master.mul_(1.0 - lr * config_.weight_decay);
    master.addcdiv_(exp_avg_[i], denom, -lr / bias1);
  }
  params_->RefreshWeightsFromMasters();
}

}  // namespace bitparity
