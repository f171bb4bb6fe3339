#ifndef BITPARITY_TRACE_CHECKPOINT_FILE_H_
#define BITPARITY_TRACE_CHECKPOINT_FILE_H_

// A rank's checkpoint (docs/checkpoint-format.md): everything the iteration after it depends on,
// one HDF5 file per rank, `<dir>/rank_<r>.h5`, written atomically and readable with h5py.
//   - four counters, kept apart as a real trainer keeps them (Megatron's iteration, its
//     optimizer's step, its LR scheduler's step and its consumed samples): a resume that loses
//     one of them is a fault the restart-replay check names;
//   - per parameter, in the model's order: the fp32 master, the compute weight in its training
//     dtype (bf16 as its raw 16 bits), and Adam's two fp32 moments;
//   - the recipe text and digest, the arm, the world size and the rank, so that a resume on
//     another recipe or world is refused by name.
// What the next iteration does not need is not saved, because it is a function of the counters:
// the batch of an iteration is drawn from (seed, batch index), dropout from (seed, iteration,
// microbatch, layer), and the main grads are zeroed at every iteration's start. Torch-free.

#include <cstdint>
#include <string>
#include <vector>

namespace bitparity {

inline constexpr char kCheckpointSchema[] = "bitparity-checkpoint";
inline constexpr int64_t kCheckpointSchemaVersion = 1;

// Where training stands after `iteration` iterations.
struct TrainingPosition {
  int64_t iteration = 0;        // iterations completed
  int64_t optimizer_steps = 0;  // Adam steps taken: the next step's bias correction uses + 1
  int64_t lr_steps = 0;         // the LR schedule's position: the next rate is of step + 1
  int64_t data_batches = 0;     // global batches consumed: the next batch is batch + 1

  bool operator==(const TrainingPosition& o) const {
    return iteration == o.iteration && optimizer_steps == o.optimizer_steps &&
           lr_steps == o.lr_steps && data_batches == o.data_batches;
  }
};

// One parameter's saved state. `weight` holds the compute weight's raw bits: fp32 values as
// their 32 bits, bf16 values as their 16 bits (one per uint32 in memory, uint16 in the file).
struct CheckpointParameter {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> master;
  std::string weight_dtype;  // "float32" or "bfloat16"
  std::vector<uint32_t> weight_bits;
  std::vector<float> exp_avg;
  std::vector<float> exp_avg_sq;
};

struct RankCheckpoint {
  int64_t rank = 0;
  int64_t world_size = 1;
  std::string recipe;         // the recipe's text
  std::string recipe_digest;  // RecipeDigest of it
  std::string arm;
  std::string engine;
  TrainingPosition position;
  std::vector<CheckpointParameter> parameters;
};

// "rank_<r>.h5".
std::string CheckpointFileName(int64_t rank);

// "<dir>/iteration_<K>": where a run that saves into `dir` puts its checkpoint of iteration K.
std::string CheckpointFolder(const std::string& dir, int64_t iteration);

// Writes atomically; InfrastructureError naming the file when the file system refuses.
void WriteCheckpoint(const std::string& path, const RankCheckpoint& checkpoint);

// InputError naming the file when it is missing, truncated, corrupt, of another schema, or its
// datasets disagree with the shapes it declares.
RankCheckpoint ReadCheckpoint(const std::string& path);

}  // namespace bitparity

#endif  // BITPARITY_TRACE_CHECKPOINT_FILE_H_
