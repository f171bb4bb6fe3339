#ifndef BITPARITY_COMM_RANK_CONTEXT_H_
#define BITPARITY_COMM_RANK_CONTEXT_H_

// Who this process is in the job: read from the torchrun-style environment (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or from Slurm (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID), so the same binary runs under the local launcher, torchrun or srun.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "schedule/pipeline_layout.h"

namespace bitparity {

struct RankContext {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string source = "default";  // "torchrun", "slurm" or "default" (a single rank)
  // torchrun's agent already serves the c10d store at MASTER_ADDR:MASTER_PORT and says so with
  // TORCHELASTIC_USE_AGENT_STORE=True: then every rank, rank 0 included, joins it as a client.
  bool agent_store = false;
};

// Parses `env` (normally the process environment). Throws InputError for malformed or
// inconsistent values, naming the variable.
RankContext RankContextFromEnvironment(const std::map<std::string, std::string>& env);
RankContext RankContextFromEnvironment();

// How the ranks of the world map onto parallel groups: `pp` pipeline stages, each an EP group of
// `ep` ranks; rank = pp_rank x ep + ep_rank (the EP rank varies fastest, so one stage's ranks are
// neighbours). The ranks with one EP rank form a pipeline; its stages see the same data, and the
// non-expert parameters of a stage are replicated (data parallel) over its EP group.
struct ParallelLayout {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t ep_size = 1;
  int64_t ep_rank = 0;
  int64_t pp_size = 1;
  int64_t pp_rank = 0;
  int64_t dp_size = 1;  // data-parallel size of the non-expert parameters (the EP group)
  int64_t dp_rank = 0;
  int64_t experts = 1;
  int64_t experts_per_rank = 1;
  // The stages of the pipeline in virtual order; empty: one stage holding the whole model.
  PipelineLayout pipeline;

  static ParallelLayout Make(int64_t rank, int64_t world_size, int64_t ep_size, int64_t experts,
                             int64_t pp_size = 1);
  int64_t first_local_expert() const { return ep_rank * experts_per_rank; }
  int64_t ExpertOwner(int64_t expert) const { return expert / experts_per_rank; }
  // The world ranks of this rank's EP group (its stage) and of its pipeline, in group order.
  std::vector<int64_t> EpGroup() const;
  std::vector<int64_t> PipelineGroup() const;
};

}  // namespace bitparity

#endif  // BITPARITY_COMM_RANK_CONTEXT_H_
