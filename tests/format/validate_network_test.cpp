// validate_network rejects each rule's violation of the engine-file fixture's decoder with a
// message naming it, and accepts what the rules allow.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine_fixture.h"
#include "ir/network.h"
#include "ir/validate.h"

namespace gearbox::format {
namespace {

// ---- validate_network: each rule broken once ------------------------------------------------

struct Violation {
  const char* name;
  std::function<void(ir::Network&, uint64_t& payload_bytes)> apply;
  const char* expected;
};

ir::Node& node_named(ir::Network& n, const std::string& name) {
  for (ir::Node& node : n.nodes) {
    if (node.name == name) return node;
  }
  ADD_FAILURE() << "no node " << name;
  return n.nodes.front();
}

TEST(ValidateNetwork, EachRuleHasItsOwnMessage) {
  using N = ir::Network;
  using P = uint64_t;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const auto attn = [](N& n) -> ir::Node& { return node_named(n, "layers.0.attn"); };
  const auto rope = [](N& n) -> ir::Node& { return node_named(n, "layers.0.rope_q"); };
  const auto norm = [](N& n) -> ir::Node& { return node_named(n, "layers.0.attn_norm"); };
  const auto qkv = [](N& n) -> ir::Node& { return node_named(n, "layers.0.qkv"); };
  const auto o = [](N& n) -> ir::Node& { return node_named(n, "layers.0.o"); };
  const std::vector<Violation> cases = {
      // embedding
      {"embedding reads f32 ids", [](N& n, P&) { n.tensors[0].dtype = DataType::kF32; },
       "node 0 'embed' (embedding): ids must be i32 or i64, not f32"},
      {"embedding with two inputs", [](N& n, P&) { n.nodes[0].inputs.push_back(1); },
       "node 0 'embed' (embedding): needs 1 input (ids), has 2"},
      {"embedding without a table", [](N& n, P&) { n.nodes[0].weights.clear(); }, "needs 1 weight, has 0"},
      {"embedding table of rank 1", [](N& n, P&) { n.nodes[0].weights = {1}; },
       "weight 1 'layers.0.attn_norm.weight' (the table) has dims [8]; it must have rank 2"},
      {"embedding scale inf", [=](N& n, P&) { n.nodes[0].attrs.scale = inf; }, "(embedding): scale is not finite"},
      // rms_norm
      {"eps 0", [=](N& n, P&) { norm(n).attrs.eps = 0.0f; }, "(rms_norm): eps 0 must be positive and finite"},
      {"eps NaN", [=](N& n, P&) { norm(n).attrs.eps = nan; }, "eps nan must be positive"},
      {"eps inf", [=](N& n, P&) { norm(n).attrs.eps = inf; }, "eps inf must be positive"},
      {"negative head_dim", [=](N& n, P&) { norm(n).attrs.head_dim = -1; }, "head_dim -1 is negative"},
      {"per-head norm of the wrong width", [=](N& n, P&) { norm(n).attrs.head_dim = 4; },
       "head_dim is 4 but the weight has 8 elements"},
      {"norm weight of rank 2", [=](N& n, P&) { norm(n).weights = {2}; },
       "weight 2 'layers.0.q.weight' (the weight) has dims [8, 8]; it must have rank 1"},
      {"norm offset NaN", [=](N& n, P&) { norm(n).attrs.weight_offset = nan; }, "weight_offset is not finite"},
      // linear
      {"has_bias 2", [=](N& n, P&) { qkv(n).attrs.has_bias = 2; }, "has_bias 2 is not 0 or 1"},
      {"linear without outputs", [=](N& n, P&) { qkv(n).outputs.clear(); }, "needs at least 1 output"},
      {"linear with a missing weight", [=](N& n, P&) { qkv(n).weights.pop_back(); },
       "node 2 'layers.0.qkv' (linear): has 3 outputs and needs 3 weights (one matrix per output), has 2"},
      {"linear with different K", [=](N& n, P&) { qkv(n).weights[2] = 10; },
       "matrix weight 10 'layers.0.down.weight' has K = 12 but the first matrix has K = 8"},
      {"linear missing its bias", [=](N& n, P&) { o(n).weights.pop_back(); },
       "has 1 output and needs 2 weights (one matrix and one bias per output), has 1"},
      {"bias of rank 2", [=](N& n, P&) { o(n).weights[1] = 0; },
       "weight 0 'embed.weight' (bias) has dims [16, 8]; it must have rank 1"},
      {"bias shorter than the matrix", [](N& n, P&) { n.weights[6].dims = Dims{4}, n.weights[6].bytes = 16; },
       "bias weight 6 'layers.0.o.bias' has 4 elements but its matrix has 8 rows"},
      // rope
      {"rope without positions", [=](N& n, P&) { rope(n).inputs.pop_back(); },
       "(rope): needs 2 inputs (x, positions), has 1"},
      {"rope with f32 positions", [=](N& n, P&) { rope(n).inputs[1] = 2; }, "positions must be i32 or i64, not f32"},
      {"rope with two weights",
       [=](N& n, P&) {
         rope(n).weights = {0, 0};
       },
       "needs 1 weight, has 2"},
      {"rope with a table of the wrong shape", [=](N& n, P&) { rope(n).weights = {0}; },
       "the inverse frequencies weight 0 'embed.weight' are bf16 [16, 8]; they must be f32 [2] (head_dim / 2)"},
      {"rope heads 0", [=](N& n, P&) { rope(n).attrs.heads = 0; }, "heads 0 must be positive"},
      {"rope odd head_dim", [=](N& n, P&) { rope(n).attrs.head_dim = 3; }, "head_dim 3 must be positive and even"},
      {"rope theta NaN", [=](N& n, P&) { rope(n).attrs.theta = nan; }, "theta nan must be positive and finite"},
      {"rope theta 0", [=](N& n, P&) { rope(n).attrs.theta = 0.0f; }, "theta 0 must be positive"},
      // attention
      {"attention with 3 inputs", [=](N& n, P&) { attn(n).inputs.pop_back(); },
       "node 5 'layers.0.attn' (attention): needs 4 inputs (q, k, v, positions), has 3"},
      {"attention with i32 positions ok, f32 not", [=](N& n, P&) { attn(n).inputs[3] = 3; },
       "positions must be i32 or i64"},
      {"attention heads 0", [=](N& n, P&) { attn(n).attrs.heads = 0; }, "heads 0 and kv_heads 1 must be positive"},
      {"attention kv_heads 0", [=](N& n, P&) { attn(n).attrs.kv_heads = 0; }, "kv_heads 0 must be positive"},
      {"heads not a multiple of kv_heads",
       [=](N& n, P&) {
         attn(n).attrs.heads = 3;
         attn(n).attrs.kv_heads = 2;
       },
       "heads 3 is not a multiple of kv_heads 2"},
      {"attention head_dim 0", [=](N& n, P&) { attn(n).attrs.head_dim = 0; }, "head_dim 0 must be positive"},
      {"negative window", [=](N& n, P&) { attn(n).attrs.window = -1; }, "window -1 is negative"},
      {"attention scale NaN", [=](N& n, P&) { attn(n).attrs.scale = nan; }, "(attention): scale is not finite"},
      {"state slot past the end", [=](N& n, P&) { attn(n).attrs.state = 1; }, "state slot 1 is outside [0, 1)"},
      {"state slot -1", [=](N& n, P&) { attn(n).attrs.state = -1; }, "state slot -1 is outside"},
      {"state of the wrong width", [](N& n, P&) { n.states[0].width = 8; },
       "state 0 'layers.0.kv' has width 8 but kv_heads * head_dim is 4"},
      // elementwise and take_last
      {"add with one input", [](N& n, P&) { node_named(n, "layers.0.add1").inputs.pop_back(); },
       "(add): needs 2 inputs (a, b), has 1"},
      {"gelu with two outputs", [](N& n, P&) { node_named(n, "layers.0.act").outputs.push_back(0); },
       "(gelu_tanh_mul): output 1 writes tensor 0 'tokens', which is already produced"},
      {"take_last with a weight", [](N& n, P&) { node_named(n, "take_last").weights.push_back(0); },
       "(take_last): needs 0 weights, has 1"},
      {"take_last with two inputs", [](N& n, P&) { node_named(n, "take_last").inputs.push_back(0); },
       "(take_last): needs 1 input (x), has 2"},
      // ids and kinds
      {"op kind 0", [](N& n, P&) { n.nodes[3].kind = static_cast<OpKind>(0); },
       "node 3 'layers.0.rope_q' (op kind 0): unknown op kind 0"},
      {"op kind 99", [](N& n, P&) { n.nodes[3].kind = static_cast<OpKind>(99); }, "unknown op kind 99"},
      {"input id out of range", [](N& n, P&) { n.nodes[1].inputs[0] = 1000; },
       "node 1 'layers.0.attn_norm' (rms_norm): input 0: tensor id 1000 is outside [0, 21)"},
      {"negative input id", [](N& n, P&) { n.nodes[1].inputs[0] = -1; }, "tensor id -1 is outside"},
      {"output id out of range", [](N& n, P&) { n.nodes[1].outputs[0] = 21; }, "output 0: tensor id 21 is outside"},
      {"weight id out of range", [](N& n, P&) { n.nodes[1].weights[0] = 12; },
       "weight 0: weight id 12 is outside [0, 12)"},
      {"network output out of range", [](N& n, P&) { n.outputs = {-3}; }, "output 0: tensor id -3 is outside"},
      {"no outputs", [](N& n, P&) { n.outputs.clear(); }, "the network has no outputs"},
      // production order
      {"read before produced", [](N& n, P&) { std::swap(n.nodes[1], n.nodes[2]); },
       "node 1 'layers.0.qkv' (linear): input 0 reads tensor 3 'xn' before it is produced"},
      {"produced twice", [](N& n, P&) { n.nodes[1].outputs = {2}; }, "writes tensor 2 'x', which is already produced"},
      {"an input written by a node", [](N& n, P&) { n.nodes[0].outputs = {1}; },
       "writes tensor 1 'positions', which is already produced"},
      {"a tensor nobody produces",
       [](N& n, P&) {
         n.tensors.push_back({"orphan", DataType::kF32});
       },
       "tensor 21 'orphan' is never produced"},
      // input specs
      {"input id out of range", [](N& n, P&) { n.inputs[1].tensor = 99; }, "input 1: tensor id 99 is outside [0, 21)"},
      {"input listed twice", [](N& n, P&) { n.inputs[1].tensor = 0; },
       "input 1 (tensor 0 'tokens') is listed as an input twice"},
      {"input of rank 0", [](N& n, P&) { n.inputs[1].dims = Dims{}; }, "rank 0; an input has at least one dim"},
      {"input extent 0",
       [](N& n, P&) {
         n.inputs[0].dims = Dims{1, 0};
       },
       "neither -1 (dynamic) nor at least 1"},
      {"input extent -2",
       [](N& n, P&) {
         n.inputs[0].dims = Dims{-2, 1};
       },
       "neither -1 (dynamic) nor at least 1"},
      {"one dim name for two dims", [](N& n, P&) { n.inputs[0].dim_names = {"seq"}; },
       "1 dim names for rank 2 (give none or one per dim)"},
      // weights
      {"weight extent 0", [](N& n, P&) { n.weights[1].dims = Dims{0}; }, "have an extent below 1"},
      {"weight of rank 0", [](N& n, P&) { n.weights[1].dims = Dims{}; }, "rank 0; a weight has 1 to 8 dims"},
      {"weight bytes wrong", [](N& n, P&) { n.weights[1].bytes = 31; },
       "weight 1 'layers.0.attn_norm.weight': bytes is 31 but [8] of f32 is 32"},
      {"weight offset misaligned", [](N& n, P&) { n.weights[1].offset += 32; }, "offset 288 is not 64-byte aligned"},
      {"weight past the payload", [](N&, P& p) { p -= 64; }, "weight 11 'final_norm.weight': bytes ["},
      {"weight offset overflows", [](N& n, P&) { n.weights[1].offset = ~uint64_t{0} - 63; }, "lie outside the"},
      {"weight too large to address",
       [](N& n, P&) {
         n.weights[1].dims = Dims{1ll << 40, 1ll << 40};
       },
       "are too large to address"},
      {"weight with an invalid dtype", [](N& n, P&) { n.weights[1].dtype = static_cast<DataType>(9); },
       "invalid dtype 9"},
      // states
      {"state rows 0", [](N& n, P&) { n.states[0].rows = 0; }, "rows 0 and width 4 must both be at least 1"},
      {"state width 0", [](N& n, P&) { n.states[0].width = 0; }, "rows 32 and width 0 must both be at least 1"},
      {"state rows differ from max_context", [](N& n, P&) { n.states[0].rows = 64; },
       "rows 64 differ from max_context 32"},
      {"state of a TiB", [](N& n, P&) { n.max_context = n.states[0].rows = 1ll << 20, n.states[0].width = 1ll << 19; },
       "is 1 TiB or more"},
      {"states without a context", [](N& n, P&) { n.max_context = 0; }, "max_context is 0 but the network has states"},
      {"negative max_context", [](N& n, P&) { n.max_context = -1; }, "max_context -1 is negative"},
      // names and dtypes
      {"empty tensor name", [](N& n, P&) { n.tensors[4].name.clear(); }, "tensor 4 has an empty name"},
      {"repeated tensor name", [](N& n, P&) { n.tensors[4].name = "x"; }, "tensor 4: the name 'x' is taken"},
      {"empty weight name", [](N& n, P&) { n.weights[3].name.clear(); }, "weight 3 has an empty name"},
      {"repeated weight name", [](N& n, P&) { n.weights[3].name = "embed.weight"; },
       "weight 3: the name 'embed.weight' is taken"},
      {"tensor with an invalid dtype", [](N& n, P&) { n.tensors[4].dtype = static_cast<DataType>(200); },
       "tensor 4 'q': invalid dtype 200"},
  };
  const Engine e = tiny_decoder();
  for (const Violation& v : cases) {
    ir::Network net = e.desc.network;
    uint64_t payload_bytes = e.payload.size();
    v.apply(net, payload_bytes);
    const Status s = ir::validate_network(net, payload_bytes);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << v.name << ": " << s.to_string();
    EXPECT_NE(s.message().find(v.expected), std::string::npos) << v.name << ": " << s.message();
  }
}

TEST(ValidateNetwork, AcceptsWhatTheRulesAllow) {
  const Engine e = tiny_decoder();
  ir::Network n = e.desc.network;
  n.inputs[0].dim_names.clear();                    // no dim names
  node_named(n, "layers.0.attn").attrs.window = 0;  // no window
  n.nodes[0].attrs.scale = -1.0f;                   // any finite scale
  n.tensors[1].dtype = DataType::kI32;              // i32 positions
  EXPECT_TRUE(ir::validate_network(n, e.payload.size()).ok());
  ir::Network per_head = e.desc.network;  // a per-head norm over a head_dim-long weight
  per_head.weights[1].dims = Dims{4};
  per_head.weights[1].bytes = 16;
  node_named(per_head, "layers.0.attn_norm").attrs.head_dim = 4;
  EXPECT_TRUE(ir::validate_network(per_head, e.payload.size()).ok());
  ir::Network stateless;  // no states: max_context may be 0
  stateless.tensors = {{"a", DataType::kF32}, {"b", DataType::kF32}, {"c", DataType::kF32}};
  stateless.inputs = {{0, Dims{-1, 4}, {}}, {1, Dims{-1, 4}, {}}};
  stateless.nodes = {{OpKind::kSiluMul, "act", {0, 1}, {2}, {}, {}}};
  stateless.outputs = {2};
  EXPECT_TRUE(ir::validate_network(stateless, 0).ok());
}

}  // namespace
}  // namespace gearbox::format
