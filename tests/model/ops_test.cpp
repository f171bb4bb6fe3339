// The hand-written pieces of the model compute what their formulas say: the fused RMSNorm's
// forward and backward against a composite float64 reference, the aux-loss scaler's injected
// gradient, the router's padding mask, the deterministic dropout mask, and attention's positions
// and padded keys.

#include "model/ops.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/moe.h"
#include "tests/support/random_tensor.h"

namespace bitparity {
namespace {

at::Tensor Random(const std::vector<int64_t>& shape, uint64_t stream) {
  return testing::RandomNormal(shape, 5, stream);
}

TEST(RmsNorm, MatchesCompositeReferenceInForwardAndBackward) {
  at::Tensor x = Random({3, 5, 16}, 1).requires_grad_();
  at::Tensor w = (Random({16}, 2) * 0.1 + 1).requires_grad_();
  at::Tensor g = Random({3, 5, 16}, 3);
  at::Tensor y = ops::RmsNorm(x, w, 1e-6);
  torch::autograd::backward({y}, {g});

  at::Tensor xd = x.detach().to(at::kDouble).requires_grad_();
  at::Tensor wd = w.detach().to(at::kDouble).requires_grad_();
  at::Tensor yd = xd * at::rsqrt(xd.pow(2).mean(-1, true) + 1e-6) * wd;
  torch::autograd::backward({yd}, {g.to(at::kDouble)});

  EXPECT_TRUE(at::allclose(y.to(at::kDouble), yd, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(x.grad().to(at::kDouble), xd.grad(), 1e-4, 1e-5));
  EXPECT_TRUE(at::allclose(w.grad().to(at::kDouble), wd.grad(), 1e-4, 1e-5));
}

TEST(RmsNorm, IsOneAutogradNodeForItsInput) {
  // The funnel rule: the input reaches the norm through a single edge.
  at::Tensor x = Random({4, 8}, 4).requires_grad_();
  at::Tensor y = ops::RmsNorm(x * 2, Random({8}, 5).requires_grad_(), 1e-6);
  ASSERT_TRUE(y.grad_fn());
  int edges_to_input = 0;
  for (const auto& edge : y.grad_fn()->next_edges()) {
    if (edge.function && edge.function->name().find("Mul") != std::string::npos) ++edges_to_input;
  }
  EXPECT_EQ(edges_to_input, 1);
}

TEST(RmsNorm, Bf16InputGivesBf16OutputAndGradients) {
  at::Tensor x = Random({2, 8}, 6).to(at::kBFloat16).requires_grad_();
  at::Tensor w = at::ones({8}, at::kBFloat16).requires_grad_();
  at::Tensor y = ops::RmsNorm(x, w, 1e-6);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  y.sum().backward();
  EXPECT_EQ(x.grad().scalar_type(), at::kBFloat16);
  EXPECT_EQ(w.grad().scalar_type(), at::kBFloat16);
}

TEST(AuxLoss, ScalerInjectsTheGradScaleAsTheAuxLossGradient) {
  at::Tensor logits = Random({4, 3}, 7).requires_grad_();
  at::Tensor probs = at::softmax(logits, -1);
  at::Tensor aux = (probs * probs).sum();
  at::Tensor out = ops::AttachAuxLoss(probs, aux, 0.25);
  EXPECT_TRUE(at::equal(out, probs));
  out.sum().backward();
  at::Tensor via_scaler = logits.grad().clone();

  at::Tensor logits2 = logits.detach().clone().requires_grad_();
  at::Tensor probs2 = at::softmax(logits2, -1);
  (probs2.sum() + 0.25 * (probs2 * probs2).sum()).backward();
  EXPECT_TRUE(at::allclose(via_scaler, logits2.grad(), 1e-6, 1e-7));
}

// As Megatron's router with a padding mask: padding tokens are routed, but neither their scores
// nor their routed counts nor their number enter the load-balancing loss.
TEST(Router, PaddingTokensStayOutOfTheLoadBalancingLoss) {
  const at::Tensor weight = Random({4, 8}, 21);
  const at::Tensor tokens = Random({6, 8}, 22).requires_grad_();
  const at::Tensor padded = at::tensor({0, 1, 0, 0, 1, 0}, at::kInt).to(at::kBool);
  const RouterResult masked = Route(tokens, weight, 2, 0.01, 1.0, true, padded);
  // The loss of the other tokens alone.
  const at::Tensor valid_rows = at::tensor({0, 2, 3, 5}, at::kLong);
  const RouterResult valid =
      Route(tokens.detach().index_select(0, valid_rows), weight, 2, 0.01, 1.0, true);
  EXPECT_TRUE(at::allclose(masked.aux_loss, valid.aux_loss, 1e-6, 0)) << masked.aux_loss;
  // Padding tokens are still routed.
  EXPECT_EQ(masked.topk_experts.size(0), 6);
  // Their content changes nothing of the loss, and they get no gradient from it.
  at::Tensor other = tokens.detach().clone();
  other.index_put_({at::tensor({1, 4}, at::kLong)}, Random({2, 8}, 23));
  EXPECT_TRUE(
      at::equal(Route(other, weight, 2, 0.01, 1.0, true, padded).aux_loss, masked.aux_loss));
  masked.aux_loss.backward();
  EXPECT_TRUE(
      at::equal(tokens.grad().index_select(0, at::tensor({1, 4}, at::kLong)), at::zeros({2, 8})));
  EXPECT_GT(tokens.grad().abs().sum().item<float>(), 0.0f);
  // Without the mask they count.
  EXPECT_FALSE(at::allclose(Route(tokens.detach(), weight, 2, 0.01, 1.0, true).aux_loss,
                            masked.aux_loss, 1e-6, 0));
}

TEST(Dropout, MaskDependsOnlyOnTheKey) {
  at::Tensor x = at::ones({64, 64});
  at::Tensor a = ops::Dropout(x, 0.25, 42);
  at::Tensor b = ops::Dropout(x, 0.25, 42);
  at::Tensor c = ops::Dropout(x, 0.25, 43);
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_FALSE(at::equal(a, c));
  double kept = (a != 0).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(kept, 0.75, 0.05);
  EXPECT_TRUE(at::equal(ops::Dropout(x, 0.0, 1), x));
}

TEST(RollLeft, ShiftsAndFills) {
  at::Tensor t = at::arange(6, at::kLong).reshape({2, 3});
  at::Tensor r = ops::RollLeft(t, 1, 0);
  EXPECT_TRUE(at::equal(r, at::tensor({1, 2, 0, 4, 5, 0}, at::kLong).reshape({2, 3})));
}

// Attention over [2, 8, 16] with 2 heads in fp32, the weights fixed by their streams.
struct AttentionFixture {
  at::Tensor qkv = Random({48, 16}, 10) * 0.25;
  at::Tensor proj = Random({16, 16}, 11) * 0.25;
  ops::RopeTables rope = ops::MakeRopeTables(8, 8, 10000.0);
  PrecisionConfig precision;

  AttentionFixture() { precision.recipe = PrecisionRecipe::kFp32; }
  at::Tensor Run(const at::Tensor& x, const at::Tensor& positions = at::Tensor(),
                 const at::Tensor& padding = at::Tensor()) const {
    return ops::CausalSelfAttention(x, qkv, proj, 2, rope, precision, positions, padding);
  }
};

TEST(Attention, ExplicitPositionsGiveTheBitsOfTheTableRows) {
  const AttentionFixture f;
  const at::Tensor x = Random({2, 8, 16}, 12);
  const at::Tensor positions = at::arange(8, at::kLong).repeat({2, 1});
  EXPECT_TRUE(at::equal(f.Run(x), f.Run(x, positions)));
  // Other positions are other angles.
  EXPECT_FALSE(at::equal(f.Run(x), f.Run(x, ops::RollLeft(positions, 1, 0))));
}

TEST(Attention, PaddedKeysAreSkipped) {
  const AttentionFixture f;
  // Sample 0 has 5 tokens and 3 padded ones (at position 0), sample 1 all 8.
  at::Tensor padding = at::zeros({2, 8}, at::kBool);
  padding[0].narrow(0, 5, 3).fill_(true);
  const at::Tensor positions = at::arange(8, at::kLong).repeat({2, 1}).masked_fill(padding, 0);
  const at::Tensor x = Random({2, 8, 16}, 13);
  at::Tensor other = x.clone();
  other[0][5].copy_(Random({16}, 14));  // the first padded token changes
  const at::Tensor a = f.Run(x, positions, padding);
  const at::Tensor b = f.Run(other, positions, padding);
  EXPECT_TRUE(a.isfinite().all().item<bool>());
  // The real tokens come first (causality hides the padding from them), the later padded
  // tokens skip token 5 as a key, and the other sample is another row.
  EXPECT_TRUE(at::equal(a[0].narrow(0, 0, 5), b[0].narrow(0, 0, 5)));
  EXPECT_TRUE(at::equal(a[0].narrow(0, 6, 2), b[0].narrow(0, 6, 2)));
  EXPECT_TRUE(at::equal(a[1], b[1]));
  EXPECT_FALSE(at::equal(a[0][5], b[0][5]));  // its own query changed
  // Without the mask, the later tokens read token 5's key and value.
  EXPECT_FALSE(at::equal(f.Run(x, positions)[0].narrow(0, 6, 2),
                         f.Run(other, positions)[0].narrow(0, 6, 2)));
}

}  // namespace
}  // namespace bitparity
