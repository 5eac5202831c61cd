// A plain double-precision Gemma-3 forward pass over a BuiltModel's weights, written
// straight from the formulas (no KV cache, no gearbox kernels): the oracle for the
// engine's end-to-end tests.
#pragma once

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/half.h"
#include "models/gemma3.h"

namespace gearbox::testing {

class GemmaReference {
 public:
  GemmaReference(const models::Gemma3Config& c, const models::BuiltModel& m) : c_(c) {
    for (const ir::WeightInfo& w : m.network.weights) {
      std::vector<double> v(static_cast<size_t>(w.dims.volume()));
      const uint8_t* src = m.payload.data() + w.offset;
      for (size_t i = 0; i < v.size(); ++i) {
        if (w.dtype == DataType::kF32) {
          float f;
          std::memcpy(&f, src + 4 * i, 4);
          v[i] = f;
        } else {
          uint16_t h;
          std::memcpy(&h, src + 2 * i, 2);
          v[i] = w.dtype == DataType::kBF16 ? internal::bf16_to_f32(h) : internal::f16_to_f32(h);
        }
      }
      w_[w.name] = std::move(v);
    }
  }

  /// Logits [T][vocab] for tokens at positions 0..T-1.
  std::vector<std::vector<double>> forward(const std::vector<int64_t>& tokens) const {
    const size_t T = tokens.size(), H = static_cast<size_t>(c_.hidden), hd = static_cast<size_t>(c_.head_dim);
    const size_t nh = static_cast<size_t>(c_.heads), nkv = static_cast<size_t>(c_.kv_heads);
    const double emb_scale = embed_scale();
    std::vector<std::vector<double>> h(T, std::vector<double>(H));
    const auto& E = w("model.embed_tokens.weight");
    for (size_t t = 0; t < T; ++t)
      for (size_t j = 0; j < H; ++j) h[t][j] = E[static_cast<size_t>(tokens[t]) * H + j] * emb_scale;

    for (int64_t layer = 0; layer < c_.layers; ++layer) {
      const std::string p = "model.layers." + std::to_string(layer) + ".";
      const bool sliding = c_.layer_is_sliding[static_cast<size_t>(layer)];
      const double theta = sliding ? c_.rope_theta_local : c_.rope_theta_global;
      std::vector<std::vector<double>> q(T), k(T), v(T), attn(T, std::vector<double>(nh * hd));
      for (size_t t = 0; t < T; ++t) {
        const auto x = norm(h[t], w(p + "input_layernorm.weight"));
        q[t] = linear(x, w(p + "self_attn.q_proj.weight"), nh * hd);
        k[t] = linear(x, w(p + "self_attn.k_proj.weight"), nkv * hd);
        v[t] = linear(x, w(p + "self_attn.v_proj.weight"), nkv * hd);
        for (size_t head = 0; head < nh; ++head) head_norm_rope(q[t], head, w(p + "self_attn.q_norm.weight"), t, theta);
        for (size_t head = 0; head < nkv; ++head)
          head_norm_rope(k[t], head, w(p + "self_attn.k_norm.weight"), t, theta);
      }
      const double scale = 1.0 / std::sqrt(static_cast<double>(c_.query_pre_attn_scalar));
      for (size_t t = 0; t < T; ++t) {
        for (size_t head = 0; head < nh; ++head) {
          const size_t kvh = head / (nh / nkv);
          std::vector<double> s;
          std::vector<size_t> js;
          for (size_t j = 0; j <= t; ++j) {
            if (sliding && static_cast<int64_t>(t) - static_cast<int64_t>(j) >= c_.sliding_window) continue;
            double dot = 0;
            for (size_t d = 0; d < hd; ++d) dot += q[t][head * hd + d] * k[j][kvh * hd + d];
            s.push_back(dot * scale);
            js.push_back(j);
          }
          double mx = -1e300, sum = 0;
          for (double x : s) mx = std::max(mx, x);
          for (double& x : s) sum += (x = std::exp(x - mx));
          for (size_t i = 0; i < s.size(); ++i)
            for (size_t d = 0; d < hd; ++d) attn[t][head * hd + d] += s[i] / sum * v[js[i]][kvh * hd + d];
        }
        const auto o =
            norm(linear(attn[t], w(p + "self_attn.o_proj.weight"), H), w(p + "post_attention_layernorm.weight"));
        for (size_t j = 0; j < H; ++j) h[t][j] += o[j];
        const auto x = norm(h[t], w(p + "pre_feedforward_layernorm.weight"));
        const size_t I = static_cast<size_t>(c_.intermediate);
        auto g = linear(x, w(p + "mlp.gate_proj.weight"), I);
        const auto u = linear(x, w(p + "mlp.up_proj.weight"), I);
        for (size_t i = 0; i < I; ++i) {
          const double a = g[i];
          g[i] = 0.5 * a * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a))) * u[i];
        }
        const auto d = norm(linear(g, w(p + "mlp.down_proj.weight"), H), w(p + "post_feedforward_layernorm.weight"));
        for (size_t j = 0; j < H; ++j) h[t][j] += d[j];
      }
    }
    std::vector<std::vector<double>> logits(T);
    const auto& head = c_.tie_embeddings ? E : w("lm_head.weight");
    for (size_t t = 0; t < T; ++t)
      logits[t] = linear(norm(h[t], w("model.norm.weight")), head, static_cast<size_t>(c_.vocab));
    return logits;
  }

 private:
  const std::vector<double>& w(const std::string& name) const { return w_.at(name); }

  double embed_scale() const {
    const float s = std::sqrt(static_cast<float>(c_.hidden));
    if (c_.dtype == DataType::kBF16) return internal::bf16_to_f32(internal::f32_to_bf16(s));
    if (c_.dtype == DataType::kF16) return internal::f16_to_f32(internal::f32_to_f16(s));
    return s;
  }

  std::vector<double> norm(const std::vector<double>& x, const std::vector<double>& weight) const {
    double ms = 0;
    for (double v : x) ms += v * v;
    const double r = 1.0 / std::sqrt(ms / static_cast<double>(x.size()) + c_.rms_norm_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * (1.0 + weight[i]);
    return y;
  }

  static std::vector<double> linear(const std::vector<double>& x, const std::vector<double>& W, size_t out) {
    std::vector<double> y(out);
    for (size_t n = 0; n < out; ++n) {
      double acc = 0;
      for (size_t k = 0; k < x.size(); ++k) acc += W[n * x.size() + k] * x[k];
      y[n] = acc;
    }
    return y;
  }

  void head_norm_rope(std::vector<double>& x, size_t head, const std::vector<double>& weight, size_t pos,
                      double theta) const {
    const size_t hd = static_cast<size_t>(c_.head_dim), half = hd / 2;
    std::vector<double> chunk(x.begin() + static_cast<ptrdiff_t>(head * hd),
                              x.begin() + static_cast<ptrdiff_t>((head + 1) * hd));
    chunk = norm(chunk, weight);
    for (size_t i = 0; i < half; ++i) {
      const double angle =
          static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
      const double a = chunk[i], b = chunk[i + half];
      x[head * hd + i] = a * std::cos(angle) - b * std::sin(angle);
      x[head * hd + i + half] = b * std::cos(angle) + a * std::sin(angle);
    }
  }

  models::Gemma3Config c_;
  std::map<std::string, std::vector<double>> w_;
};

}  // namespace gearbox::testing
