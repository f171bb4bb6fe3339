// A rank's place in the world from the launcher's environment: torchrun's variables (and its
// agent-served store), Slurm's, the single-rank default, and malformed values named.

#include "comm/rank_context.h"

#include <gtest/gtest.h>

#include "core/errors.h"

namespace bitparity {
namespace {

TEST(RankContext, TorchrunVariablesAndTheAgentStore) {
  RankContext c = RankContextFromEnvironment({{"RANK", "1"},
                                              {"WORLD_SIZE", "2"},
                                              {"LOCAL_RANK", "1"},
                                              {"MASTER_ADDR", "10.0.0.7"},
                                              {"MASTER_PORT", "29500"},
                                              {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_EQ(c.source, "torchrun");
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.master_addr, "10.0.0.7");
  EXPECT_EQ(c.master_port, 29500);
  EXPECT_TRUE(c.agent_store);
  EXPECT_FALSE(
      RankContextFromEnvironment({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}})
          .agent_store);
}

TEST(RankContext, SlurmVariables) {
  RankContext c = RankContextFromEnvironment({{"SLURM_PROCID", "3"},
                                              {"SLURM_NTASKS", "4"},
                                              {"SLURM_LOCALID", "1"},
                                              {"MASTER_PORT", "29500"}});
  EXPECT_EQ(c.source, "slurm");
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.world_size, 4);
  EXPECT_EQ(c.local_rank, 1);
}

TEST(RankContext, MalformedValuesAreBadInputNamingTheVariable) {
  try {
    RankContextFromEnvironment({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}});
    ADD_FAILURE() << "RANK outside the world was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("RANK must be in [0, 1], got 2"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(RankContextFromEnvironment({{"RANK", "0"}, {"WORLD_SIZE", "2"}}), InputError);
  EXPECT_THROW(RankContextFromEnvironment({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), InputError);
  EXPECT_EQ(RankContextFromEnvironment({}).world_size, 1);
}

}  // namespace
}  // namespace bitparity
