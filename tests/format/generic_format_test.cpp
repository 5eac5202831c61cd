// Engine format version 2: a network holding every generic op round-trips field by field
// (attrs, ints, bool tensors and weights included); a network of version-1 ops is still
// written as version 1; a generic op in a version-1 file and a bad code are rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#define XXH_INLINE_ALL  // the test recomputes checksums without linking libxxhash itself
#include <xxhash.h>

#include "format/engine_file.h"
#include "support/generic_cases.h"

namespace gearbox::testing {
namespace {

// Every case's node in one network: the cases' inputs and weights side by side.
struct Merged {
  format::EngineDesc desc;
  std::vector<uint8_t> payload;
};

Merged every_generic_op() {
  Merged m;
  ir::Network& net = m.desc.network;
  format::ProfileDesc profile{"only", {}};
  for (const GenericCase& c : generic_cases()) {
    const CaseNetwork cn = make_case_network(c);
    const auto tensor_base = static_cast<int32_t>(net.tensors.size());
    const auto weight_base = static_cast<int32_t>(net.weights.size());
    const uint64_t payload_base = m.payload.size();
    for (ir::TensorInfo t : cn.network.tensors) {
      t.name = c.name + "." + t.name;
      net.tensors.push_back(t);
    }
    for (ir::WeightInfo w : cn.network.weights) {
      w.name = c.name + "." + w.name;
      w.offset += payload_base;
      net.weights.push_back(w);
    }
    m.payload.insert(m.payload.end(), cn.payload.begin(), cn.payload.end());
    for (ir::InputSpec in : cn.network.inputs) {
      profile.bounds.push_back({in.dims, in.dims, in.dims});
      in.tensor += tensor_base;
      net.inputs.push_back(in);
    }
    for (ir::Node n : cn.network.nodes) {
      for (int32_t& t : n.inputs) t += tensor_base;
      for (int32_t& t : n.outputs) t += tensor_base;
      for (int32_t& w : n.weights) w += weight_base;
      net.nodes.push_back(n);
    }
    for (int32_t o : cn.network.outputs) net.outputs.push_back(o + tensor_base);
  }
  m.desc.profiles = {profile};
  m.desc.producer = "generic_format_test";
  return m;
}

std::vector<uint8_t> serialize(const Merged& m) {
  Result<std::vector<uint8_t>> bytes = format::serialize_engine(m.desc, m.payload);
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  return bytes.ok() ? *bytes : std::vector<uint8_t>{};
}

uint32_t version_of(const std::vector<uint8_t>& bytes) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + 8, 4);
  return v;
}

TEST(GenericFormat, EveryGenericOpRoundTrips) {
  const Merged m = every_generic_op();
  const std::vector<uint8_t> bytes = serialize(m);
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(version_of(bytes), 2u);
  Result<format::ParsedEngine> parsed = format::parse_engine(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  const ir::Network& a = m.desc.network;
  const ir::Network& b = parsed->desc.network;
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    EXPECT_EQ(a.nodes[i].kind, b.nodes[i].kind) << a.nodes[i].name;
    EXPECT_EQ(a.nodes[i].name, b.nodes[i].name);
    EXPECT_EQ(a.nodes[i].inputs, b.nodes[i].inputs) << a.nodes[i].name;
    EXPECT_EQ(a.nodes[i].outputs, b.nodes[i].outputs) << a.nodes[i].name;
    EXPECT_EQ(a.nodes[i].weights, b.nodes[i].weights) << a.nodes[i].name;
    EXPECT_TRUE(a.nodes[i].attrs == b.nodes[i].attrs) << a.nodes[i].name;
  }
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) EXPECT_EQ(a.tensors[i].dtype, b.tensors[i].dtype) << a.tensors[i].name;
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) {
    EXPECT_EQ(a.weights[i].dtype, b.weights[i].dtype);
    EXPECT_EQ(a.weights[i].dims, b.weights[i].dims);
  }
  EXPECT_TRUE(std::equal(m.payload.begin(), m.payload.end(), parsed->payload.begin(), parsed->payload.end()));
}

TEST(GenericFormat, VersionOneOpsStayVersionOne) {
  Merged m;
  ir::Network& net = m.desc.network;
  net.tensors = {{"a", DataType::kF32}, {"b", DataType::kF32}, {"y", DataType::kF32}};
  net.inputs = {{0, Dims{1, -1}, {}}, {1, Dims{1, -1}, {}}};
  net.nodes = {{ir::OpKind::kAdd, "add", {0, 1}, {2}, {}, {}}};
  net.outputs = {2};
  const InputProfileBounds b{Dims{1, 1}, Dims{1, 2}, Dims{1, 4}};
  m.desc.profiles = {{"p", {b, b}}};
  EXPECT_EQ(version_of(serialize(m)), 1u);
  net.nodes[0].attrs.axis = 1;  // a version-2 attr set on a version-1 op needs version 2
  EXPECT_EQ(version_of(serialize(m)), 2u);
}

// Patches 4 bytes of the metadata at `at` and fixes the metadata checksum.
void patch_metadata(std::vector<uint8_t>& bytes, size_t at, uint32_t value) {
  std::memcpy(bytes.data() + at, &value, 4);
  uint64_t offset = 0, length = 0;
  std::memcpy(&offset, bytes.data() + 16, 8);
  std::memcpy(&length, bytes.data() + 24, 8);
  const uint64_t sum = XXH3_64bits(bytes.data() + offset, length);
  std::memcpy(bytes.data() + 48, &sum, 8);
}

TEST(GenericFormat, TheReaderRejectsWhatVersionOneCannotHoldAndBadCodes) {
  const GenericCase* exp_case = nullptr;
  for (const GenericCase& c : generic_cases()) {
    if (c.name == "unary_affine") exp_case = &c;
  }
  ASSERT_NE(exp_case, nullptr);
  Merged m;
  const CaseNetwork cn = make_case_network(*exp_case);
  m.desc.network = cn.network;
  m.payload = cn.payload;
  m.desc.profiles = {{"p", {{exp_case->inputs[0].dims, exp_case->inputs[0].dims, exp_case->inputs[0].dims}}}};
  std::vector<uint8_t> bytes = serialize(m);
  ASSERT_FALSE(bytes.empty());

  std::vector<uint8_t> v1 = bytes;
  const uint32_t one = 1;
  std::memcpy(v1.data() + 8, &one, 4);  // the header is outside the checksums
  Result<format::ParsedEngine> parsed = format::parse_engine(v1);
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("'op kind' at byte"), std::string::npos) << parsed.status().message();
  EXPECT_NE(parsed.status().message().find("is 10, which format version 1 cannot hold"), std::string::npos)
      << parsed.status().message();

  // code, axis, flags, alpha (0.5), beta (-1): find alpha, beta and patch the code before them.
  const float ab[2] = {exp_case->attrs.alpha, exp_case->attrs.beta};
  const uint8_t* pattern = reinterpret_cast<const uint8_t*>(ab);
  const auto it = std::search(bytes.begin() + 64, bytes.end(), pattern, pattern + 8);
  ASSERT_NE(it, bytes.end());
  const auto code_at = static_cast<size_t>(it - bytes.begin()) - 12;
  patch_metadata(bytes, code_at, 99);
  parsed = format::parse_engine(bytes);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(parsed.status().message().find("node 0 'unary_affine' (unary): code 99 is not a unary code"),
            std::string::npos)
      << parsed.status().message();
}

}  // namespace
}  // namespace gearbox::testing
