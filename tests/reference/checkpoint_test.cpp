// The checkpoint primitive keeps no graph in forward and, in backward, replays its body and
// gives bitwise the gradients of running the body without checkpointing.

#include "reference/checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/memory.h"
#include "tests/support/random_tensor.h"

namespace bitparity {
namespace {

at::Tensor Random(const std::vector<int64_t>& shape, uint64_t stream) {
  return testing::RandomNormal(shape, 9, stream);
}

struct Net {
  at::Tensor w1 = Random({32, 32}, 1).requires_grad_();
  at::Tensor w2 = Random({32, 32}, 2).requires_grad_();
  at::Tensor Body(const at::Tensor& x, const at::Tensor& y) const {
    return at::tanh(at::linear(x, w1)) * y + at::gelu(at::linear(x, w2));
  }
};

TEST(Checkpoint, GradientsAreBitwiseThoseOfThePlainGraph) {
  Net net;
  at::Tensor x0 = Random({8, 32}, 3);
  at::Tensor y0 = Random({8, 32}, 4);

  at::Tensor x = x0.clone().requires_grad_(), y = y0.clone().requires_grad_();
  (net.Body(x * 1.5, y) * 3).sum().backward();
  at::Tensor gx = x.grad().clone(), gy = y.grad().clone();
  at::Tensor g1 = net.w1.grad().clone(), g2 = net.w2.grad().clone();
  net.w1.mutable_grad() = at::Tensor();
  net.w2.mutable_grad() = at::Tensor();

  at::Tensor xc = x0.clone().requires_grad_(), yc = y0.clone().requires_grad_();
  at::Tensor out = Checkpoint(
      [&net](const std::vector<at::Tensor>& in) { return net.Body(in[0], in[1]); }, {xc * 1.5, yc});
  (out * 3).sum().backward();
  EXPECT_TRUE(at::equal(xc.grad(), gx));
  EXPECT_TRUE(at::equal(yc.grad(), gy));
  EXPECT_TRUE(at::equal(net.w1.grad(), g1));
  EXPECT_TRUE(at::equal(net.w2.grad(), g2));
}

TEST(Checkpoint, BodyRunsWithoutGradInForwardAndWithGradInReplay) {
  std::vector<bool> grad_modes;
  at::Tensor x = Random({4, 4}, 5).requires_grad_();
  at::Tensor out = Checkpoint(
      [&](const std::vector<at::Tensor>& in) {
        grad_modes.push_back(torch::GradMode::is_enabled());
        return in[0] * 2;
      },
      {x});
  ASSERT_EQ(grad_modes, std::vector<bool>{false});
  out.sum().backward();
  EXPECT_EQ(grad_modes, (std::vector<bool>{false, true}));
  EXPECT_TRUE(at::equal(x.grad(), at::full({4, 4}, 2.0f)));
}

TEST(Checkpoint, RetainsOnlyItsInputAcrossForward) {
  MemoryTracker::Install();
  Net net;
  at::Tensor x = Random({256, 32}, 6).requires_grad_();
  at::Tensor input = x * 1.0;
  const int64_t before = MemoryTracker::current_bytes();
  at::Tensor plain = net.Body(net.Body(input, input), input);
  const int64_t plain_bytes = MemoryTracker::current_bytes() - before;
  plain = at::Tensor();
  const int64_t cleared = MemoryTracker::current_bytes();
  at::Tensor checkpointed = Checkpoint(
      [&net](const std::vector<at::Tensor>& in) { return net.Body(net.Body(in[0], in[0]), in[0]); },
      {input});
  const int64_t checkpoint_bytes = MemoryTracker::current_bytes() - cleared;
  // The output itself (256 x 32 floats) is all the checkpoint adds (its input is the caller's);
  // the plain graph keeps every intermediate activation.
  EXPECT_EQ(checkpoint_bytes, 256 * 32 * 4);
  EXPECT_GT(plain_bytes, 4 * checkpoint_bytes);
}

}  // namespace
}  // namespace bitparity
