#include "runtime/checkpoint.h"

#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "config/recipe_edit.h"
#include "core/errors.h"

namespace bitparity {
namespace {

std::vector<float> FloatsOf(const at::Tensor& tensor) {
  at::Tensor t = tensor.detach().to(at::kCPU, at::kFloat).contiguous();
  const float* data = t.data_ptr<float>();
  return std::vector<float>(data, data + t.numel());
}

// The compute weight's raw bits, one per element: an fp32 weight's 32, a bf16 weight's 16.
std::vector<uint32_t> WeightBitsOf(const at::Tensor& weight) {
  at::Tensor t = weight.detach().to(at::kCPU).contiguous();
  std::vector<uint32_t> bits(static_cast<size_t>(t.numel()));
  if (t.scalar_type() == at::kBFloat16) {
    const uint16_t* data = reinterpret_cast<const uint16_t*>(t.data_ptr());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = data[i];
  } else {
    std::memcpy(bits.data(), t.data_ptr<float>(), bits.size() * sizeof(float));
  }
  return bits;
}

// `values` (the master's shape) copied into `target` in place, on its device.
void CopyFloats(const std::vector<float>& values, at::Tensor* target) {
  at::Tensor host = at::from_blob(const_cast<float*>(values.data()), target->sizes(), at::kFloat);
  target->copy_(host);
}

void CopyWeightBits(const CheckpointParameter& saved, at::Tensor* weight) {
  if (weight->scalar_type() == at::kBFloat16) {
    std::vector<uint16_t> bits(saved.weight_bits.begin(), saved.weight_bits.end());
    at::Tensor host = at::from_blob(bits.data(), weight->sizes(), at::kBFloat16);
    weight->copy_(host);
  } else {
    at::Tensor host =
        at::from_blob(const_cast<uint32_t*>(saved.weight_bits.data()), weight->sizes(), at::kFloat);
    weight->copy_(host);
  }
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The checkpoint belongs to this recipe, world and rank, and holds this rank's parameters.
void CheckFits(const std::string& path, const RankCheckpoint& saved, Trainer& trainer) {
  const ParallelLayout& layout = trainer.layout();
  if (saved.world_size != layout.world_size || saved.rank != layout.rank) {
    throw InputError(path + ": saved by rank " + std::to_string(saved.rank) + " of " +
                     std::to_string(saved.world_size) + ", read by rank " +
                     std::to_string(layout.rank) + " of " + std::to_string(layout.world_size));
  }
  const Recipe& recipe = trainer.recipe();
  if (saved.recipe_digest != RecipeDigest(recipe.text)) {
    std::string changes;
    for (const std::string& change : RecipeSettingChanges(saved.recipe, recipe.text)) {
      changes += (changes.empty() ? "" : "; ") + change;
    }
    throw InputError(path + ": a checkpoint of another recipe (" +
                     (changes.empty() ? std::string("its text differs") : changes) +
                     "); resume with the recipe it was saved by");
  }
  if (saved.position.iteration >= recipe.train.iterations) {
    throw InputError(path + ": saved after iteration " + std::to_string(saved.position.iteration) +
                     ", and the recipe trains " + std::to_string(recipe.train.iterations) +
                     ": nothing is left to resume");
  }
  const std::vector<Parameter>& params = trainer.model().parameters().all();
  if (saved.parameters.size() != params.size()) {
    throw InputError(path + ": holds " + std::to_string(saved.parameters.size()) +
                     " parameters, this rank has " + std::to_string(params.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const CheckpointParameter& s = saved.parameters[i];
    const std::vector<int64_t> shape = params[i].master.sizes().vec();
    if (s.name != params[i].name || s.shape != shape) {
      throw InputError(path + ": parameter " + std::to_string(i) + " is " + s.name + " " +
                       ShapeText(s.shape) + ", this rank's is " + params[i].name + " " +
                       ShapeText(shape));
    }
    const char* dtype = params[i].weight.scalar_type() == at::kBFloat16 ? "bfloat16" : "float32";
    if (s.weight_dtype != dtype) {
      throw InputError(path + ": parameter " + s.name + " has a " + s.weight_dtype +
                       " weight, this rank trains it in " + dtype);
    }
  }
}

}  // namespace

RankCheckpoint CaptureCheckpoint(Trainer& trainer, const RuntimeBugs& bugs) {
  RankCheckpoint checkpoint;
  checkpoint.rank = trainer.layout().rank;
  checkpoint.world_size = trainer.layout().world_size;
  checkpoint.recipe = trainer.recipe().text;
  checkpoint.recipe_digest = RecipeDigest(trainer.recipe().text);
  checkpoint.arm = trainer.arm().name;
  checkpoint.engine = ToString(trainer.arm().engine);
  checkpoint.position = trainer.position();
  if (bugs.checkpoint_drops_optimizer_steps) checkpoint.position.optimizer_steps = 0;
  if (bugs.checkpoint_drops_lr_position) checkpoint.position.lr_steps = 0;
  if (bugs.checkpoint_resets_data_position) checkpoint.position.data_batches = 0;
  AdamOptimizer& optimizer = trainer.optimizer();
  const std::vector<Parameter>& params = trainer.model().parameters().all();
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = params[i];
    CheckpointParameter saved;
    saved.name = p.name;
    saved.shape = p.master.sizes().vec();
    saved.master = FloatsOf(
        bugs.checkpoint_masters_in_training_dtype ? p.master.to(p.weight.scalar_type()) : p.master);
    saved.weight_dtype = p.weight.scalar_type() == at::kBFloat16 ? "bfloat16" : "float32";
    saved.weight_bits = WeightBitsOf(p.weight);
    saved.exp_avg = FloatsOf(optimizer.exp_avg()[i]);
    saved.exp_avg_sq = FloatsOf(optimizer.exp_avg_sq()[i]);
    checkpoint.parameters.push_back(std::move(saved));
  }
  return checkpoint;
}

std::string SaveCheckpoint(Trainer& trainer, const std::string& dir, const RuntimeBugs& bugs) {
  const std::string folder = CheckpointFolder(dir, trainer.position().iteration);
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (!std::filesystem::is_directory(folder)) {
    throw InfrastructureError(folder + ": cannot create the checkpoint folder" +
                              (ec ? ": " + ec.message() : std::string(" (a file is in the way)")));
  }
  const std::string path =
      (std::filesystem::path(folder) / CheckpointFileName(trainer.layout().rank)).string();
  WriteCheckpoint(path, CaptureCheckpoint(trainer, bugs));
  return path;
}

void ResumeFromCheckpoint(const std::string& folder, Trainer* trainer) {
  const std::string path =
      (std::filesystem::path(folder) / CheckpointFileName(trainer->layout().rank)).string();
  const RankCheckpoint saved = ReadCheckpoint(path);
  CheckFits(path, saved, *trainer);
  torch::NoGradGuard no_grad;
  AdamOptimizer& optimizer = trainer->optimizer();
  std::vector<Parameter>& params = trainer->model().parameters().all();
  for (size_t i = 0; i < params.size(); ++i) {
    Parameter& p = params[i];
    const CheckpointParameter& s = saved.parameters[i];
    CopyFloats(s.master, &p.master);
    if (!p.weight.is_same(p.master)) CopyWeightBits(s, &p.weight);
    CopyFloats(s.exp_avg, &optimizer.exp_avg()[i]);
    CopyFloats(s.exp_avg_sq, &optimizer.exp_avg_sq()[i]);
  }
  trainer->set_position(saved.position);
}

}  // namespace bitparity
