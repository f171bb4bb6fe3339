#ifndef BITPARITY_HARNESS_THROUGHPUT_H_
#define BITPARITY_HARNESS_THROUGHPUT_H_

// A run's throughput from its trace, and where its all-to-all time goes.
//
// Throughput: the counted GEMM FLOPs (numerics/flop_count.h) per rank over its
// step time, and MFU against the GEMM ceiling the ranks measured (numerics/gemm_throughput.h): the
// best of their measurements, so that one denominator serves every rank and every arm. Model
// FLOPs are a training step's forward and backward GEMMs; recompute replays are counted apart
// (work the recompute chooses to redo: in the hardware rate, not in MFU), as is customary.

#include <cstdint>
#include <string>
#include <vector>

#include "trace/trace.h"

namespace bitparity {

// One rank over every iteration but the first (a warm-up, when there are more).
struct RankThroughput {
  int64_t rank = 0;
  int64_t iterations = 0;
  double seconds = 0;                            // their step time, summed
  double model_flops = 0;                        // forward + backward GEMM FLOPs, summed
  double replay_flops = 0;                       // recompute replay GEMM FLOPs, summed
  double measured_ceiling_flops_per_second = 0;  // the rank's own figure; 0 when it has none
  double ceiling_flops_per_second = 0;           // the one MFU is against (ShareBestCeiling)

  double model_flops_per_second() const { return seconds > 0 ? model_flops / seconds : 0; }
  // Model and replay FLOPs per second: what the hardware did.
  double hardware_flops_per_second() const {
    return seconds > 0 ? (model_flops + replay_flops) / seconds : 0;
  }
  double mfu() const;  // model FLOP/s over the ceiling; 0 without a ceiling
};

struct Throughput {
  std::vector<RankThroughput> ranks;
  // Per iteration, summed over ranks and averaged over the measured iterations.
  double forward_flops = 0;
  double replay_flops = 0;
  double backward_flops = 0;
  double attention_flops = 0;
  double dense_flops = 0;
  double expert_flops = 0;
  double head_flops = 0;
  double other_flops = 0;

  // Mean over ranks of their model FLOP/s; 0 when no rank counted any.
  double model_flops_per_second_per_rank() const;
  double hardware_flops_per_second_per_rank() const;
  // Every rank's model FLOP/s over every rank's ceiling; 0 without ceilings.
  double mfu() const;
};

// Every rank's figures; the ceiling is the best its ranks measured.
Throughput ThroughputOf(const Trace& trace);

// Sets every rank's ceiling to the best any rank of `throughputs` measured (the runs of one
// invocation, on one kind of device). A rank measures while other processes start or run on
// shared cores, and a figure can come out well below what the machine does; a maximum is robust
// to that, and one denominator makes the arms' MFU compare as their throughput does. A rank
// without a measured ceiling keeps none.
void ShareBestCeiling(const std::vector<Throughput*>& throughputs);

// Where the all-to-all time of every rank's last iteration goes, from the schedule timeline the
// overlap arm records: per node and phase, how many all-to-alls, how long they were in flight
// and how long the schedule waited for them; the blocking exchanges of per-expert token counts
// (the trace's comm_count_exchange_seconds); and the rest of the iteration's exposed time
// (staging and posting each all-to-all). Empty for an arm without a schedule timeline.
struct AllToAllShare {
  std::string node;   // moe_dispatch, moe_combine
  std::string phase;  // forward, backward, replay
  int64_t count = 0;
  double in_flight_seconds = 0;
  double waited_seconds = 0;
};
struct AllToAllBreakdown {
  std::vector<AllToAllShare> shares;  // by node, then phase
  double exposed_seconds = 0;         // the iterations' comm_exposed_seconds, over ranks
  double waited_seconds = 0;          // the shares' waits
  double count_exchange_seconds = 0;  // the blocking token-count exchanges, over ranks
  // Exposed time outside the waits and the count exchanges: staging and posting.
  double other_exposed_seconds() const {
    const double known = waited_seconds + count_exchange_seconds;
    return exposed_seconds > known ? exposed_seconds - known : 0;
  }
};
AllToAllBreakdown AllToAllBreakdownOf(const Trace& trace);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_THROUGHPUT_H_
