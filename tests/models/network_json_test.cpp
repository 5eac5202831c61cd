// Network descriptions (models/network_json.h): a well-formed one becomes the network it
// describes, with its weights copied as stored and 64-byte aligned, and every kind of
// schema break gets an error naming where it is. (Whole models written as descriptions by
// the Python export are checked end to end in tests/executorch.)
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/validate.h"
#include "network_json_fixture.h"

namespace gearbox::models {
namespace {

using Json = nlohmann::json;

// A checkpoint with an embedding table [8, 4] (f32), a norm [4] (bf16) and an F64 tensor.
class NetworkJson : public NetworkJsonFixture {
 protected:
  void SetUp() override {
    std::vector<float> table(32);
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i) * 0.25f;
    write_checkpoint("gearbox_network_json", {{"embed", "F32", {8, 4}, f32_bytes(table)},
                                              {"norm", "BF16", {4}, u16_bytes({0x3f80, 0x4000, 0x4040, 0x4080})},
                                              {"wide", "F64", {2}, pattern_bytes(16, 1)}});
  }

  static Json valid() {
    return Json::parse(R"({
      "format": "gearbox-network", "version": 1, "max_context": 16,
      "inputs": [{"name": "tokens", "dtype": "i64", "dims": [1, -1], "dim_names": ["batch", "seq"]}],
      "outputs": ["logits"],
      "nodes": [
        {"op": "embedding", "name": "embed", "inputs": ["tokens"], "outputs": ["h"], "weights": ["embed"],
         "attrs": {"scale": 2.0}},
        {"op": "rms_norm", "name": "norm", "inputs": ["h"], "outputs": ["n"], "weights": ["norm"],
         "attrs": {"eps": 1e-6, "weight_offset": 1.0}},
        {"op": "linear", "name": "head", "inputs": ["n"], "outputs": ["logits"], "weights": ["embed"]}
      ],
      "metadata": {"model.vocab": "8"}
    })");
  }
};

TEST_F(NetworkJson, AWellFormedDescriptionBecomesItsNetwork) {
  Result<DescribedModel> m = read(valid());
  ASSERT_TRUE(m.ok()) << m.status().message();
  const ir::Network& net = m->model.network;
  EXPECT_EQ(net.max_context, 16);
  ASSERT_EQ(net.nodes.size(), 3u);
  EXPECT_EQ(net.nodes[0].kind, ir::OpKind::kEmbedding);
  EXPECT_FLOAT_EQ(net.nodes[0].attrs.scale, 2.0f);
  EXPECT_FLOAT_EQ(net.nodes[1].attrs.weight_offset, 1.0f);
  ASSERT_EQ(net.weights.size(), 2u) << "a weight read twice (tied) is stored once";
  EXPECT_EQ(net.nodes[2].weights[0], net.nodes[0].weights[0]);
  EXPECT_EQ(net.weights[1].dtype, DataType::kBF16) << "weights keep their stored dtype";
  EXPECT_EQ(net.weights[1].offset % 64, 0u);
  EXPECT_EQ(m->model.payload.size() % 64, 0u);
  float first = 0, last = 0;
  std::memcpy(&first, m->model.payload.data() + net.weights[0].offset, 4);
  std::memcpy(&last, m->model.payload.data() + net.weights[0].offset + 31 * 4, 4);
  EXPECT_EQ(first, 0.0f);
  EXPECT_EQ(last, 7.75f);
  ASSERT_EQ(net.outputs.size(), 1u);
  EXPECT_EQ(net.tensors[static_cast<size_t>(net.outputs[0])].name, "logits");
  ASSERT_EQ(m->metadata.size(), 1u);
  EXPECT_EQ(m->metadata[0].second, "8");
  EXPECT_TRUE(ir::validate_network(net, m->model.payload.size()).ok());
}

TEST_F(NetworkJson, EverySchemaBreakIsNamed) {
  const std::vector<SchemaBreak> cases = {
      {"unknown top-level key", [](Json& j) { j["extra"] = 1; }, "top level: unknown key 'extra'"},
      {"wrong format", [](Json& j) { j["format"] = "onnx"; }, "'format' is 'onnx'"},
      {"future version", [](Json& j) { j["version"] = 2; }, "version 2 (this gearbox reads 1)"},
      {"zero max_context", [](Json& j) { j["max_context"] = 0; }, "'max_context' must be >= 1"},
      {"no inputs", [](Json& j) { j["inputs"] = Json::array(); }, "'inputs' must be a non-empty array"},
      {"bad input dtype", [](Json& j) { j["inputs"][0]["dtype"] = "u8"; }, "inputs[0]: dtype 'u8'"},
      {"dims below -1",
       [](Json& j) {
         j["inputs"][0]["dims"] = {1, -2};
       },
       "'dims' entries must be >= -1"},
      {"dim names missing", [](Json& j) { j["inputs"][0]["dim_names"] = {"batch"}; }, "'dim_names' must name every"},
      {"unknown op", [](Json& j) { j["nodes"][1]["op"] = "group_norm"; }, "nodes[1] 'norm': unknown op 'group_norm'"},
      {"unknown attr", [](Json& j) { j["nodes"][1]["attrs"]["gamma"] = 1; }, "unknown attr 'gamma'"},
      {"attr of the wrong type", [](Json& j) { j["nodes"][1]["attrs"]["eps"] = "small"; }, "'eps' must be a number"},
      {"int attr too wide", [](Json& j) { j["nodes"][1]["attrs"]["head_dim"] = 1LL << 40; }, "32-bit integer"},
      {"read before produced", [](Json& j) { j["nodes"][0]["inputs"] = {"n"}; }, "reads tensor 'n' before"},
      {"produced twice", [](Json& j) { j["nodes"][1]["outputs"] = {"h"}; }, "tensor 'h' is produced twice"},
      {"node name twice", [](Json& j) { j["nodes"][2]["name"] = "embed"; }, "node name used twice"},
      {"missing weight", [](Json& j) { j["nodes"][1]["weights"] = {"gamma"}; }, "no tensor 'gamma'"},
      {"unreadable weight dtype", [](Json& j) { j["nodes"][1]["weights"] = {"wide"}; }, "F64"},
      {"unknown output", [](Json& j) { j["outputs"] = {"probs"}; }, "outputs: no tensor 'probs'"},
      {"metadata not strings", [](Json& j) { j["metadata"]["n"] = 3; }, "metadata: 'n' must be a string"},
      {"unknown node key", [](Json& j) { j["nodes"][0]["device"] = "gpu"; }, "unknown key 'device'"},
  };
  expect_each_break_named(valid(), cases);
  EXPECT_EQ(read_network_description("{not json", *ckpt_).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace gearbox::models
