// Every test binary that runs LibTorch pins the same determinism switches as a rank process.

#include <gtest/gtest.h>

#include "numerics/determinism.h"

namespace {

class DeterminismEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { bitparity::ConfigureDeterminism(1); }
};

const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new DeterminismEnvironment);

}  // namespace
