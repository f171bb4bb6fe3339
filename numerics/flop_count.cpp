#include "numerics/flop_count.h"

#include "core/enum_names.h"

namespace bitparity {

namespace {

constexpr EnumName<GemmCategory> kGemmCategoryNames[] = {{GemmCategory::kAttention, "attention"},
                                                         {GemmCategory::kDense, "dense"},
                                                         {GemmCategory::kExpert, "expert"},
                                                         {GemmCategory::kHead, "head"},
                                                         {GemmCategory::kOther, "other"}};
constexpr EnumName<FlopPass> kFlopPassNames[] = {{FlopPass::kForward, "forward"},
                                                 {FlopPass::kReplay, "replay"},
                                                 {FlopPass::kBackward, "backward"}};

thread_local FlopCounter* current_counter = nullptr;
thread_local GemmCategory current_category = GemmCategory::kOther;
thread_local bool replaying = false;

}  // namespace

const char* ToString(GemmCategory category) { return NameIn(kGemmCategoryNames, category); }
const char* ToString(FlopPass pass) { return NameIn(kFlopPassNames, pass); }

int64_t FlopCount::of(FlopPass pass) const {
  int64_t sum = 0;
  for (int64_t v : flops[static_cast<size_t>(pass)]) sum += v;
  return sum;
}

int64_t FlopCount::of(GemmCategory category) const {
  int64_t sum = 0;
  for (const auto& pass : flops) sum += pass[static_cast<size_t>(category)];
  return sum;
}

int64_t FlopCount::total() const {
  int64_t sum = 0;
  for (const auto& pass : flops) {
    for (int64_t v : pass) sum += v;
  }
  return sum;
}

FlopCount& FlopCount::operator+=(const FlopCount& other) {
  for (size_t p = 0; p < kFlopPasses; ++p) {
    for (size_t c = 0; c < kGemmCategories; ++c) flops[p][c] += other.flops[p][c];
  }
  return *this;
}

FlopCounter::FlopCounter() : previous_(current_counter) { current_counter = this; }
FlopCounter::~FlopCounter() { current_counter = previous_; }

FlopCount FlopCounter::Take() {
  FlopCount out = count_;
  count_ = FlopCount();
  return out;
}

FlopCounter* FlopCounter::current() { return current_counter; }

void FlopCounter::CountGemm(int64_t batch, int64_t m, int64_t n, int64_t k, int backward_products) {
  FlopCounter* counter = current_counter;
  if (counter == nullptr) return;
  const int64_t flops = 2 * batch * m * n * k;
  const auto category = static_cast<size_t>(current_category);
  const FlopPass pass = replaying ? FlopPass::kReplay : FlopPass::kForward;
  counter->count_.flops[static_cast<size_t>(pass)][category] += flops;
  counter->count_.flops[static_cast<size_t>(FlopPass::kBackward)][category] +=
      flops * backward_products;
}

FlopCounterScope::FlopCounterScope(FlopCounter* counter) : previous_(current_counter) {
  current_counter = counter;
}
FlopCounterScope::~FlopCounterScope() { current_counter = previous_; }

GemmCategoryScope::GemmCategoryScope(GemmCategory category) : previous_(current_category) {
  current_category = category;
}
GemmCategoryScope::~GemmCategoryScope() { current_category = previous_; }

FlopReplayScope::FlopReplayScope() : previous_(replaying) { replaying = true; }
FlopReplayScope::~FlopReplayScope() { replaying = previous_; }

}  // namespace bitparity
