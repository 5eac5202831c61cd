// The generic ops in network descriptions: every attr spelled by meaning (code names, axes,
// perm, shape, start / end / step, keepdim, causal), per-node "dtypes", bool inputs and
// I64 / BOOL constant weights; every misuse is an error naming the node.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/validate.h"
#include "network_json_fixture.h"

namespace gearbox::models {
namespace {

using Json = nlohmann::json;
using ir::OpKind;

class NetworkJsonGeneric : public NetworkJsonFixture {
 protected:
  void SetUp() override {
    Bytes ids(4 * 8, 0);
    for (int64_t i = 0; i < 4; ++i) std::memcpy(ids.data() + i * 8, &i, 8);
    write_checkpoint("gearbox_network_json_generic", {{"w", "F32", {4, 3}, f32_bytes(std::vector<float>(12, 0.5f))},
                                                      {"gamma", "F32", {3}, f32_bytes({1, 2, 3})},
                                                      {"idx", "I64", {4}, ids},
                                                      {"flags", "BOOL", {3}, {0, 7, 1}},
                                                      {"wide", "F64", {2}, pattern_bytes(16, 1)}});
  }

  static Json valid() {
    return Json::parse(R"({
      "format": "gearbox-network", "version": 1, "max_context": 8,
      "inputs": [{"name": "x", "dtype": "f32", "dims": [1, -1, 4], "dim_names": ["batch", "seq", "f"]},
                 {"name": "keep", "dtype": "bool", "dims": [1, -1], "dim_names": ["batch", "seq"]}],
      "outputs": ["sel", "probs", "s", "m"],
      "nodes": [
        {"op": "constant", "name": "wconst", "inputs": [], "outputs": ["wc"], "weights": ["w"]},
        {"op": "matmul", "name": "mm", "inputs": ["x", "wc"], "outputs": ["h"]},
        {"op": "layer_norm", "name": "ln", "inputs": ["h"], "outputs": ["hn"], "weights": ["gamma"],
         "attrs": {"eps": 1e-5}},
        {"op": "unary", "name": "act", "inputs": ["hn"], "outputs": ["a"], "attrs": {"code": "gelu_tanh"}},
        {"op": "unary", "name": "clip", "inputs": ["a"], "outputs": ["c"],
         "attrs": {"code": "clamp", "alpha": "-inf", "beta": 2.5}},
        {"op": "softmax", "name": "sm", "inputs": ["c"], "outputs": ["probs"], "attrs": {"axis": 2, "code": "log_softmax"}},
        {"op": "reduce", "name": "sum", "inputs": ["probs"], "outputs": ["s"], "attrs": {"code": "sum", "axes": [2], "keepdim": true}},
        {"op": "permute", "name": "tr", "inputs": ["s"], "outputs": ["t"], "attrs": {"perm": [0, 2, 1]}},
        {"op": "reshape", "name": "flat", "inputs": ["t"], "outputs": ["r"], "attrs": {"shape": [1, -4]}},
        {"op": "slice", "name": "tail", "inputs": ["r"], "outputs": ["sl"], "attrs": {"axis": 1, "start": -2}},
        {"op": "constant", "name": "ids", "inputs": [], "outputs": ["i"], "dtypes": ["i64"], "weights": ["idx"]},
        {"op": "constant", "name": "fl", "inputs": [], "outputs": ["f"], "dtypes": ["bool"], "weights": ["flags"]},
        {"op": "index_select", "name": "pick", "inputs": ["f", "i"], "outputs": ["sel"], "dtypes": ["bool"],
         "attrs": {"axis": 0}},
        {"op": "binary", "name": "lt", "inputs": ["s", "s"], "outputs": ["m0"], "dtypes": ["bool"], "attrs": {"code": "lt"}},
        {"op": "where", "name": "m", "inputs": ["keep", "sl", "sl"], "outputs": ["m"]}
      ]
    })");
  }
};

const ir::Node& node(const ir::Network& net, const std::string& name) {
  for (const ir::Node& n : net.nodes) {
    if (n.name == name) return n;
  }
  ADD_FAILURE() << "no node " << name;
  return net.nodes.front();
}

TEST_F(NetworkJsonGeneric, EveryAttrIsReadByMeaning) {
  Result<DescribedModel> m = read(valid());
  ASSERT_TRUE(m.ok()) << m.status().message();
  const ir::Network& net = m->model.network;
  EXPECT_EQ(node(net, "act").attrs.code, static_cast<int32_t>(ir::UnaryCode::kGeluTanh));
  EXPECT_EQ(node(net, "clip").attrs.alpha, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(node(net, "clip").attrs.beta, 2.5f);
  EXPECT_EQ(node(net, "sm").attrs.axis, 2);
  EXPECT_EQ(node(net, "sm").attrs.code, 1);
  EXPECT_EQ(node(net, "sum").attrs.ints, (std::vector<int64_t>{2}));
  EXPECT_EQ(node(net, "sum").attrs.flags, ir::kFlagKeepdim);
  EXPECT_EQ(node(net, "tr").attrs.ints, (std::vector<int64_t>{0, 2, 1}));
  EXPECT_EQ(node(net, "flat").attrs.ints, (std::vector<int64_t>{1, -4}));
  EXPECT_EQ(node(net, "tail").attrs.ints, (std::vector<int64_t>{-2, std::numeric_limits<int64_t>::max(), 1}));
  EXPECT_EQ(node(net, "lt").attrs.code, static_cast<int32_t>(ir::BinaryCode::kLt));
  EXPECT_EQ(net.tensors[static_cast<size_t>(node(net, "lt").outputs[0])].dtype, DataType::kBool);
  EXPECT_EQ(net.tensors[static_cast<size_t>(node(net, "ids").outputs[0])].dtype, DataType::kI64);
  EXPECT_EQ(net.tensors[static_cast<size_t>(node(net, "act").outputs[0])].dtype, DataType::kF32);
  EXPECT_EQ(net.tensors[1].dtype, DataType::kBool);
  const ir::WeightInfo& flags = net.weights[static_cast<size_t>(node(net, "fl").weights[0])];
  EXPECT_EQ(flags.dtype, DataType::kBool);
  EXPECT_EQ(m->model.payload[flags.offset + 1], 1) << "bool weights are stored as 0 / 1";
  EXPECT_EQ(net.weights[static_cast<size_t>(node(net, "ids").weights[0])].dtype, DataType::kI64);
  const Status valid_net = ir::validate_network(net, m->model.payload.size());
  EXPECT_TRUE(valid_net.ok()) << valid_net.message();
}

TEST_F(NetworkJsonGeneric, EveryMisuseIsNamed) {
  const std::vector<SchemaBreak> cases = {
      {"attr on the wrong op",
       [](Json& j) {
         j["nodes"][1]["attrs"] = {{"perm", {1, 0}}};
       },
       "nodes[1] 'mm': attr 'perm' does not apply to op 'matmul'"},
      {"unknown code", [](Json& j) { j["nodes"][3]["attrs"]["code"] = "gelu_fast"; },
       "nodes[3] 'act': code 'gelu_fast' is not a unary code"},
      {"code of another op", [](Json& j) { j["nodes"][3]["attrs"]["code"] = "add"; }, "'add' is not a unary code"},
      {"code not a string", [](Json& j) { j["nodes"][3]["attrs"]["code"] = 5; }, "attr 'code' must be a string"},
      {"negative axis", [](Json& j) { j["nodes"][5]["attrs"]["axis"] = -1; }, "attr 'axis' must be an integer >= 0"},
      {"keepdim not a boolean", [](Json& j) { j["nodes"][6]["attrs"]["keepdim"] = 1; },
       "attr 'keepdim' must be true or false"},
      {"perm not integers", [](Json& j) { j["nodes"][7]["attrs"]["perm"] = {0.5}; }, "attr 'perm' must hold integers"},
      {"shape too long", [](Json& j) { j["nodes"][8]["attrs"]["shape"] = std::vector<int>(9, 1); },
       "attr 'shape' must be an array of at most 8 integers"},
      {"alpha not a number", [](Json& j) { j["nodes"][4]["attrs"]["alpha"] = "big"; },
       "attr 'alpha' must be a number, \"inf\" or \"-inf\""},
      {"dtypes count",
       [](Json& j) {
         j["nodes"][10]["dtypes"] = {"i64", "i64"};
       },
       "nodes[10] 'ids': 'dtypes' has 2 entries for 1 outputs"},
      {"bad dtype", [](Json& j) { j["nodes"][10]["dtypes"] = {"u8"}; },
       "dtype 'u8' is not f32, bf16, f16, i32, i64 or bool"},
      {"integer weight off a constant", [](Json& j) { j["nodes"][2]["weights"] = {"idx"}; }, "I64"},
      {"f64 constant", [](Json& j) { j["nodes"][10]["weights"] = {"wide"}; }, "F64"},
  };
  expect_each_break_named(valid(), cases);
}

}  // namespace
}  // namespace gearbox::models
