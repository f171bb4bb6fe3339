// Trace comparison is bitwise and names the first difference: iteration, rank, record,
// parameter and, for dumped tensors, the element, both values and their ULP distance.

#include "harness/trace_compare.h"

#include <gtest/gtest.h>

#include <cmath>

#include "numerics/float_bits.h"
#include "tests/support/trace_builder.h"
#include "trace/digest.h"

namespace bitparity {
namespace {

TensorDump& Dump(Trace& t, int64_t rank, int64_t iteration, const std::string& name) {
  for (TensorDump& d : t.ranks[rank].grad_dumps.at(iteration)) {
    if (d.name == name) return d;
  }
  throw std::runtime_error("no dump " + name);
}

TEST(TraceCompare, IdenticalTracesCompareEqual) {
  Trace a = testing::MakeTrace(2, 3);
  Trace b = testing::MakeTrace(2, 3);
  TraceComparison c = CompareTraces(a, b);
  EXPECT_TRUE(c.identical);
  EXPECT_FALSE(c.first.has_value());
  EXPECT_GT(c.compared_records, 0);
}

TEST(TraceCompare, OneUlpInOneDumpedElementIsLocalized) {
  Trace a = testing::MakeTrace(2, 3);
  Trace b = testing::MakeTrace(2, 3);
  float& v = Dump(b, 1, 2, "w").values[7];
  v = std::nextafter(v, INFINITY);
  TraceComparison c = CompareTraces(a, b);
  ASSERT_FALSE(c.identical);
  const Difference& d = *c.first;
  EXPECT_EQ(d.iteration, 2);
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.param, "w");
  EXPECT_EQ(d.record, "grad_dump");  // digest unchanged: only the stored tensor was edited
  ASSERT_TRUE(d.tensor.has_value());
  EXPECT_EQ(d.tensor->first_index, 7);
  EXPECT_EQ(d.tensor->first_position, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(d.tensor->first_ulps, 1u);
  EXPECT_EQ(d.tensor->differing, 1);
  ASSERT_EQ(d.tensor->ulp_histogram.size(), 1u);
  EXPECT_EQ(d.tensor->ulp_histogram[0].first, "1");
  EXPECT_EQ(c.differing_records, 1);
  EXPECT_NE(d.Describe().find("iteration 2, rank 1"), std::string::npos) << d.Describe();
  EXPECT_NE(d.Describe().find("element 7 [1, 3]"), std::string::npos) << d.Describe();
}

TEST(TraceCompare, DigestDifferenceWithDumpNamesTheElement) {
  Trace a = testing::MakeTrace(1, 3);
  Trace b = testing::MakeTrace(1, 3);
  TensorDump& dump = Dump(b, 0, 2, "b");
  dump.values[2] = std::nextafter(std::nextafter(dump.values[2], -INFINITY), -INFINITY);
  dump.values[3] = -dump.values[3];
  b.ranks[0].iterations[1].grad_digests[1] =
      Digest(dump.values.data(), dump.values.size() * sizeof(float));
  TraceComparison c = CompareTraces(a, b);
  ASSERT_FALSE(c.identical);
  EXPECT_EQ(c.first->record, "grad_digest");
  EXPECT_EQ(c.first->param, "b");
  ASSERT_TRUE(c.first->tensor.has_value());
  EXPECT_EQ(c.first->tensor->first_index, 2);
  EXPECT_EQ(c.first->tensor->first_ulps, 2u);
  EXPECT_EQ(c.first->tensor->differing, 2);
  EXPECT_GT(c.first->tensor->max_ulps, 1000000u);  // a sign flip is far in ULP space
}

TEST(TraceCompare, UndumpedDigestDifferenceNamesTheParameter) {
  Trace a = testing::MakeTrace(2, 3);
  Trace b = testing::MakeTrace(2, 3);
  b.ranks[0].iterations[2].grad_digests[0] ^= 1;
  TraceComparison c = CompareTraces(a, b);
  ASSERT_FALSE(c.identical);
  EXPECT_EQ(c.first->iteration, 3);
  EXPECT_EQ(c.first->rank, 0);
  EXPECT_EQ(c.first->param, "w");
  EXPECT_FALSE(c.first->tensor.has_value());
  EXPECT_NE(c.first->Describe().find("not dumped"), std::string::npos);
}

TEST(TraceCompare, EarliestIterationWinsOverLaterRanks) {
  Trace a = testing::MakeTrace(2, 3);
  Trace b = testing::MakeTrace(2, 3);
  b.ranks[0].iterations[2].loss = std::nextafter(b.ranks[0].iterations[2].loss, 0.0f);
  b.ranks[1].iterations[1].param_digests[1] ^= 4;
  TraceComparison c = CompareTraces(a, b);
  EXPECT_EQ(c.first->iteration, 2);
  EXPECT_EQ(c.first->rank, 1);
  EXPECT_EQ(c.first->record, "param_digest");
  EXPECT_EQ(c.differing_records, 2);
}

TEST(TraceCompare, OneUlpInALossIsADifference) {
  Trace a = testing::MakeTrace(1, 2);
  Trace b = testing::MakeTrace(1, 2);
  b.ranks[0].iterations[0].lm_loss = std::nextafter(b.ranks[0].iterations[0].lm_loss, 100.0f);
  TraceComparison c = CompareTraces(a, b);
  ASSERT_FALSE(c.identical);
  EXPECT_EQ(c.first->record, "lm_loss");
  EXPECT_NE(c.first->detail.find("(1 ulp)"), std::string::npos) << c.first->detail;
}

TEST(TraceCompare, MemoryAndTimeAreNotCompared) {
  Trace a = testing::MakeTrace(1, 2);
  Trace b = testing::MakeTrace(1, 2);
  b.ranks[0].iterations[0].peak_bytes += 4096;
  b.ranks[0].iterations[0].step_seconds *= 2;
  EXPECT_TRUE(CompareTraces(a, b).identical);
}

TEST(TraceCompare, StructuralDifferencesAreReported) {
  EXPECT_EQ(CompareTraces(testing::MakeTrace(1, 2), testing::MakeTrace(2, 2)).first->record,
            "structure");
  EXPECT_EQ(CompareTraces(testing::MakeTrace(1, 2), testing::MakeTrace(1, 3)).first->record,
            "structure");
  Trace renamed = testing::MakeTrace(1, 2);
  renamed.ranks[0].param_names[1] = "bias";
  TraceComparison c = CompareTraces(testing::MakeTrace(1, 2), renamed);
  EXPECT_EQ(c.first->record, "structure");
  EXPECT_NE(c.first->detail.find("parameter b"), std::string::npos) << c.first->detail;
}

TEST(TraceCompare, UlpHistogramBuckets) {
  TensorDump a{"t", {6}, {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}};
  TensorDump b = a;
  const uint32_t one = FloatBits(1.0f);
  b.values[0] = FloatFromBits(one + 1);
  b.values[1] = FloatFromBits(one + 2);
  b.values[2] = FloatFromBits(one + 3);
  b.values[3] = FloatFromBits(one + 8);
  b.values[4] = FloatFromBits(one + 9);
  TensorComparison c = CompareTensors(a, b);
  EXPECT_EQ(c.differing, 5);
  std::vector<std::pair<std::string, int64_t>> expected = {
      {"1", 1}, {"2", 1}, {"3-4", 1}, {"5-8", 1}, {"9-16", 1}};
  EXPECT_EQ(c.ulp_histogram, expected);
  EXPECT_EQ(c.max_ulps, 9u);
}

TEST(FloatBits, UlpDistanceCountsRepresentableFloats) {
  EXPECT_EQ(UlpDistance(1.0f, 1.0f), 0u);
  EXPECT_EQ(UlpDistance(0.0f, -0.0f), 0u);
  EXPECT_EQ(UlpDistance(1.0f, std::nextafter(1.0f, 2.0f)), 1u);
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(UlpDistance(-tiny, tiny), 2u);
}

}  // namespace
}  // namespace bitparity
