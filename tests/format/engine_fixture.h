// The engine-file tests' fixture: a hand-built one-layer decoder (every op kind of version 1,
// a tied lm_head, a bias, two profiles, a CPU tactic table) and its serialization.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "format/engine_file.h"
#include "ir/network.h"

namespace gearbox::format {

using ir::OpKind;
using Bytes = std::vector<uint8_t>;

// ---- the fixture: a one-layer decoder -------------------------------------------------------

struct Engine {
  EngineDesc desc;
  Bytes payload;
};

inline int32_t add_tensor(ir::Network& n, const std::string& name, DataType t = DataType::kF32) {
  n.tensors.push_back({name, t});
  return static_cast<int32_t>(n.tensors.size() - 1);
}

inline int32_t add_weight(ir::Network& n, Bytes& payload, const std::string& name, Dims dims,
                          DataType t = DataType::kF32) {
  ir::WeightInfo w{name, t, dims, payload.size(), static_cast<uint64_t>(dims.volume()) * data_type_size(t)};
  for (uint64_t i = 0; i < w.bytes; ++i) payload.push_back(static_cast<uint8_t>(payload.size() * 31 + 7));
  while (payload.size() % 64 != 0) payload.push_back(0);
  n.weights.push_back(w);
  return static_cast<int32_t>(n.weights.size() - 1);
}

inline void add_node(ir::Network& n, OpKind kind, const std::string& name, std::vector<int32_t> in,
                     std::vector<int32_t> out, std::vector<int32_t> w, ir::OpAttrs attrs = {}) {
  n.nodes.push_back({kind, name, std::move(in), std::move(out), std::move(w), attrs});
}

// vocab 16, hidden 8, 2 query heads and 1 kv head of 4, ffn 12, context 32.
inline Engine tiny_decoder() {
  Engine e;
  ir::Network& n = e.desc.network;
  const int32_t tokens = add_tensor(n, "tokens", DataType::kI32);
  const int32_t pos = add_tensor(n, "positions", DataType::kI64);
  const int32_t embed = add_weight(n, e.payload, "embed.weight", {16, 8}, DataType::kBF16);
  const int32_t attn_norm = add_weight(n, e.payload, "layers.0.attn_norm.weight", {8});
  const int32_t wq = add_weight(n, e.payload, "layers.0.q.weight", {8, 8});
  const int32_t wk = add_weight(n, e.payload, "layers.0.k.weight", {4, 8});
  const int32_t wv = add_weight(n, e.payload, "layers.0.v.weight", {4, 8});
  const int32_t wo = add_weight(n, e.payload, "layers.0.o.weight", {8, 8}, DataType::kF16);
  const int32_t bo = add_weight(n, e.payload, "layers.0.o.bias", {8});
  const int32_t ffn_norm = add_weight(n, e.payload, "layers.0.ffn_norm.weight", {8});
  const int32_t gate = add_weight(n, e.payload, "layers.0.gate.weight", {12, 8});
  const int32_t up = add_weight(n, e.payload, "layers.0.up.weight", {12, 8});
  const int32_t down = add_weight(n, e.payload, "layers.0.down.weight", {8, 12});
  const int32_t final_norm = add_weight(n, e.payload, "final_norm.weight", {8});
  n.inputs = {{tokens, Dims{1, -1}, {"batch", "seq"}}, {pos, Dims{1, -1}, {}}};
  n.states = {{"layers.0.kv", DataType::kBF16, 32, 4}};
  n.max_context = 32;

  const auto t = [&](const char* name) { return add_tensor(n, name); };
  const int32_t x = t("x"), xn = t("xn"), q = t("q"), k = t("k"), v = t("v"), qr = t("q_rope"), kr = t("k_rope");
  const int32_t attn = t("attn"), o = t("attn_out"), h = t("h"), hn = t("hn"), g = t("gate"), u = t("up");
  const int32_t act = t("act"), d = t("down"), h2 = t("h2"), last = t("last"), lastn = t("last_norm");
  const int32_t logits = t("logits");
  ir::OpAttrs norm;
  norm.eps = 1e-6f;
  norm.weight_offset = 1.0f;
  ir::OpAttrs rope_q;
  rope_q.heads = 2;
  rope_q.head_dim = 4;
  rope_q.theta = 10000.0f;
  ir::OpAttrs rope_k = rope_q;
  rope_k.heads = 1;
  ir::OpAttrs att;
  att.heads = 2;
  att.kv_heads = 1;
  att.head_dim = 4;
  att.window = 16;
  att.state = 0;
  att.scale = 0.5f;
  ir::OpAttrs bias;
  bias.has_bias = 1;
  ir::OpAttrs embed_scale;
  embed_scale.scale = 2.828427f;

  add_node(n, OpKind::kEmbedding, "embed", {tokens}, {x}, {embed}, embed_scale);
  add_node(n, OpKind::kRmsNorm, "layers.0.attn_norm", {x}, {xn}, {attn_norm}, norm);
  add_node(n, OpKind::kLinear, "layers.0.qkv", {xn}, {q, k, v}, {wq, wk, wv});
  add_node(n, OpKind::kRope, "layers.0.rope_q", {q, pos}, {qr}, {}, rope_q);
  add_node(n, OpKind::kRope, "layers.0.rope_k", {k, pos}, {kr}, {}, rope_k);
  add_node(n, OpKind::kAttention, "layers.0.attn", {qr, kr, v, pos}, {attn}, {}, att);
  add_node(n, OpKind::kLinear, "layers.0.o", {attn}, {o}, {wo, bo}, bias);
  add_node(n, OpKind::kAdd, "layers.0.add1", {x, o}, {h}, {});
  add_node(n, OpKind::kRmsNorm, "layers.0.ffn_norm", {h}, {hn}, {ffn_norm}, norm);
  add_node(n, OpKind::kLinear, "layers.0.gate_up", {hn}, {g, u}, {gate, up});
  add_node(n, OpKind::kGeluTanhMul, "layers.0.act", {g, u}, {act}, {});
  add_node(n, OpKind::kLinear, "layers.0.down", {act}, {d}, {down});
  add_node(n, OpKind::kAdd, "layers.0.add2", {h, d}, {h2}, {});
  add_node(n, OpKind::kTakeLast, "take_last", {h2}, {last}, {});
  add_node(n, OpKind::kRmsNorm, "final_norm", {last}, {lastn}, {final_norm}, norm);
  add_node(n, OpKind::kLinear, "lm_head", {lastn}, {logits}, {embed});  // tied to the embedding
  n.outputs = {logits};

  const auto bounds = [](int64_t lo, int64_t opt, int64_t hi) {
    return InputProfileBounds{Dims{1, lo}, Dims{1, opt}, Dims{1, hi}};
  };
  e.desc.profiles = {{"decode", {bounds(1, 1, 1), bounds(1, 1, 1)}},
                     {"prefill", {bounds(1, 16, 32), bounds(1, 16, 32)}}};
  TacticTable table;
  table.device = DeviceKind::kCpu;
  table.device_name = "test-cpu";
  table.library_versions = "gearbox-cpu-tactics v1";
  for (uint32_t p = 0; p < 2; ++p) {
    ProfileTactics pt;
    for (uint32_t i = 0; i < n.nodes.size(); ++i) {
      pt.tactic_per_node.push_back((i + p) % 3);
      pt.time_us_per_node.push_back(0.25f * static_cast<float>(i + 1) + static_cast<float>(p));
    }
    pt.arena_bytes = 4096u << p;
    table.profiles.push_back(pt);
  }
  e.desc.tactic_tables = {table};
  e.desc.metadata = {{"model.aaaa", "tiny"}, {"model.bbbb", "2"}};
  e.desc.producer = "gearbox 0.1.0 (engine_file_test)";
  return e;
}

inline Bytes serialize(const Engine& e) {
  Result<Bytes> bytes = serialize_engine(e.desc, e.payload);
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  return bytes.ok() ? *bytes : Bytes{};
}

}  // namespace gearbox::format
