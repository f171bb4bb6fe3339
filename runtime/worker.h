#ifndef BITPARITY_RUNTIME_WORKER_H_
#define BITPARITY_RUNTIME_WORKER_H_

// The rank process: `bitparity worker --recipe R --arm A --out-dir D` (comm/rank_protocol.h).
// Reads its place in the world from the environment (torchrun or Slurm variables), joins the
// process group, trains the arm for the recipe's iterations and writes D/rank_<r>.h5. The local
// launcher starts these itself; on a cluster srun or torchrun can start them directly.

#include "comm/rank_protocol.h"

namespace bitparity {

// Trains `request.arm` on this rank and writes its trace part; returns kExitPass. Throws
// InputError for a bad recipe, arm or request, InfrastructureError for a fault of the run (a
// LibTorch error included).
int RunWorker(const WorkerRequest& request);

}  // namespace bitparity

#endif  // BITPARITY_RUNTIME_WORKER_H_
