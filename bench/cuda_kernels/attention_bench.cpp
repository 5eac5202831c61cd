// cuda_kernels_bench groups `attention` (decode) and `prefill` (tiled and tensor-core), at the
// attention cases of the case table marked for timing.
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

// ---- attention decode ---------------------------------------------------------------------------

namespace {

using kernel_cases::AttentionCase;

/// 1 / sqrt(head_dim), the attention's score scale.
float score_scale(const AttentionCase& c) { return 1.0f / std::sqrt(static_cast<float>(c.head_dim)); }

void bench_attention_case(const cuda::Launch& on, const AttentionCase& c) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== attention_decode, heads %lld, kv_heads %lld, head_dim %lld, T = 1 (bytes: K + V rows read) ==\n",
              static_cast<long long>(c.heads), static_cast<long long>(c.kv_heads), static_cast<long long>(c.head_dim));
  const int64_t heads = c.heads, kv_heads = c.kv_heads, hd = c.head_dim, max_ctx = 4096;
  const int64_t window = c.window;
  const float scale = score_scale(c);
  const int64_t width = kv_heads * hd;
  // One pool per cache; launch i reads the rows [0, ctx) of a cache starting at row i * ctx
  // of the pool, so consecutive launches read disjoint memory.
  const int64_t pool_floats = kRotateBytes / 4 + max_ctx * width;
  DeviceMemory kc(static_cast<size_t>(pool_floats) * 4), vc(static_cast<size_t>(pool_floats) * 4);
  fill_f32(kc.as<float>(), pool_floats, 5);
  fill_f32(vc.as<float>(), pool_floats, 6);
  DeviceMemory q(static_cast<size_t>(heads * hd) * 4), out(static_cast<size_t>(heads * hd) * 4), pos(sizeof(int32_t));
  fill_f32(q.as<float>(), heads * hd, 7);
  // The query at position ctx - 1: the caches the pool holds for ctx rows (the launches
  // rotate over them) and the K + V bytes one launch reads.
  struct AtContext {
    int copies;
    double bytes;
  };
  const auto at_context = [&](int32_t ctx) {
    const int32_t p = ctx - 1;
    CHECK(cudaMemcpy(pos.ptr, &p, sizeof(p), cudaMemcpyHostToDevice));
    return AtContext{static_cast<int>(std::min<int64_t>(512, (pool_floats - max_ctx * width) / (ctx * width))),
                     2.0 * static_cast<double>(ctx * width) * 4};
  };
  // 8 and 16 splits combine in a cluster (one launch), 32 and 128 in a second kernel (the
  // 4096-key range takes the splits max_splits allows); each with the query heads a block
  // serves chosen by the launcher ("auto") and set (hpb=).
  const int64_t group = heads / kv_heads;
  for (int max_splits : {8, 16, 32, 128}) {
    DeviceMemory partials(static_cast<size_t>(cuda::attention_decode_partials_floats(1, heads, hd, max_splits)) * 4);
    for (int32_t ctx : {128, 1024, 2048, 4096}) {
      const AtContext at = at_context(ctx);
      for (int hpb : {0, 1, 2, 4, 8}) {
        if (hpb > group || (hpb > 0 && group % hpb != 0) || (max_splits == 128 && hpb > 0)) continue;
        const Timing t = time_launches(stream, at.copies, [&](int i) {
          const int64_t off = (i % at.copies) * ctx * width;
          CHECK(cuda::attention_decode(q.as<float>(), nullptr, nullptr, kc.as<float>() + off, vc.as<float>() + off,
                                       pos.ptr, false, out.as<float>(), 1, heads, kv_heads, hd, max_ctx, window, scale,
                                       partials.as<float>(), max_splits, nullptr, on, false, {}, hpb));
        });
        const cuda::DecodeGrid grid =
            cuda::attention_decode_grid(1, heads, kv_heads, max_ctx, window, max_splits, on.limits->sm_count, hpb);
        print("decode ctx=" + std::to_string(ctx) + " max_splits=" + std::to_string(max_splits) + " (splits " +
                  std::to_string(grid.splits) + ", hpb " + std::to_string(grid.heads_per_block) + ")" +
                  (hpb == 0 ? " auto" : ""),
              t, at.bytes, 1e3, "GB/s");
      }
    }
  }
  // One query on the tensor-core attention (the prefill's kernels at T = 1: K / V rows to
  // bf16, the attention, the combine), the other tactic the builder times for a decode step.
  {
    DeviceMemory scratch(static_cast<size_t>(std::max<int64_t>(1, cuda::attention_prefill_mma_scratch_floats(
                                                                      1, heads, kv_heads, hd, max_ctx, *on.limits))) *
                         4);
    for (int32_t ctx : {128, 1024, 2048}) {
      const AtContext at = at_context(ctx);
      const Timing t = time_launches(stream, at.copies, [&](int i) {
        const int64_t off = (i % at.copies) * ctx * width;
        CHECK(cuda::attention_prefill_mma(q.as<float>(), nullptr, nullptr, kc.as<float>() + off, vc.as<float>() + off,
                                          pos.ptr, false, out.as<float>(), 1, heads, kv_heads, hd, max_ctx, window,
                                          scale, scratch.as<float>(), nullptr, on));
      });
      print("decode ctx=" + std::to_string(ctx) + " mma_bf16", t, at.bytes, 1e3, "GB/s");
    }
  }
  // A batched decode: `rows` queries, each in its own KV-cache slot of kSlotCtx rows at
  // position ctx - 1, under max_splits from 1 up (the splits attention_decode_grid picks
  // in brackets): how many splits many rows want.
  constexpr int64_t kSlotCtx = 2048;
  for (int64_t rows : {8, 32}) {
    const int64_t cache_floats = rows * kSlotCtx * width;
    DeviceMemory skc(static_cast<size_t>(cache_floats) * 4), svc(static_cast<size_t>(cache_floats) * 4);
    fill_f32(skc.as<float>(), cache_floats, 14);
    fill_f32(svc.as<float>(), cache_floats, 15);
    DeviceMemory sq(static_cast<size_t>(rows * heads * hd) * 4), sout(static_cast<size_t>(rows * heads * hd) * 4);
    fill_f32(sq.as<float>(), rows * heads * hd, 16);
    std::vector<int32_t> slot_ids(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) slot_ids[static_cast<size_t>(r)] = static_cast<int32_t>(r);
    DeviceMemory d_slots(slot_ids.size() * sizeof(int32_t)), d_pos(slot_ids.size() * sizeof(int32_t));
    CHECK(cudaMemcpy(d_slots.ptr, slot_ids.data(), slot_ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    const cuda::CacheSlots slots{d_slots.ptr, false, 1};
    DeviceMemory partials(static_cast<size_t>(cuda::attention_decode_partials_floats(rows, heads, hd, 32)) * 4);
    for (int32_t ctx : {128, 1024}) {
      const std::vector<int32_t> positions(static_cast<size_t>(rows), ctx - 1);
      CHECK(cudaMemcpy(d_pos.ptr, positions.data(), positions.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
      for (int max_splits : {1, 4, 8, 16, 32}) {
        const Timing t = time_launches(stream, 1, [&](int) {
          CHECK(cuda::attention_decode(sq.as<float>(), nullptr, nullptr, skc.as<float>(), svc.as<float>(), d_pos.ptr,
                                       false, sout.as<float>(), rows, heads, kv_heads, hd, kSlotCtx, window, scale,
                                       partials.as<float>(), max_splits, nullptr, on, false, slots));
        });
        const int splits =
            cuda::attention_decode_grid(rows, heads, kv_heads, kSlotCtx, window, max_splits, on.limits->sm_count)
                .splits;
        print("decode rows=" + std::to_string(rows) + " ctx=" + std::to_string(ctx) +
                  " in slots, max_splits=" + std::to_string(max_splits) + " (splits " + std::to_string(splits) + ")",
              t, 2.0 * static_cast<double>(rows * ctx * width) * 4, 1e3, "GB/s");
      }
    }
  }
  // The decode step's new K / V row: written by kv_cache_write before the attention, or by the
  // attention kernel itself (k_new / v_new), with 16 splits (one cluster where sm_90 runs).
  DeviceMemory k_new(static_cast<size_t>(width) * 4), v_new(static_cast<size_t>(width) * 4);
  fill_f32(k_new.as<float>(), width, 8);
  fill_f32(v_new.as<float>(), width, 9);
  DeviceMemory partials(static_cast<size_t>(cuda::attention_decode_partials_floats(1, heads, hd, 16)) * 4);
  for (int32_t ctx : {128, 1024}) {
    const AtContext at = at_context(ctx);
    for (bool fused : {false, true}) {
      const Timing t = time_launches(stream, at.copies, [&](int i) {
        float* kcache = kc.as<float>() + (i % at.copies) * ctx * width;
        float* vcache = vc.as<float>() + (i % at.copies) * ctx * width;
        if (!fused) {
          CHECK(cuda::kv_cache_write(k_new.as<float>(), v_new.as<float>(), pos.ptr, false, 1, width, kcache, vcache,
                                     max_ctx, nullptr, on));
        }
        CHECK(cuda::attention_decode(q.as<float>(), fused ? k_new.as<float>() : nullptr,
                                     fused ? v_new.as<float>() : nullptr, kcache, vcache, pos.ptr, false,
                                     out.as<float>(), 1, heads, kv_heads, hd, max_ctx, window, scale,
                                     partials.as<float>(), 16, nullptr, on));
      });
      print(std::string(fused ? "decode + new row, fused" : "kv_cache_write + decode") + " ctx=" + std::to_string(ctx) +
                " (splits 16)",
            t, at.bytes, 1e3, "GB/s");
    }
  }
}

// ---- attention prefill ------------------------------------------------------------------------------

void bench_attention_prefill_case(const cuda::Launch& on, const AttentionCase& c) {
  const cudaStream_t stream = on.stream;
  std::printf("\n== attention_prefill, heads %lld, kv_heads %lld, head_dim %lld, causal (FLOP: QK^T and PV) ==\n",
              static_cast<long long>(c.heads), static_cast<long long>(c.kv_heads), static_cast<long long>(c.head_dim));
  const int64_t heads = c.heads, kv_heads = c.kv_heads, hd = c.head_dim, max_ctx = 2048;
  const int64_t window = c.window;
  const float scale = score_scale(c);
  const int64_t width = kv_heads * hd;
  DeviceMemory kc(static_cast<size_t>(max_ctx * width) * 4), vc(static_cast<size_t>(max_ctx * width) * 4);
  fill_f32(kc.as<float>(), max_ctx * width, 11);
  fill_f32(vc.as<float>(), max_ctx * width, 12);
  for (int64_t T : {128, 512, 2048}) {
    DeviceMemory q(static_cast<size_t>(T * heads * hd) * 4), out(static_cast<size_t>(T * heads * hd) * 4);
    fill_f32(q.as<float>(), T * heads * hd, 13);
    std::vector<int32_t> positions(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) positions[static_cast<size_t>(t)] = static_cast<int32_t>(t);
    DeviceMemory pos(positions.size() * sizeof(int32_t));
    CHECK(cudaMemcpy(pos.ptr, positions.data(), positions.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    DeviceMemory scratch(
        static_cast<size_t>(std::max<int64_t>(
            1, std::max(cuda::attention_prefill_scratch_floats(T, heads, hd, *on.limits),
                        cuda::attention_prefill_mma_scratch_floats(T, heads, kv_heads, hd, max_ctx, *on.limits)))) *
        4);
    const auto tokens = static_cast<double>(T);
    const double flop = 2.0 * 2.0 * static_cast<double>(heads * hd) * (tokens * (tokens + 1) / 2);
    const Timing tiled = time_launches(stream, 1, [&](int) {
      CHECK(cuda::attention_prefill(q.as<float>(), kc.as<float>(), vc.as<float>(), pos.ptr, false, out.as<float>(), T,
                                    heads, kv_heads, hd, max_ctx, window, scale, scratch.as<float>(), on));
    });
    print("prefill tiled T=" + std::to_string(T) + " (splits " +
              std::to_string(cuda::attention_prefill_splits(T, heads, *on.limits)) + ")",
          tiled, flop, 1e6, "TFLOP/s");
    const Timing mma = time_launches(stream, 1, [&](int) {
      CHECK(cuda::attention_prefill_mma(q.as<float>(), nullptr, nullptr, kc.as<float>(), vc.as<float>(), pos.ptr, false,
                                        out.as<float>(), T, heads, kv_heads, hd, max_ctx, window, scale,
                                        scratch.as<float>(), nullptr, on));
    });
    print("prefill mma_bf16 T=" + std::to_string(T) + " (splits " +
              std::to_string(cuda::attention_prefill_mma_splits(T, heads, *on.limits)) + ")",
          mma, flop, 1e6, "TFLOP/s");
    // The prefill step as the engine runs it: the call's rows written to the caches (here
    // from q's first T rows) by the kernel that converts the rows to bf16.
    const Timing mma_write = time_launches(stream, 1, [&](int) {
      CHECK(cuda::attention_prefill_mma(q.as<float>(), q.as<float>(), q.as<float>(), kc.as<float>(), vc.as<float>(),
                                        pos.ptr, false, out.as<float>(), T, heads, kv_heads, hd, max_ctx, window, scale,
                                        scratch.as<float>(), nullptr, on));
    });
    print("prefill mma_bf16 + cache write T=" + std::to_string(T), mma_write, flop, 1e6, "TFLOP/s");
    const Timing write_then_mma = time_launches(stream, 1, [&](int) {
      CHECK(cuda::kv_cache_write(q.as<float>(), q.as<float>(), pos.ptr, false, T, width, kc.as<float>(), vc.as<float>(),
                                 max_ctx, nullptr, on));
      CHECK(cuda::attention_prefill_mma(q.as<float>(), nullptr, nullptr, kc.as<float>(), vc.as<float>(), pos.ptr, false,
                                        out.as<float>(), T, heads, kv_heads, hd, max_ctx, window, scale,
                                        scratch.as<float>(), nullptr, on));
    });
    print("kv_cache_write, then prefill mma_bf16 T=" + std::to_string(T), write_then_mma, flop, 1e6, "TFLOP/s");
  }
}

}  // namespace

void bench_attention(const cuda::Launch& on) {
  for (const AttentionCase& c : timed_attention_cases()) bench_attention_case(on, c);
}

void bench_attention_prefill(const cuda::Launch& on) {
  for (const AttentionCase& c : timed_attention_cases()) bench_attention_prefill_case(on, c);
}

}  // namespace gearbox::kernel_bench
