// The CUDA device's launch plan (devices/cuda/fusion_plan.h), plain C++: on the mini Gemma-3
// and a small Llama, which nodes run as one fused launch, and that with fusion off every node
// is its own step.
#include "devices/cuda/fusion_plan.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "../models/small_decoder.h"
#include "models/decoder.h"
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

// One step the plan should make.
struct ExpectedStep {
  Step::Kind kind;
  std::vector<size_t> nodes;
  bool feeds_linear = false;
  bool feeds_attention = false;
};

void expect_steps(const std::vector<Step>& steps, const std::vector<ExpectedStep>& expected) {
  ASSERT_EQ(steps.size(), expected.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const ExpectedStep& e = expected[i];
    EXPECT_EQ(steps[i].kind, e.kind) << "step " << i << ": " << describe(steps[i]);
    EXPECT_EQ(steps[i].nodes, e.nodes) << "step " << i << ": " << describe(steps[i]);
    EXPECT_EQ(steps[i].feeds_linear, e.feeds_linear) << "step " << i << ": " << describe(steps[i]);
    EXPECT_EQ(steps[i].feeds_attention, e.feeds_attention) << "step " << i << ": " << describe(steps[i]);
  }
}

TEST(CudaFusionPlan, MiniGemma3FusesNormsRopeResidualsAndGatedMlps) {
  const ir::Network net = mini_network();
  ASSERT_EQ(net.nodes.size(), 52u);  // embedding, 3 layers of 16 nodes, take_last, final norm, logits
  const std::vector<Step> steps = plan_steps(net, /*fuse=*/true);

  std::vector<ExpectedStep> expected = {{Step::kSingle, {0}}};  // embedding
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

  expect_steps(steps, expected);
  for (size_t i = 0; i < steps.size(); ++i) {
    // Only a q / k / v projection before a head norm step may leave its output stacked.
    if (steps[i].stacked_into_head_norm) {
      ASSERT_LT(i + 1, steps.size());
      EXPECT_EQ(net.nodes[steps[i].nodes[0]].outputs.size(), 3u);
      EXPECT_EQ(steps[i + 1].kind, Step::kHeadNormRope);
    }
  }
  const ResidualStepNodes parts = residual_step_nodes(net, steps[6]);  // the first residual step
  EXPECT_EQ(parts.first_norm, &net.nodes[9]);
  EXPECT_EQ(parts.add, &net.nodes[10]);
  EXPECT_EQ(parts.last_norm, &net.nodes[11]);
  EXPECT_EQ(step_starting_at(steps, 12), &steps[7]);  // the first gated MLP
  EXPECT_EQ(step_starting_at(steps, 13), nullptr);    // inside it
}

// A pre-norm family without q / k norms (Llama; Qwen2 and Mistral build the same nodes):
// the two ropes run as one launch, and each residual add with the pre-norm after it, fed to
// the linear that alone reads the norm.
TEST(CudaFusionPlan, LlamaFusesRopesAndResidualAddsWithTheirNorms) {
  models::RandomWeights random(7);
  Result<models::BuiltModel> model = models::build_decoder(testing::small_decoder("llama"), random);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const ir::Network& net = model->network;
  ASSERT_EQ(net.nodes.size(), 28u);  // embedding, 2 layers of 12 nodes, take_last, final norm, logits
  const std::vector<Step> steps = plan_steps(net, /*fuse=*/true);

  // Layer nodes from base: input norm, qkv, q / k ropes, attention, o_proj, add, pre-FFN
  // norm, gate_up, silu_mul, down, add.
  const std::vector<ExpectedStep> expected = {
      {Step::kSingle, {0}},                // embedding
      {Step::kSingle, {1}},                // the first layer's input norm
      {Step::kSingle, {2}},                // qkv
      {Step::kRopes, {3, 4}},              // q / k ropes
      {Step::kSingle, {5}},                // attention
      {Step::kSingle, {6}},                // o_proj
      {Step::kAddNorm, {7, 8}, true},      // add + pre-FFN norm, into gate / up
      {Step::kGatedLinear, {9, 10, 11}},   // gate / up, silu_mul, down
      {Step::kAddNorm, {12, 13}, true},    // add + the next layer's input norm, into qkv
      {Step::kSingle, {14}},               // qkv
      {Step::kRopes, {15, 16}},            //
      {Step::kSingle, {17}},               // attention
      {Step::kSingle, {18}},               // o_proj
      {Step::kAddNorm, {19, 20}, true},    //
      {Step::kGatedLinear, {21, 22, 23}},  //
      {Step::kSingle, {24}},               // the last add: take_last follows
      {Step::kSingle, {25}},               // take_last
      {Step::kSingle, {26}},               // final norm
      {Step::kSingle, {27}},               // logits
  };
  expect_steps(steps, expected);
  // The residual step's parts: no first norm, the add, then the norm.
  const ResidualStepNodes parts = residual_step_nodes(net, steps[6]);
  EXPECT_EQ(parts.first_norm, nullptr);
  EXPECT_EQ(parts.add, &net.nodes[7]);
  EXPECT_EQ(parts.last_norm, &net.nodes[8]);
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
