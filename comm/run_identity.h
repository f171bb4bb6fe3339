#ifndef BITPARITY_COMM_RUN_IDENTITY_H_
#define BITPARITY_COMM_RUN_IDENTITY_H_

// One value every rank of a process group shares and no other run has (the trace attribute
// run_identity; `bitparity merge` joins only parts that carry the same one): rank 0 draws its
// process mark (core/temporary_mark.h) and 64 random bits and sets them in the group's store;
// every rank reads them from there. Under torchrun the agent's store outlives a restart, so the
// key names the elastic run and its restart count.

#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm/rank_context.h"

namespace bitparity {

std::string ShareRunIdentity(c10d::Store& store, const RankContext& context);

}  // namespace bitparity

#endif  // BITPARITY_COMM_RUN_IDENTITY_H_
