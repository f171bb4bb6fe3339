#ifndef BITPARITY_RUNTIME_WORKER_H_
#define BITPARITY_RUNTIME_WORKER_H_

// The rank process: `bitparity worker --recipe R --arm A --out-dir D`. Reads its place in the
// world from the environment (torchrun or Slurm variables), joins the process group, trains
// the arm for the recipe's iterations and writes D/rank_<r>.h5. The local launcher starts
// these itself; on a cluster srun or torchrun can start them directly.

namespace bitparity {

// Returns the process exit code: 0 done, 1 failed, 2 bad input, 3 infrastructure fault.
int WorkerMain(int argc, char** argv);

}  // namespace bitparity

#endif  // BITPARITY_RUNTIME_WORKER_H_
