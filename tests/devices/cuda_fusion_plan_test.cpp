// The CUDA device's launch plan (devices/cuda/fusion_plan.h), plain C++: on the mini Gemma-3,
// which nodes run as one fused launch, and that with fusion off every node is its own step.
#include "devices/cuda/fusion_plan.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "models/gemma3.h"

namespace gearbox::internal {
namespace {

ir::Network mini_network() {
  models::RandomWeights random(7);
  Result<models::BuiltModel> model = models::build_gemma3(models::gemma3_mini_config(), random);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return model.ok() ? std::move(model->network) : ir::Network{};
}

std::string describe(const Step& step) {
  std::string s = std::to_string(static_cast<int>(step.kind)) + ":";
  for (size_t n : step.nodes) s += " " + std::to_string(n);
  if (step.feeds_linear) s += " feeds_linear";
  if (step.feeds_attention) s += " feeds_attention";
  return s;
}

TEST(CudaFusionPlan, MiniGemma3FusesNormsRopeResidualsAndGatedMlps) {
  const ir::Network net = mini_network();
  ASSERT_EQ(net.nodes.size(), 52u);  // embedding, 3 layers of 16 nodes, take_last, final norm, logits
  const std::vector<Step> steps = plan_steps(net, /*fuse=*/true);

  struct Expected {
    Step::Kind kind;
    std::vector<size_t> nodes;
    bool feeds_linear = false;
    bool feeds_attention = false;
  };
  std::vector<Expected> expected = {{Step::kSingle, {0}}};  // embedding
  for (size_t layer = 0; layer < 3; ++layer) {
    // Layer nodes from base: input norm, qkv, q / k norms, q / k ropes, attention, o_proj,
    // post-attention norm, add, pre-FFN norm, gate_up, gelu_mul, down, post-FFN norm, add.
    const size_t base = 1 + 16 * layer;
    // The first layer's input norm is a step of its own; the others' close the residual step
    // before them.
    if (layer == 0) expected.push_back({Step::kSingle, {base}});
    expected.push_back({Step::kSingle, {base + 1}});
    expected.push_back({Step::kHeadNormRope, {base + 2, base + 3, base + 4, base + 5}, false, true});
    expected.push_back({Step::kSingle, {base + 6}});
    expected.push_back({Step::kSingle, {base + 7}});
    expected.push_back({Step::kNormAddNorm, {base + 8, base + 9, base + 10}, true});
    expected.push_back({Step::kGatedLinear, {base + 11, base + 12, base + 13}});
    if (layer < 2) {
      expected.push_back({Step::kNormAddNorm, {base + 14, base + 15, base + 16}, true});
    } else {
      expected.push_back({Step::kNormAddNorm, {base + 14, base + 15}});  // take_last follows
    }
  }
  expected.push_back({Step::kSingle, {49}});  // take_last
  expected.push_back({Step::kSingle, {50}});  // final norm
  expected.push_back({Step::kSingle, {51}});  // logits

  ASSERT_EQ(steps.size(), expected.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const Expected& e = expected[i];
    EXPECT_EQ(steps[i].kind, e.kind) << "step " << i << ": " << describe(steps[i]);
    EXPECT_EQ(steps[i].nodes, e.nodes) << "step " << i << ": " << describe(steps[i]);
    EXPECT_EQ(steps[i].feeds_linear, e.feeds_linear) << "step " << i << ": " << describe(steps[i]);
    EXPECT_EQ(steps[i].feeds_attention, e.feeds_attention) << "step " << i << ": " << describe(steps[i]);
    // Only a q / k / v projection before a head norm step may leave its output stacked.
    if (steps[i].stacked_into_head_norm) {
      ASSERT_LT(i + 1, steps.size());
      EXPECT_EQ(net.nodes[steps[i].nodes[0]].outputs.size(), 3u);
      EXPECT_EQ(steps[i + 1].kind, Step::kHeadNormRope);
    }
  }
  EXPECT_EQ(step_starting_at(steps, 12), &steps[7]);  // the first gated MLP
  EXPECT_EQ(step_starting_at(steps, 13), nullptr);    // inside it
}

TEST(CudaFusionPlan, WithoutFusionEveryNodeIsItsOwnStep) {
  const ir::Network net = mini_network();
  const std::vector<Step> steps = plan_steps(net, /*fuse=*/false);
  ASSERT_EQ(steps.size(), net.nodes.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].kind, Step::kSingle) << i;
    EXPECT_EQ(steps[i].nodes, std::vector<size_t>{i}) << i;
    EXPECT_FALSE(steps[i].feeds_linear) << i;
    EXPECT_FALSE(steps[i].feeds_attention) << i;
    EXPECT_FALSE(steps[i].stacked_into_head_norm) << i;
  }
}

}  // namespace
}  // namespace gearbox::internal
