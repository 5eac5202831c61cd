// Shape rules and validation of the generic ops: the helpers (broadcasting, slices, shape
// specs), the code names, each op's inferred dims, and each rule's error naming the node.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "ir/generic_shapes.h"
#include "ir/shape_inference.h"
#include "ir/validate.h"

namespace gearbox::ir {
namespace {

// A one-node network: inputs of the given dtypes and ranks (all dims dynamic), one output.
struct OneNode {
  Network net;
  explicit OneNode(OpKind kind, std::vector<DataType> inputs, DataType out = DataType::kF32, OpAttrs attrs = {},
                   std::vector<int32_t> ranks = {}) {
    Node node{kind, "n", {}, {}, {}, attrs};
    for (size_t i = 0; i < inputs.size(); ++i) {
      net.tensors.push_back({"in" + std::to_string(i), inputs[i]});
      const int32_t rank = i < ranks.size() ? ranks[i] : 2;
      std::vector<int64_t> dyn(static_cast<size_t>(rank), -1);
      net.inputs.push_back({static_cast<int32_t>(i), Dims(std::span<const int64_t>(dyn)), {}});
      node.inputs.push_back(static_cast<int32_t>(i));
    }
    net.tensors.push_back({"out", out});
    node.outputs.push_back(static_cast<int32_t>(net.tensors.size() - 1));
    net.outputs.push_back(node.outputs[0]);
    net.nodes.push_back(node);
  }
  Status validate() const { return validate_network(net, 0); }
  Result<Dims> infer(std::vector<Dims> in) {
    for (size_t i = 0; i < in.size(); ++i) {
      std::vector<int64_t> dyn(static_cast<size_t>(in[i].rank()), -1);
      net.inputs[i].dims = Dims(std::span<const int64_t>(dyn));
    }
    std::vector<Dims> dims;
    Status s = infer_shapes(net, in, dims);
    if (!s.ok()) return s;
    return dims[static_cast<size_t>(net.outputs[0])];
  }
};

OpAttrs with(int32_t code = 0, std::vector<int64_t> ints = {}, int32_t axis = 0, int32_t flags = 0) {
  OpAttrs a;
  a.code = code;
  a.ints = std::move(ints);
  a.axis = axis;
  a.flags = flags;
  return a;
}

std::string message(const Status& s) { return s.ok() ? "ok" : s.message(); }
template <typename T>
std::string message(const Result<T>& r) {
  return r.ok() ? "ok" : r.status().message();
}

TEST(GenericShapes, Broadcast) {
  Dims out;
  ASSERT_TRUE(broadcast_dims({Dims{2, 1, 5}, Dims{3, 1}}, out));
  EXPECT_EQ(out, (Dims{2, 3, 5}));
  EXPECT_FALSE(broadcast_dims({Dims{2, 3}, Dims{4}}, out));
  ASSERT_TRUE(broadcast_dims({Dims{}, Dims{4}}, out));
  EXPECT_EQ(out, (Dims{4}));
  EXPECT_EQ(broadcast_strides(Dims{3, 1}, 3), (std::vector<int64_t>{0, 1, 0}));
}

TEST(GenericShapes, SliceFollowsPython) {
  const auto count = [](int64_t e, int64_t s, int64_t t, int64_t st) { return slice_range(e, s, t, st).count; };
  EXPECT_EQ(count(10, 1, std::numeric_limits<int64_t>::max(), 3), 3);  // 1, 4, 7
  EXPECT_EQ(count(7, -3, -1, 1), 2);
  EXPECT_EQ(count(5, -100, 100, 2), 3);
  EXPECT_EQ(count(5, 4, 2, 1), 0);
  EXPECT_EQ(slice_range(7, -3, -1, 1).start, 4);
  EXPECT_EQ(count(5, 0, 5, std::numeric_limits<int64_t>::max()), 1);
}

TEST(GenericShapes, ShapeSpecs) {
  EXPECT_EQ(*resolve_shape_spec(std::vector<int64_t>{1, -3, 4, 16}, Dims{1, 6, 64}, false), (Dims{1, 6, 4, 16}));
  EXPECT_EQ(*resolve_shape_spec(std::vector<int64_t>{6, -1}, Dims{2, 3, 4}, false), (Dims{6, 4}));
  EXPECT_EQ(*resolve_shape_spec(std::vector<int64_t>{2, -1, 5}, Dims{3, 1}, true), (Dims{2, 3, 5}));
  EXPECT_EQ(*resolve_shape_spec(std::vector<int64_t>{}, Dims{1}, false), Dims{});
  EXPECT_EQ(message(resolve_shape_spec(std::vector<int64_t>{5, -1}, Dims{2, 3}, false)),
            "reshape shape [5, -1] cannot take the 6 elements of x [2, 3]");
  EXPECT_EQ(message(resolve_shape_spec(std::vector<int64_t>{4, 2}, Dims{2, 3}, false)),
            "reshape shape [4, 2] gives [4, 2] of 8 elements, but x [2, 3] has 6");
  EXPECT_EQ(message(resolve_shape_spec(std::vector<int64_t>{-5}, Dims{2, 3}, false)),
            "reshape shape [-5]: -5 names dim 3 of x [2, 3]");
  EXPECT_EQ(message(resolve_shape_spec(std::vector<int64_t>{4, 5}, Dims{3, 1}, true)),
            "expand shape [4, 5] gives [4, 5], which x [3, 1] does not expand to (dim 0)");
  EXPECT_EQ(message(resolve_shape_spec(std::vector<int64_t>{3}, Dims{3, 1}, true)),
            "expand shape [3] has a lower rank than x [3, 1]");
}

TEST(GenericShapes, CodeNamesRoundTrip) {
  for (int32_t c = 1; c <= kMaxUnaryCode; ++c) EXPECT_EQ(op_code_from_name(OpKind::kUnary, unary_code_name(c)), c);
  for (int32_t c = 1; c <= kMaxBinaryCode; ++c) EXPECT_EQ(op_code_from_name(OpKind::kBinary, binary_code_name(c)), c);
  for (int32_t c = 1; c <= kMaxReduceCode; ++c) EXPECT_EQ(op_code_from_name(OpKind::kReduce, reduce_code_name(c)), c);
  EXPECT_EQ(op_code_from_name(OpKind::kSoftmax, "log_softmax"), 1);
  EXPECT_EQ(op_code_from_name(OpKind::kUnary, "add"), -1);
  EXPECT_EQ(op_code_from_name(OpKind::kMatmul, "add"), -1);
  EXPECT_EQ(unary_code_name(0), nullptr);
  EXPECT_EQ(binary_code_name(16), nullptr);
  EXPECT_STREQ(op_kind_name(OpKind::kIndexSelect), "index_select");
  EXPECT_STREQ(data_type_name(DataType::kBool), "bool");
  EXPECT_EQ(data_type_size(DataType::kBool), 1u);
}

TEST(GenericShapes, InferredDims) {
  using D = DataType;
  const D f = D::kF32;
  OneNode mm(OpKind::kMatmul, {f, f});
  EXPECT_EQ(*mm.infer({Dims{2, 1, 3, 5}, Dims{4, 5, 6}}), (Dims{2, 4, 3, 6}));
  EXPECT_EQ(message(mm.infer({Dims{2, 3, 5}, Dims{4, 6}})),
            "node 0 'n' (matmul): a [2, 3, 5] and b [4, 6] do not multiply: K 5 vs 4");
  OneNode red(OpKind::kReduce, {f}, f, with(1, {0, 2}, 0, kFlagKeepdim));
  EXPECT_EQ(*red.infer({Dims{4, 3, 5}}), (Dims{1, 3, 1}));
  EXPECT_EQ(message(red.infer({Dims{4, 3}})), "node 0 'n' (reduce): axis 2 is outside x [4, 3]");
  OneNode all(OpKind::kReduce, {f}, f, with(3));
  EXPECT_EQ(*all.infer({Dims{4, 3}}), Dims{});
  OneNode sdpa(OpKind::kSdpa, {f, f, f, D::kBool});
  EXPECT_EQ(*sdpa.infer({Dims{1, 2, 5, 8}, Dims{1, 2, 7, 8}, Dims{1, 2, 7, 6}, Dims{3, 1, 5, 7}}), (Dims{3, 2, 5, 6}));
  EXPECT_EQ(message(sdpa.infer({Dims{5, 8}, Dims{7, 8}, Dims{7, 6}, Dims{5, 6}})),
            "node 0 'n' (sdpa): mask [5, 6] does not broadcast to the scores [5, 7]");
  OneNode perm(OpKind::kPermute, {f}, f, with(0, {2, 0, 1}));
  EXPECT_EQ(*perm.infer({Dims{2, 3, 4}}), (Dims{4, 2, 3}));
  OneNode sl(OpKind::kSlice, {f}, f, with(0, {-3, std::numeric_limits<int64_t>::max(), 2}, 1));
  EXPECT_EQ(*sl.infer({Dims{2, 7}}), (Dims{2, 2}));
  OneNode cat(OpKind::kConcat, {f, f}, f, with(0, {}, 1));
  EXPECT_EQ(*cat.infer({Dims{2, 3}, Dims{2, 5}}), (Dims{2, 8}));
  EXPECT_EQ(message(cat.infer({Dims{2, 3}, Dims{3, 5}})),
            "node 0 'n' (concat): input 1 [3, 5] does not match input 0 [2, 3] outside axis 1");
  OneNode is(OpKind::kIndexSelect, {f, D::kI64}, f, with(0, {}, 1));
  EXPECT_EQ(*is.infer({Dims{3, 6, 2}, Dims{4}}), (Dims{3, 4, 2}));
  OneNode ga(OpKind::kGather, {f, D::kI64}, f, with(0, {}, 0));
  EXPECT_EQ(*ga.infer({Dims{3, 4}, Dims{7, 2}}), (Dims{7, 2}));
  EXPECT_EQ(message(ga.infer({Dims{3, 4}, Dims{7, 5}})),
            "node 0 'n' (gather): index [7, 5] is larger than x [3, 4] at dim 1");
  OneNode ex(OpKind::kExpand, {f}, f, with(0, {2, -1, 5}));
  EXPECT_EQ(*ex.infer({Dims{3, 1}}), (Dims{2, 3, 5}));
  OneNode bin(OpKind::kBinary, {f, f}, f, with(1));
  EXPECT_EQ(message(bin.infer({Dims{2, 3}, Dims{4}})), "node 0 'n' (binary): a [2, 3] and b [4] do not broadcast");
}

TEST(GenericValidate, EachRuleNamesTheNode) {
  using D = DataType;
  const D f = D::kF32;
  struct Case {
    OneNode node;
    std::string error;
  };
  const std::vector<Case> cases = {
      {OneNode(OpKind::kUnary, {f}, f, with(0)), "node 0 'n' (unary): code 0 is not a unary code"},
      {OneNode(OpKind::kUnary, {D::kBool}, D::kBool, with(2)),
       "node 0 'n' (unary): exp takes f32, not bool (cast to f32 first)"},
      {OneNode(OpKind::kUnary, {D::kI32}, D::kI64, with(1)),
       "node 0 'n' (unary): x and the output must share one dtype; found i32 and i64"},
      {OneNode(OpKind::kBinary, {f, f}, f, with(16)), "node 0 'n' (binary): code 16 is not a binary code"},
      {OneNode(OpKind::kBinary, {f, f}, f, with(8)), "node 0 'n' (binary): eq produces bool, not f32"},
      {OneNode(OpKind::kBinary, {f, D::kI32}, f, with(1)),
       "node 0 'n' (binary): a and b must share one dtype; found f32 and i32"},
      {OneNode(OpKind::kBinary, {f, f}, D::kBool, with(14)),
       "node 0 'n' (binary): logical_and takes and produces bool, not f32 -> bool"},
      {OneNode(OpKind::kWhere, {f, f, f}), "node 0 'n' (where): cond must be bool, not f32"},
      {OneNode(OpKind::kReduce, {f}, f, with(1, {1, 0})),
       "node 0 'n' (reduce): axes [1, 0] must be sorted, unique and in [0, 8)"},
      {OneNode(OpKind::kReduce, {f}, f, with(1, {}, 0, 2)), "node 0 'n' (reduce): flags 2 has bits other than keepdim"},
      {OneNode(OpKind::kSoftmax, {f}, f, with(2)), "node 0 'n' (softmax): code 2 is not a softmax code"},
      {OneNode(OpKind::kSoftmax, {f}, f, with(0, {}, -1)), "node 0 'n' (softmax): axis -1 must be in [0, 8)"},
      {OneNode(OpKind::kMatmul, {f, D::kBF16}),
       "node 0 'n' (matmul): takes and produces f32 tensors, not bf16 (cast to f32 first)"},
      {OneNode(OpKind::kSdpa, {f, f}), "node 0 'n' (sdpa): needs 3 or 4 inputs (q, k, v[, mask]), has 2"},
      {OneNode(OpKind::kSdpa, {f, f, f, D::kI32}), "node 0 'n' (sdpa): mask must be bool or f32, not i32"},
      {OneNode(OpKind::kLayerNorm, {f}), "node 0 'n' (layer_norm): eps 0 must be positive and finite"},
      {OneNode(OpKind::kPermute, {f}, f, with(0, {0, 2})),
       "node 0 'n' (permute): perm [0, 2] is not a permutation of 0..2-1"},
      {OneNode(OpKind::kReshape, {f}, f, with(0, {-1, -1})),
       "node 0 'n' (reshape): reshape shape [-1, -1] has more than one -1"},
      {OneNode(OpKind::kExpand, {f}, f, with(0, {-10})),
       "node 0 'n' (expand): expand shape [-10]: -10 names dim 8, beyond the largest rank 8"},
      {OneNode(OpKind::kSlice, {f}, f, with(0, {0, 4, 0})), "node 0 'n' (slice): step 0 must be >= 1"},
      {OneNode(OpKind::kSlice, {f}, f, with(0, {0, 4})),
       "node 0 'n' (slice): needs ints {start, end, step}, has [0, 4]"},
      {OneNode(OpKind::kConcat, {f, D::kI64}),
       "node 0 'n' (concat): the inputs and the output must share one dtype; found f32 and i64"},
      {OneNode(OpKind::kIndexSelect, {f, f}), "node 0 'n' (index_select): index must be i32 or i64, not f32"},
      {OneNode(OpKind::kGather, {f, D::kI32}, D::kI32),
       "node 0 'n' (gather): x and the output must share one dtype; found f32 and i32"},
      {OneNode(OpKind::kConstant, {}), "node 0 'n' (constant): needs 1 weights, has 0"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(message(c.node.validate()), c.error);
  }
}

TEST(GenericValidate, AcceptsEveryDtypeAnOpTakes) {
  using D = DataType;
  for (D t : {D::kF32, D::kBF16, D::kF16, D::kI32, D::kI64, D::kBool}) {
    EXPECT_TRUE(OneNode(OpKind::kPermute, {t}, t, with(0, {1, 0})).validate().ok()) << data_type_name(t);
    EXPECT_TRUE(OneNode(OpKind::kCast, {D::kF32}, t).validate().ok()) << data_type_name(t);
    EXPECT_TRUE(OneNode(OpKind::kWhere, {D::kBool, t, t}, t).validate().ok()) << data_type_name(t);
  }
  EXPECT_TRUE(OneNode(OpKind::kUnary, {D::kI64}, D::kI64, with(12)).validate().ok());
  EXPECT_TRUE(OneNode(OpKind::kBinary, {D::kI32, D::kI32}, D::kBool, with(10)).validate().ok());
  EXPECT_TRUE(
      OneNode(OpKind::kSdpa, {D::kF32, D::kF32, D::kF32}, D::kF32, with(0, {}, 0, kFlagCausal)).validate().ok());
}

}  // namespace
}  // namespace gearbox::ir
