// cuda_kernels_bench groups `layer` (one decode layer and what each kernel adds to the chain)
// and `stream` (a layer's GEMV bytes streamed over one or several launches).
#include "bench_common.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "devices/cuda/gemm_cublaslt.h"
#include "devices/cuda/host_progress.h"
#include "devices/cuda/kernels/decode_attention.cuh"
#include "devices/cuda/kernels/elementwise.cuh"
#include "devices/cuda/kernels/embedding.cuh"
#include "devices/cuda/kernels/gemv.cuh"
#include "devices/cuda/kernels/kv_cache.cuh"
#include "devices/cuda/kernels/norm_rope.cuh"
#include "devices/cuda/kernels/prefill_attention.cuh"
#include "devices/cuda/kernels/prefill_attention_mma.cuh"
#include "devices/cuda/kernels/residual_norm.cuh"

namespace gearbox::kernel_bench {

// ---- one decode layer, and what each of its kernels costs in the chain ------------------------

/// One decode layer at the 1B shape as the decode graph runs it (norm_add_norm, QKV GEMV,
/// head_norm_rope, split-KV attention at context 128 writing the new row, O GEMV,
/// norm_add_norm, gate/up + GELU GEMV, down GEMV; every weight from DRAM, launched with
/// programmatic dependent launch), then the same chain with one kernel left out: the
/// difference is what that kernel adds to the chain (its own time less what overlaps its
/// neighbours). A sliding layer (window 512: 16 splits combined in a cluster) and a global
/// one (32 splits and a combine kernel), as 5 of 6 and 1 of 6 Gemma-3 layers. "norms in the
/// GEMVs": each norm_add_norm computed by the GEMV after it (cuda::GemvNormInput); "head norm
/// in the attention": head_norm_rope computed by the attention (attention_decode_head_norm);
/// "all fused": both, the chain the engine runs where the QKV GEMV leaves SMs free (the 1B's,
/// 384 blocks, does not: it runs "norms in the GEMVs"). The QKV GEMV at 96 blocks with and
/// without the head norm in the attention weighs that rule.
void bench_layer(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== one decode layer, 1B shape, context 128, and each kernel left out ==\n");
  constexpr int64_t H = 1152, I = 6912, hd = 256, q_heads = 4, qkv_n = (q_heads + 2) * hd, max_ctx = 2048;
  constexpr int64_t qkv_w = qkv_n * H, o_w = H * q_heads * hd, gu_w = 2 * I * H, d_w = H * I;
  constexpr int64_t layer_w = qkv_w + o_w + gu_w + d_w;
  constexpr int kMaxSplitsEngine = 32;  // as the CUDA device launches it
  const int copies = copies_for(layer_w * 2);
  DeviceMemory w(static_cast<size_t>(layer_w * 2) * copies), norms(H * 4 * 2), inv_freq(hd / 2 * 4), pos(8);
  fill_bf16(w.as<__nv_bfloat16>(), layer_w * copies, 11);
  fill_bf16(norms.as<__nv_bfloat16>(), 4 * H, 12);
  std::vector<float> freq;
  for (int64_t i = 0; i < hd / 2; ++i) freq.push_back(std::pow(10000.0f, -2.0f * static_cast<float>(i) / hd));
  CHECK(cudaMemcpy(inv_freq.ptr, freq.data(), freq.size() * 4, cudaMemcpyHostToDevice));
  const int64_t p127 = 127;
  CHECK(cudaMemcpy(pos.ptr, &p127, 8, cudaMemcpyHostToDevice));
  DeviceMemory kc(static_cast<size_t>(max_ctx * hd) * 4), vc(static_cast<size_t>(max_ctx * hd) * 4), h(H * 4),
      res(H * 4), res2(H * 4), xn(H * 4), qkv(qkv_n * 4), qkv_r(qkv_n * 4), attn(q_heads * hd * 4), act(I * 4),
      partials(static_cast<size_t>(cuda::attention_decode_partials_floats(1, q_heads, hd, kMaxSplitsEngine)) * 4);
  fill_f32(kc.as<float>(), max_ctx * hd, 13);
  fill_f32(vc.as<float>(), max_ctx * hd, 14);
  fill_f32(h.as<float>(), H, 15);
  fill_f32(res.as<float>(), H, 16);
  const auto* g = norms.as<__nv_bfloat16>();
  const cuda::HeadNormRope<__nv_bfloat16> parts[3] = {
      {qkv.as<float>(), g, qkv_r.as<float>(), q_heads, 1e4f, 1.0f, inv_freq.as<float>(), qkv_n},
      {qkv.as<float>() + q_heads * hd, g + hd, qkv_r.as<float>() + q_heads * hd, 1, 1e4f, 1.0f, inv_freq.as<float>(),
       qkv_n},
      {qkv.as<float>() + (q_heads + 1) * hd, nullptr, qkv_r.as<float>() + (q_heads + 1) * hd, 1, 0, 0, nullptr, qkv_n}};
  struct Variant {
    const char* name;
    unsigned skip;  // bit k < 8: leave out the layer's k-th kernel; kNormIn*: a GEMV does the norm before it
    // The GEMVs' geometries (the 1B engine's usual picks by default): QKV, O, gate/up, down.
    cuda::GemvGeometry qkv = {2, 2}, o = {2, 2}, gate_up = {2, 8}, down = {2, 2};
  };
  constexpr unsigned kNormInQkv = 1u << 8, kNormInMlp = 1u << 9, kNormsInGemvs = kNormInQkv | kNormInMlp,
                     kHeadNormInAttention = 1u << 10;
  // The chain the engine runs: both norm_add_norms inside the GEMVs after them.
  constexpr unsigned kEngineChain = kNormsInGemvs | 0x21u, kAllFused = kEngineChain | kHeadNormInAttention | 0x4u;
  const Variant variants[] = {{"whole layer", 0},
                              {"without norm_add_norm 1", 1u << 0},
                              {"without QKV", 1u << 1},
                              {"without head_norm_rope", 1u << 2},
                              {"without attention", 1u << 3},
                              {"without O", 1u << 4},
                              {"without norm_add_norm 2", 1u << 5},
                              {"without gate/up", 1u << 6},
                              {"without down", 1u << 7},
                              {"GEMVs only", 0x2du},
                              {"no GEMVs", 0xd2u},
                              {"norms in the GEMVs", kEngineChain},
                              {"norm 1 in the QKV GEMV", kNormInQkv | 0x1u},
                              {"norm 2 in the gate/up GEMV", kNormInMlp | 0x20u},
                              {"head norm in the attention", kHeadNormInAttention | 0x4u},
                              {"all fused", kAllFused},
                              // The engine's chain (norms in the GEMVs) with one GEMV on another geometry:
                              // how much the chain's ranking of geometries differs from each GEMV's alone.
                              {.name = "norms in GEMVs, QKV r4u2", .skip = kEngineChain, .qkv = {4, 2}},
                              {.name = "norms in GEMVs, QKV r2u4", .skip = kEngineChain, .qkv = {2, 4}},
                              {.name = "norms in GEMVs, O r4u2", .skip = kEngineChain, .o = {4, 2}},
                              {.name = "norms in GEMVs, O r8u2", .skip = kEngineChain, .o = {8, 2}},
                              {.name = "norms in GEMVs, gate/up r2u4", .skip = kEngineChain, .gate_up = {2, 4}},
                              {.name = "norms in GEMVs, gate/up r4u2", .skip = kEngineChain, .gate_up = {4, 2}},
                              {.name = "norms in GEMVs, down r4u2", .skip = kEngineChain, .down = {4, 2}},
                              {.name = "norms in GEMVs, down r8u2", .skip = kEngineChain, .down = {8, 2}},
                              {.name = "norms in GEMVs, down r4u4", .skip = kEngineChain, .down = {4, 4}},
                              // A QKV GEMV of 96 blocks (fewer than the SMs), the head norm in the attention or
                              // not: whether the fusion pays for the QKV geometry it needs.
                              {.name = "norms in GEMVs, QKV r2u8", .skip = kEngineChain, .qkv = {2, 8}},
                              {.name = "norms in GEMVs, QKV r4u4", .skip = kEngineChain, .qkv = {4, 4}},
                              {.name = "norms in GEMVs, QKV r8u2", .skip = kEngineChain, .qkv = {8, 2}},
                              {.name = "all fused, QKV r2u8", .skip = kAllFused, .qkv = {2, 8}},
                              {.name = "all fused, QKV r4u4", .skip = kAllFused, .qkv = {4, 4}},
                              {.name = "all fused, QKV r8u2", .skip = kAllFused, .qkv = {8, 2}}};
  const cuda::AttentionHeadNorm<__nv_bfloat16> head_norm{g, g + hd, 1e-6f, 1.0f, 1e4f, 1.0f, inv_freq.as<float>()};
  for (int64_t window : {512, 0}) {
    for (const Variant& v : variants) {
      const auto run = [&](unsigned k) { return (v.skip & (1u << k)) == 0; };
      const bool fused_qkv = (v.skip & kNormInQkv) != 0, fused_mlp = (v.skip & kNormInMlp) != 0;
      // Fused, sum cannot be the residual it reads: the two norms alternate res and res2.
      const cuda::GemvNormInput<__nv_bfloat16> before_qkv{h.as<float>(), g,   res.as<float>(), res2.as<float>(), g + H,
                                                          1e-6f,         1.0f};
      const cuda::GemvNormInput<__nv_bfloat16> before_mlp{
          h.as<float>(), g + 2 * H, res2.as<float>(), res.as<float>(), g + 3 * H, 1e-6f, 1.0f};
      const Timing t = time_launches(stream, copies, [&](int i) {
        const __nv_bfloat16* qkv_wt = w.as<__nv_bfloat16>() + (i % copies) * layer_w;
        const __nv_bfloat16* o_wt = qkv_wt + qkv_w;
        const __nv_bfloat16* gate_wt = o_wt + o_w;
        const __nv_bfloat16* down_wt = gate_wt + gu_w;
        if (run(0)) {
          CHECK(cuda::norm_add_norm(h.as<float>(), g, res.as<float>(), res.as<float>(), g + H, xn.as<float>(), 1, H,
                                    1e-6f, 1.0f, on));
        }
        if (run(1)) {
          const cuda::GemvTarget<__nv_bfloat16> targets[3] = {
              {qkv_wt, nullptr, qkv.as<float>(), q_heads * hd},
              {qkv_wt + q_heads * hd * H, nullptr, qkv.as<float>() + q_heads * hd, hd},
              {qkv_wt + (q_heads + 1) * hd * H, nullptr, qkv.as<float>() + (q_heads + 1) * hd, hd}};
          CHECK(cuda::gemv_multi<__nv_bfloat16>(xn.as<float>(), targets, 3, 1, H, on, v.qkv, 0,
                                                fused_qkv ? &before_qkv : nullptr));
        }
        if (run(2)) CHECK(cuda::head_norm_rope(parts, 3, pos.ptr, true, 1, hd, 1e-6f, 1.0f, nullptr, on));
        if (run(3) && (v.skip & kHeadNormInAttention) != 0) {
          CHECK(cuda::attention_decode_head_norm<__nv_bfloat16>(
              qkv.as<float>(), qkv.as<float>() + q_heads * hd, qkv.as<float>() + (q_heads + 1) * hd, kc.as<float>(),
              vc.as<float>(), pos.ptr, true, attn.as<float>(), q_heads, 1, hd, max_ctx, window, 0.0625f, head_norm,
              partials.as<float>(), kMaxSplitsEngine, nullptr, on, /*positions_from_host=*/true));
        } else if (run(3)) {
          CHECK(cuda::attention_decode(qkv_r.as<float>(), qkv_r.as<float>() + q_heads * hd,
                                       qkv_r.as<float>() + (q_heads + 1) * hd, kc.as<float>(), vc.as<float>(), pos.ptr,
                                       true, attn.as<float>(), 1, q_heads, 1, hd, max_ctx, window, 0.0625f,
                                       partials.as<float>(), kMaxSplitsEngine, nullptr, on,
                                       /*positions_from_host=*/true));
        }
        if (run(4)) {
          CHECK(cuda::gemv<__nv_bfloat16>(attn.as<float>(), o_wt, nullptr, h.as<float>(), 1, H, q_heads * hd, on, v.o));
        }
        if (run(5)) {
          CHECK(cuda::norm_add_norm(h.as<float>(), g + 2 * H, res.as<float>(), res.as<float>(), g + 3 * H,
                                    xn.as<float>(), 1, H, 1e-6f, 1.0f, on));
        }
        if (run(6)) {
          CHECK(cuda::gemv_gated<__nv_bfloat16>(xn.as<float>(), gate_wt, gate_wt + I * H, nullptr, nullptr,
                                                cuda::GatedActivation::kGeluTanh, act.as<float>(), 1, I, H, on,
                                                v.gate_up, 0, fused_mlp ? &before_mlp : nullptr));
        }
        if (run(7)) {
          CHECK(cuda::gemv<__nv_bfloat16>(act.as<float>(), down_wt, nullptr, h.as<float>(), 1, H, I, on, v.down));
        }
      });
      print(std::string(window > 0 ? "sliding layer, " : "global layer, ") + v.name, t, layer_w * 2.0, 1e3, "GB/s");
    }
  }
}

/// A decode layer's GEMV bytes (53.7 MB: four matrices of K = 1152 whose sizes are the 1B
/// layer's QKV, O, gate/up and down) streamed three ways, with no data flowing between them:
/// four launches (each waiting for the one before it, as PDL launches do), one gemv_multi
/// launch over the four (one resident grid streams them back to back), and one launch over a
/// single matrix of all their rows. What kernel boundaries cost the weight stream apart from
/// the data they wait for.
void bench_stream(const cuda::Launch& on) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== a decode layer's GEMV bytes (53.7 MB, K = 1152): 4 launches, 1 multi-target launch, 1 matrix ==\n");
  constexpr int64_t K = 1152;
  constexpr int64_t kRows[4] = {1536, 1024, 13824, 6912};  // the bytes of QKV, O, gate + up, down
  constexpr int64_t total = kRows[0] + kRows[1] + kRows[2] + kRows[3];
  const int copies = copies_for(total * K * 2);
  DeviceMemory w(static_cast<size_t>(total * K * 2) * copies), x(static_cast<size_t>(K) * 4),
      y(static_cast<size_t>(total) * 4);
  fill_bf16(w.as<__nv_bfloat16>(), total * K * copies, 31);
  fill_f32(x.as<float>(), K, 32);
  const double bytes = static_cast<double>(total * K * 2);
  const auto base = [&](int i) { return w.as<__nv_bfloat16>() + (i % copies) * total * K; };  // copy i
  for (const cuda::GemvGeometry g : {cuda::GemvGeometry{2, 2}, cuda::GemvGeometry{2, 8}, cuda::GemvGeometry{4, 2}}) {
    const Timing four = time_launches(stream, copies, [&](int i) {
      int64_t row = 0;
      for (const int64_t n : kRows) {
        CHECK(
            cuda::gemv<__nv_bfloat16>(x.as<float>(), base(i) + row * K, nullptr, y.as<float>() + row, 1, n, K, on, g));
        row += n;
      }
    });
    print("4 launches " + geometry_name(g), four, bytes, 1e3, "GB/s");
    const Timing multi = time_launches(stream, copies, [&](int i) {
      cuda::GemvTarget<__nv_bfloat16> targets[4];
      int64_t row = 0;
      for (int j = 0; j < 4; ++j) {
        targets[j] = {base(i) + row * K, nullptr, y.as<float>() + row, kRows[j]};
        row += kRows[j];
      }
      CHECK(cuda::gemv_multi<__nv_bfloat16>(x.as<float>(), targets, 4, 1, K, on, g));
    });
    print("1 launch, 4 targets " + geometry_name(g), multi, bytes, 1e3, "GB/s");
    const Timing one = time_launches(stream, copies, [&](int i) {
      CHECK(cuda::gemv<__nv_bfloat16>(x.as<float>(), base(i), nullptr, y.as<float>(), 1, total, K, on, g));
    });
    print("1 launch, 1 matrix " + geometry_name(g), one, bytes, 1e3, "GB/s");
  }
}

}  // namespace gearbox::kernel_bench
