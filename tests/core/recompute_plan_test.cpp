// The segmentation rules of full activation recompute, shared by both arms.

#include "config/recompute_plan.h"

#include <gtest/gtest.h>

#include "core/errors.h"

namespace bitparity {
namespace {

struct Case {
  std::string name;
  bool full;
  RecomputeMethod method;
  int64_t num_layers;
  int64_t layers;
  int64_t mtp;
  std::string segments;  // expected, or "raises"
  bool warns;
};

std::string Format(const RecomputePlan& plan, int64_t layers) {
  std::string out;
  for (const LayerSegment& s : plan.segments) {
    out += s.mtp ? "[mtp" + std::to_string(s.first_layer - layers) + "]"
                 : "[" + std::to_string(s.first_layer) + "-" + std::to_string(s.last_layer()) + "]";
  }
  return out.empty() ? "none" : out;
}

class RecomputePlanTest : public ::testing::TestWithParam<Case> {};

TEST_P(RecomputePlanTest, Segments) {
  const Case& c = GetParam();
  RecomputeConfig config;
  config.granularity = c.full ? RecomputeGranularity::kFull : RecomputeGranularity::kNone;
  config.method = c.method;
  config.method_set = c.name != "full_without_method";
  config.num_layers = c.num_layers;
  if (c.segments == "raises") {
    EXPECT_THROW(BuildRecomputePlan(config, c.layers, c.mtp), InputError);
    return;
  }
  RecomputePlan plan = BuildRecomputePlan(config, c.layers, c.mtp);
  EXPECT_EQ(Format(plan, c.layers), c.segments);
  EXPECT_EQ(!plan.warnings.empty(), c.warns);
  // Every layer is in at most one segment and segment_of_layer agrees with the list.
  ASSERT_EQ(plan.segment_of_layer.size(), static_cast<size_t>(c.layers + c.mtp));
  for (size_t s = 0; s < plan.segments.size(); ++s) {
    for (int64_t l = plan.segments[s].first_layer; l <= plan.segments[s].last_layer(); ++l) {
      EXPECT_EQ(plan.segment_of_layer[l], static_cast<int64_t>(s));
    }
  }
}

const auto kUniform = RecomputeMethod::kUniform;
const auto kBlock = RecomputeMethod::kBlock;

INSTANTIATE_TEST_SUITE_P(
    Rules, RecomputePlanTest,
    ::testing::Values(
        Case{"none", false, kUniform, 1, 3, 1, "none", false},
        Case{"uniform1", true, kUniform, 1, 3, 0, "[0-0][1-1][2-2]", false},
        Case{"uniform2_ragged_tail", true, kUniform, 2, 3, 0, "[0-1][2-2]", false},
        Case{"uniform3_exact", true, kUniform, 3, 3, 0, "[0-2]", false},
        Case{"uniform_larger_than_layers", true, kUniform, 5, 3, 0, "[0-2]", false},
        Case{"uniform4_of_10", true, kUniform, 4, 10, 0, "[0-3][4-7][8-9]", false},
        Case{"uniform1_mtp", true, kUniform, 1, 3, 1, "[0-0][1-1][2-2][mtp0]", false},
        Case{"uniform1_two_mtp_depths", true, kUniform, 1, 1, 2, "[0-0][mtp0][mtp1]", false},
        Case{"uniform2_mtp_raises", true, kUniform, 2, 3, 1, "raises", false},
        Case{"block1", true, kBlock, 1, 3, 0, "[0-0]", false},
        Case{"block3", true, kBlock, 3, 3, 0, "[0-0][1-1][2-2]", false},
        Case{"block_larger_than_layers", true, kBlock, 5, 3, 0, "[0-0][1-1][2-2]", false},
        Case{"block1_mtp_warns", true, kBlock, 1, 3, 1, "[0-0]", true},
        Case{"block3_mtp_warns", true, kBlock, 3, 3, 1, "[0-0][1-1][2-2]", true},
        Case{"block2_of_4", true, kBlock, 2, 4, 0, "[0-0][1-1]", false},
        Case{"full_without_method", true, kUniform, 1, 3, 0, "raises", false},
        Case{"full_without_num_layers", true, kBlock, 0, 3, 0, "raises", false}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace bitparity
