#ifndef BITPARITY_RUNTIME_CHECKPOINT_H_
#define BITPARITY_RUNTIME_CHECKPOINT_H_

// A rank's training state saved at an iteration boundary and restored into a fresh rank process
// (trace/checkpoint_file.h holds the file format): the contract of restart replay is that the
// resumed run's every record equals the uninterrupted run's. The audit of what the next iteration
// depends on, and so what is saved, is in docs/checkpoint-format.md.

#include <string>

#include "runtime/injected_bugs.h"
#include "runtime/trainer.h"
#include "trace/checkpoint_file.h"

namespace bitparity {

// This rank's state after trainer.position().iteration iterations. `bugs` re-creates the saving
// faults (runtime/injected_bugs.h) that the restart-replay check exists for.
RankCheckpoint CaptureCheckpoint(Trainer& trainer, const RuntimeBugs& bugs);

// Writes this rank's checkpoint into CheckpointFolder(dir, iteration), creating the folder;
// returns the file's path. InfrastructureError when the file system refuses.
std::string SaveCheckpoint(Trainer& trainer, const std::string& dir, const RuntimeBugs& bugs);

// Reads <folder>/rank_<r>.h5 for this rank and restores the trainer from it: masters, compute
// weights, Adam's moments and the position. The checkpoint may come from another arm of the
// recipe (the arms hold the same state at an iteration boundary). InputError naming the file
// when it is of another recipe (listing the settings that differ), another world size or rank,
// holds other parameters or shapes, or is at or after the recipe's last iteration.
void ResumeFromCheckpoint(const std::string& folder, Trainer* trainer);

}  // namespace bitparity

#endif  // BITPARITY_RUNTIME_CHECKPOINT_H_
