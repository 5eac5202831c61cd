// ir::linear_weights_stacked: a multi-output linear whose weights lie one after another in
// the payload (what lets a device run it as one GEMM over a [sum N_i, K] matrix). The
// Gemma-3 builder lays out every layer's q/k/v and gate/up that way; any gap, reordering or
// type change between two of them, or a single output, is not stacked.
#include <gtest/gtest.h>

#include "ir/shape_inference.h"
#include "models/gemma3.h"

namespace gearbox::ir {
namespace {

Network mini_network(DataType dtype) {
  models::Gemma3Config config = models::gemma3_mini_config();
  config.dtype = dtype;
  models::RandomWeights weights(1);
  Result<models::BuiltModel> model = models::build_gemma3(config, weights);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return model->network;
}

TEST(LinearWeights, EachGemmaLayersQkvAndGateUpAreStacked) {
  for (DataType dtype : {DataType::kF32, DataType::kBF16}) {
    const Network net = mini_network(dtype);
    int stacked = 0, multi = 0;
    for (const Node& node : net.nodes) {
      if (node.kind != OpKind::kLinear) {
        EXPECT_FALSE(linear_weights_stacked(net, node)) << node.name;
        continue;
      }
      multi += node.outputs.size() > 1 ? 1 : 0;
      stacked += linear_weights_stacked(net, node) ? 1 : 0;
      if (node.outputs.size() == 1) {
        EXPECT_FALSE(linear_weights_stacked(net, node)) << node.name << ": one output";
      }
    }
    EXPECT_EQ(stacked, 2 * models::gemma3_mini_config().layers);
    EXPECT_EQ(stacked, multi);
  }
}

TEST(LinearWeights, AGapAnOrderOrATypeChangeIsNotStacked) {
  const Network base = mini_network(DataType::kBF16);
  size_t qkv = base.nodes.size();
  for (size_t n = 0; n < base.nodes.size(); ++n) {
    if (base.nodes[n].kind == OpKind::kLinear && base.nodes[n].outputs.size() == 3) qkv = n;
  }
  ASSERT_LT(qkv, base.nodes.size());
  ASSERT_TRUE(linear_weights_stacked(base, base.nodes[qkv]));
  const auto weight = [&](Network& net, size_t i) -> WeightInfo& {
    return net.weights[static_cast<size_t>(net.nodes[qkv].weights[i])];
  };
  {
    Network net = base;
    weight(net, 2).offset += 64;  // a gap before v
    EXPECT_FALSE(linear_weights_stacked(net, net.nodes[qkv]));
  }
  {
    Network net = base;
    std::swap(net.nodes[qkv].weights[1], net.nodes[qkv].weights[2]);  // k and v listed in the other order
    EXPECT_FALSE(linear_weights_stacked(net, net.nodes[qkv]));
  }
  {
    Network net = base;
    weight(net, 1).dtype = DataType::kF16;
    EXPECT_FALSE(linear_weights_stacked(net, net.nodes[qkv]));
  }
}

}  // namespace
}  // namespace gearbox::ir
