// The whole-step decode kernel (decode_layers.h): design notes there. Layout of a block:
// warps 0-7 consume (norms, attention, dot products), warp 8 lane 0 produces (bulk copies
// of weight tiles). Shared memory: [mbarriers][ring of stages][x vector][small arrays].
#include <math_constants.h>

#include <algorithm>
#include <cstdint>

#include "devices/cuda/decode_layers.h"
#include "devices/cuda/device_math.h"
#include "devices/cuda/residual_norm.h"

namespace gearbox::cuda {
namespace {

constexpr int kConsumerWarps = 8;
constexpr int kConsumers = 32 * kConsumerWarps;
constexpr int kThreads = kConsumers + 32;  // + the producer warp
constexpr int kMaxGroup = 4;               // query heads per KV head
constexpr int kMaxHeadDim = 256;
constexpr int kMaxSplits = 16;  // key splits per KV head and layer
constexpr int kMinStageBytes = 32 * 1024;
constexpr int kMaxStages = 8;

/// Float offsets of the workspace's parts; the barrier counters come first.
struct Workspace {
  int64_t res_a, res_b, q, k, v, o, m, d, part_acc, part_m, part_l, total;
};
__host__ __device__ inline int64_t round4(int64_t n) { return (n + 3) / 4 * 4; }
__host__ __device__ inline int64_t take(int64_t* at, int64_t n) {
  const int64_t here = *at;
  *at += round4(n);
  return here;
}
__host__ __device__ inline Workspace workspace_layout(const DecodeLayersShape& s) {
  Workspace w{};
  int64_t at = 32;  // two unsigned counters, padded to 128 bytes
  const int64_t qd = static_cast<int64_t>(s.heads) * s.head_dim, kvd = static_cast<int64_t>(s.kv_heads) * s.head_dim;
  w.res_a = take(&at, s.hidden);
  w.res_b = take(&at, s.hidden);
  w.q = take(&at, qd);
  w.k = take(&at, kvd);
  w.v = take(&at, kvd);
  w.o = take(&at, s.hidden);
  w.m = take(&at, s.intermediate);
  w.d = take(&at, s.hidden);
  w.part_acc = take(&at, kMaxSplits * qd);
  w.part_m = take(&at, static_cast<int64_t>(kMaxSplits) * s.heads);
  w.part_l = take(&at, static_cast<int64_t>(kMaxSplits) * s.heads);
  w.total = at;
  return w;
}

/// Small shared arrays after the x vector (floats): the block sums' partials, then the
/// attention merge's per-warp maxima and sums or the split combine's weights.
__host__ __device__ inline int misc_floats(int heads) {
  const int merge = 2 * kConsumerWarps * kMaxGroup, weights = heads * (3 * kMaxSplits + 1);
  return static_cast<int>(round4(16 + (merge > weights ? merge : weights)));
}

/// The x vector's floats: the GEMV inputs; the residual norms' delta and residual; the
/// attention's q heads, k, v and its merge buffer of four warps' outputs.
inline int x_floats_for(const DecodeLayersShape& s) {
  const int64_t qd = static_cast<int64_t>(s.heads) * s.head_dim;
  const int64_t group = s.heads / s.kv_heads;
  const int64_t most = std::max(
      {2 * static_cast<int64_t>(s.hidden), static_cast<int64_t>(s.intermediate), qd, (6 * group + 2) * s.head_dim});
  return static_cast<int>(round4(most));
}
/// Bytes of the norm-weight stages after the small arrays: two row norms' weights (the pair
/// a residual norm reads), then a layer's q norm, k norm and RoPE frequencies.
__host__ __device__ inline int row_norms_bytes(const DecodeLayersShape& s) {
  return (2 * s.hidden * s.weight_bytes + 15) / 16 * 16;
}
__host__ __device__ inline int head_norms_bytes(const DecodeLayersShape& s) {
  return 2 * s.head_dim * s.weight_bytes + s.head_dim / 2 * static_cast<int>(sizeof(float));
}
/// Then two layer descriptors (layer l's at l % 2, the next staged while l runs).
constexpr int kLayerStageBytes = 2 * static_cast<int>(sizeof(DecodeLayer<__half>));
static_assert(sizeof(DecodeLayer<__half>) % 16 == 0 &&
                  sizeof(DecodeLayer<__nv_bfloat16>) == sizeof(DecodeLayer<__half>),
              "layer descriptors are staged in 16-byte pieces");

template <typename W>
struct Params {
  const DecodeLayer<W>* layers;
  DecodeLayersShape s;
  const float* h_in;
  const void* positions;
  bool pos_i64;
  float* h_out;
  float* ws;
  int* error_flag;
  int stages;
  int stage_bytes;
  int x_floats;
  uint64_t* trace;  // nullable: block 0's phase boundaries (decode_layers_trace_marks)
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

constexpr int kSlots = kMaxHeadDim / 32;  // head_dim values per lane
constexpr int kMinKeysPerSplit = 16;

/// Block 0's phase boundaries for the kernel bench (Params::trace): thread 0 writes the
/// %globaltimer at each mark() when the trace is on.
struct Tracer {
  uint64_t* at = nullptr;
  int marks = 0;
  __device__ __forceinline__ void mark();
};

// ---- synchronization primitives -----------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (done == 0) {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
  }
}
/// bytes of global memory at src into shared memory at dst, completing on bar; read once, so
/// first in line for eviction from L2.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::
          "r"(shared_address(dst)),
      "l"(src), "r"(bytes), "r"(shared_address(bar)), "l"(policy)
      : "memory");
}

/// The consumer warps only (the producer never joins): named barrier 1.
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory"); }

__device__ __forceinline__ void Tracer::mark() {
  if (at != nullptr) at[marks++] = global_ns();
}

/// Every consumer of every block arrives before any leaves. Writes before it are visible to
/// loads after it in any block (the block barrier, then thread 0's release-add and its
/// acquire-loads of the counter, then the block barrier: the release is cumulative over the
/// block's writes ordered before it), provided those loads do not hit a stale L1 line: data
/// written inside the kernel is read with ld.global.cg (L2) only.
__device__ __forceinline__ void grid_barrier(unsigned* counter, unsigned* target, int* error_flag) {
  consumers_sync();
  if (threadIdx.x == 0) {
    *target += gridDim.x;
    release_add_one(counter);
    const uint64_t start = global_ns();
    while (load_acquire(counter) < *target) {
      if (global_ns() - start > 1000000000ull) {  // a second: never in a correct run
        if (error_flag != nullptr) atomicExch(error_flag, 2);
        break;
      }
    }
  }
  consumers_sync();
}

__device__ __forceinline__ float ld(const float* p) { return __ldcg(p); }

/// Sum over the 256 consumer threads, the same on every thread (fixed order: deterministic).
__device__ __forceinline__ float consumers_sum(float v, float* red) {
  v = warp_sum(v);
  const int tid = static_cast<int>(threadIdx.x);
  if (tid % 32 == 0) red[tid / 32] = v;
  consumers_sync();
  float s = 0.0f;
#pragma unroll
  for (int w = 0; w < kConsumerWarps; ++w) s += red[w];
  consumers_sync();  // red is reused by the next sum
  return s;
}

// ---- the norms around a sublayer, into the x vector ---------------------------------------------
// The norms' weights are in shared memory (stage_async, issued a phase ahead); their inputs
// are loaded as float4, all of a thread's loads in flight at once for rows of up to 4096.

constexpr int kNormBatch = 4;  // float4 per thread and batch

/// bytes (a multiple of 16) of global memory at src into shared memory at dst, by the
/// consumers, asynchronously: complete for the block after cp_async_wait_all and a barrier.
__device__ __forceinline__ void stage_async(void* dst, const void* src, int bytes) {
  for (int i = static_cast<int>(threadIdx.x) * 16; i < bytes; i += kConsumers * 16) {
    cp_async_16(static_cast<char*>(dst) + i, static_cast<const char*>(src) + i);
  }
}

__device__ __forceinline__ float4 ld4(const float* p) { return __ldcg(reinterpret_cast<const float4*>(p)); }

/// x_s = rms_norm(in, w) (the first layer's input norm).
template <typename W>
__device__ void input_norm(const float* in, const W* w, float* x_s, int dim, float eps, float offset, float* red) {
  const int tid = static_cast<int>(threadIdx.x), n4 = dim / 4;
  float squares = 0.0f;
  for (int c = tid; c < n4; c += kConsumers) {
    const float4 v = ld4(in + 4 * c);
    put4(x_s + 4 * c, v);
    squares += squares4(v);
  }
  const float inv = inverse_rms(consumers_sum(squares, red), dim, eps);
  for (int c = tid; c < n4; c += kConsumers) put4(x_s + 4 * c, scale4(get4(x_s + 4 * c), inv, w + 4 * c, offset));
}

/// sum = residual + rms_norm(delta, w_post), stored to sum_out when not null; then
/// x_s = rms_norm(sum, w_next), or x_s = sum when w_next is null. Each element is handled
/// by one thread throughout (norm_add_norm's order of operations). x_s[dim, 2 dim) holds the
/// residual meanwhile.
template <typename W>
__device__ void residual_norm(const float* delta, const W* w_post, const float* residual, float* sum_out,
                              const W* w_next, float* x_s, int dim, float eps, float offset, float* red) {
  const int tid = static_cast<int>(threadIdx.x), n4 = dim / 4;
  float* r_s = x_s + dim;
  float squares = 0.0f;
  for (int base = tid; base < n4; base += kConsumers * kNormBatch) {
    float4 v[kNormBatch], r[kNormBatch];
#pragma unroll
    for (int j = 0; j < kNormBatch; ++j) {
      const int c = base + j * kConsumers;
      if (c < n4) {
        v[j] = ld4(delta + 4 * c);
        r[j] = ld4(residual + 4 * c);
      }
    }
#pragma unroll
    for (int j = 0; j < kNormBatch; ++j) {
      const int c = base + j * kConsumers;
      if (c < n4) {
        put4(x_s + 4 * c, v[j]);
        put4(r_s + 4 * c, r[j]);
        squares += squares4(v[j]);
      }
    }
  }
  residual_norm_staged(x_s, r_s, w_post, w_next, sum_out, dim, eps, offset, tid, kConsumers, squares,
                       [red](float v) { return consumers_sum(v, red); });
}

// ---- weight tiles ---------------------------------------------------------------------------------

/// One GEMV phase's matrices: up to three (q, k, v) whose rows are numbered one after
/// another, each row K elements; gated: gate and up, a tile holding rows [r, r + n) of gate
/// then the same rows of up.
template <typename W>
struct Phase {
  const W* base[3];
  const W* up;  // gated only
  float* out[3];
  int rows[3];
  int count;
  int K;
  bool gated;
};

/// Calls f(segment, first_row, rows) for each tile of this block's share of the phase, in
/// the order both the producer and the consumers walk them. The block's rows are
/// [R * b / B, R * (b + 1) / B) of the R rows of all segments.
template <typename W, typename F>
__device__ __forceinline__ void for_each_tile(const Phase<W>& ph, int stage_bytes, F&& f) {
  int total = 0;
  for (int i = 0; i < ph.count; ++i) total += ph.rows[i];
  const int b = static_cast<int>(blockIdx.x), B = static_cast<int>(gridDim.x);
  const int r0 = static_cast<int>(static_cast<int64_t>(total) * b / B);
  const int r1 = static_cast<int>(static_cast<int64_t>(total) * (b + 1) / B);
  const int row_bytes = ph.K * static_cast<int>(sizeof(W)) * (ph.gated ? 2 : 1);
  const int per_tile = max(1, stage_bytes / row_bytes);
  int seg_start = 0;
  for (int i = 0; i < ph.count; ++i) {
    const int lo = max(r0, seg_start), hi = min(r1, seg_start + ph.rows[i]);
    for (int r = lo; r < hi; r += per_tile) f(i, r - seg_start, min(per_tile, hi - r));
    seg_start += ph.rows[i];
  }
}

/// Eight weights (W: bf16 or f16) times eight floats of x.
template <typename W>
__device__ __forceinline__ float dot8(uint4 u, float4 a, float4 b, W tag) {
  const float2 p = unpack2(u.x, tag), q = unpack2(u.y, tag), r = unpack2(u.z, tag), t = unpack2(u.w, tag);
  float s = p.x * a.x;
  s = fmaf(p.y, a.y, s);
  s = fmaf(q.x, a.z, s);
  s = fmaf(q.y, a.w, s);
  s = fmaf(r.x, b.x, s);
  s = fmaf(r.y, b.y, s);
  s = fmaf(t.x, b.z, s);
  s = fmaf(t.y, b.w, s);
  return s;
}

/// A row of K weights (shared memory) times x_s, by one warp; every lane gets the sum.
template <typename W>
__device__ __forceinline__ float row_dot(const W* row, const float* x_s, int K, int lane) {
  const uint4* w4 = reinterpret_cast<const uint4*>(row);
  const float4* x4 = reinterpret_cast<const float4*>(x_s);
  float acc0 = 0.0f, acc1 = 0.0f;
  const int chunks = K / 8;
  int c = lane;
  for (; c + 32 < chunks; c += 64) {
    const uint4 u0 = w4[c], u1 = w4[c + 32];
    acc0 += dot8(u0, x4[2 * c], x4[2 * c + 1], W{});
    acc1 += dot8(u1, x4[2 * c + 64], x4[2 * c + 65], W{});
  }
  if (c < chunks) acc0 += dot8(w4[c], x4[2 * c], x4[2 * c + 1], W{});
  return warp_sum(acc0 + acc1);
}

/// Two rows (shared memory) times x_s, by one warp, sharing the x loads and interleaving the
/// two sums' dependency chains; each sum in row_dot's order, every lane gets both.
template <typename W>
__device__ __forceinline__ float2 row_dot2(const W* row_a, const W* row_b, const float* x_s, int K, int lane) {
  const uint4* a4 = reinterpret_cast<const uint4*>(row_a);
  const uint4* b4 = reinterpret_cast<const uint4*>(row_b);
  const float4* x4 = reinterpret_cast<const float4*>(x_s);
  float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f, b1 = 0.0f;
  const int chunks = K / 8;
  int c = lane;
  for (; c + 32 < chunks; c += 64) {
    const uint4 ua = a4[c], ub = b4[c], va = a4[c + 32], vb = b4[c + 32];
    const float4 x0 = x4[2 * c], x1 = x4[2 * c + 1], x2 = x4[2 * c + 64], x3 = x4[2 * c + 65];
    a0 += dot8(ua, x0, x1, W{});
    b0 += dot8(ub, x0, x1, W{});
    a1 += dot8(va, x2, x3, W{});
    b1 += dot8(vb, x2, x3, W{});
  }
  if (c < chunks) {
    const float4 x0 = x4[2 * c], x1 = x4[2 * c + 1];
    a0 += dot8(a4[c], x0, x1, W{});
    b0 += dot8(b4[c], x0, x1, W{});
  }
  float a = a0 + a1, b = b0 + b1;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, offset);
    b += __shfl_xor_sync(0xffffffffu, b, offset);
  }
  return make_float2(a, b);
}

template <typename W>
__device__ __forceinline__ Phase<W> phase(const W* a, const W* b, const W* c, const W* up, float* out_a, float* out_b,
                                          float* out_c, int rows_a, int rows_b, int rows_c, int count, int K) {
  Phase<W> f;
  f.base[0] = a;
  f.base[1] = b;
  f.base[2] = c;
  f.up = up;
  f.out[0] = out_a;
  f.out[1] = out_b;
  f.out[2] = out_c;
  f.rows[0] = rows_a;
  f.rows[1] = rows_b;
  f.rows[2] = rows_c;
  f.count = count;
  f.K = K;
  f.gated = up != nullptr;
  return f;
}

/// GEMV phase `which` of a layer (0 QKV, 1 O, 2 gate/up, 3 down), as the producer and the
/// consumers both walk them.
template <typename W>
__device__ __forceinline__ Phase<W> layer_phase(const Params<W>& P, const DecodeLayer<W>& L, int which) {
  const DecodeLayersShape& s = P.s;
  float* ws = P.ws;
  const Workspace w = workspace_layout(s);
  const int q_rows = s.heads * s.head_dim;
  const int kv_rows = s.kv_heads * s.head_dim;
  switch (which) {
    case 0:
      return phase<W>(L.q, L.k, L.v, nullptr, ws + w.q, ws + w.k, ws + w.v, q_rows, kv_rows, kv_rows, 3, s.hidden);
    case 1: return phase<W>(L.o, nullptr, nullptr, nullptr, ws + w.o, nullptr, nullptr, s.hidden, 0, 0, 1, q_rows);
    case 2:
      return phase<W>(L.gate, nullptr, nullptr, L.up, ws + w.m, nullptr, nullptr, s.intermediate, 0, 0, 1, s.hidden);
    default:
      return phase<W>(L.down, nullptr, nullptr, nullptr, ws + w.d, nullptr, nullptr, s.hidden, 0, 0, 1, s.intermediate);
  }
}

/// The producer: streams every tile of every layer's phases, in order, into the ring. (The
/// ring holds only a few tiles, so while the consumers wait at a barrier or attend the
/// producer soon waits too. Prefetching each next phase into L2 to keep DRAM busy then made
/// every latency-bound step slower: 1200 -> 1580 us per step at the 1B shape.)
template <typename W>
__device__ void produce(const Params<W>& P, char* ring, uint64_t* full, uint64_t* empty) {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  uint32_t tile = 0;
  for (int l = 0; l < P.s.layers; ++l) {
    for (int ph = 0; ph < 4; ++ph) {
      const Phase<W> F = layer_phase(P, P.layers[l], ph);
      for_each_tile(F, P.stage_bytes, [&](int seg, int row, int rows) {
        const uint32_t stage = tile % static_cast<uint32_t>(P.stages), use = tile / static_cast<uint32_t>(P.stages);
        if (use > 0) mbar_wait(&empty[stage], (use - 1) & 1u);
        const uint32_t bytes = static_cast<uint32_t>(rows) * static_cast<uint32_t>(F.K) * sizeof(W);
        char* dst = ring + static_cast<size_t>(stage) * P.stage_bytes;
        mbar_expect_tx(&full[stage], F.gated ? 2 * bytes : bytes);
        bulk_copy(dst, F.base[seg] + static_cast<int64_t>(row) * F.K, bytes, &full[stage], policy);
        if (F.gated) bulk_copy(dst + bytes, F.up + static_cast<int64_t>(row) * F.K, bytes, &full[stage], policy);
        ++tile;
      });
    }
  }
}

/// The consumers' side of a GEMV phase: out[row] = W[row] . x_s (gated: act(gate . x) * (up . x))
/// for this block's rows. Warp w takes the block's rows j with j % 8 == w, wherever the
/// tiles fall; every warp waits for every tile and then frees it.
template <typename W>
__device__ void consume(const Params<W>& P, const Phase<W>& F, const char* ring, uint64_t* full, uint64_t* empty,
                        const float* x_s, uint32_t* tile) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  int j = 0;  // the block's row counter within the phase
  for_each_tile(F, P.stage_bytes, [&](int seg, int row, int rows) {
    const uint32_t stage = *tile % static_cast<uint32_t>(P.stages), use = *tile / static_cast<uint32_t>(P.stages);
    const W* t = reinterpret_cast<const W*>(ring + static_cast<size_t>(stage) * P.stage_bytes);
    mbar_wait(&full[stage], use & 1u);
    // Two rows at a time (gate and up; or rows i and i + 8): twice the independent work.
    const int first = (warp - j % kConsumerWarps + kConsumerWarps) % kConsumerWarps;
    if (F.gated) {
      for (int i = first; i < rows; i += kConsumerWarps) {
        const float2 gu =
            row_dot2(t + static_cast<int64_t>(i) * F.K, t + static_cast<int64_t>(rows + i) * F.K, x_s, F.K, lane);
        if (lane == 0) {
          F.out[0][row + i] =
              P.s.activation == GatedActivation::kGeluTanh ? gelu_tanh_times(gu.x, gu.y) : silu_times(gu.x, gu.y);
        }
      }
    } else {
      for (int i = first; i < rows; i += 2 * kConsumerWarps) {
        if (i + kConsumerWarps < rows) {
          const float2 y = row_dot2(t + static_cast<int64_t>(i) * F.K,
                                    t + static_cast<int64_t>(i + kConsumerWarps) * F.K, x_s, F.K, lane);
          if (lane == 0) {
            F.out[seg][row + i] = y.x;
            F.out[seg][row + i + kConsumerWarps] = y.y;
          }
        } else {
          const float y = row_dot(t + static_cast<int64_t>(i) * F.K, x_s, F.K, lane);
          if (lane == 0) F.out[seg][row + i] = y;
        }
      }
    }
    mbar_arrive(&empty[stage]);  // every consumer thread: its reads of the stage are done
    j += rows;
    ++*tile;
  });
}

// ---- attention ------------------------------------------------------------------------------------

/// Keys per split and splits for a query at p seeing keys [lo, p].
__device__ __forceinline__ void split_plan(int64_t p, int64_t window, int64_t* lo, int* per, int* splits) {
  *lo = window > 0 ? max(static_cast<int64_t>(0), p - window + 1) : 0;
  const int n = static_cast<int>(p - *lo + 1);
  *per = max(kMinKeysPerSplit, (n + kMaxSplits - 1) / kMaxSplits);
  *splits = (n + *per - 1) / *per;
}

/// Warp's head row (q head or the new k) normalized and rotated in place in shared memory;
/// w (the head norm's weights) and inv_freq in shared memory.
template <typename W>
__device__ __forceinline__ void norm_rope_row(float* row, const float* src, const W* w, const float* inv_freq,
                                              float position_scale, int64_t p, int D, float eps, float offset,
                                              int lane) {
  float squares = 0.0f;
  for (int d = lane; d < D; d += 32) {
    const float v = ld(src + d);
    row[d] = v;
    squares += v * v;
  }
  __syncwarp();
  const float inv = inverse_rms(warp_sum(squares), D, eps);
  const int half = D / 2;
  for (int i = lane; i < half; i += 32) {
    float cs = 0.0f, sn = 0.0f;
    rope_angle_cos_sin(p, position_scale, inv_freq[i], &cs, &sn);
    norm_rotate(row[i], row[i + half], inv, to_f32(w[i]), to_f32(w[i + half]), offset, cs, sn, &row[i], &row[i + half]);
  }
  __syncwarp();
}

/// The attention phase of one layer: units (kv head, split) over the blocks. Each writes the
/// split's unnormalized output, max and sum per query head (combined at the O phase); the
/// split-0 unit of each kv head writes the new K and V rows into the cache. head_s: the
/// layer's q norm, k norm and RoPE frequencies (shared memory).
template <typename W>
__device__ void attention(const Params<W>& P, const DecodeLayer<W>& L, int64_t p, float* x_s, float* misc,
                          const char* head_s, Tracer& trace) {
  const DecodeLayersShape& s = P.s;
  const Workspace wl = workspace_layout(s);
  const int D = s.head_dim, G = s.heads / s.kv_heads;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const W* q_norm_s = reinterpret_cast<const W*>(head_s);
  const W* k_norm_s = q_norm_s + D;
  const auto* inv_freq_s = reinterpret_cast<const float*>(k_norm_s + D);
  int64_t lo = 0;
  int per = 0, splits = 0;
  split_plan(p, L.window, &lo, &per, &splits);
  float* q_s = x_s;          // [G][D]
  float* k_s = x_s + G * D;  // [D]
  float* v_s = k_s + D;      // [D]
  float* buf = v_s + D;      // [4][G][D]: the merge's slots
  float* wm = misc + 16;     // [8][kMaxGroup]
  float* wlv = wm + kConsumerWarps * kMaxGroup;
  const int64_t kv_width = static_cast<int64_t>(s.kv_heads) * D;
  const float scale_log2 = L.attention_scale * 1.4426950408889634f;

  // The trace marks the first unit's norms, keys and merge (block 0 always has a unit).
  Tracer quiet;
  for (int unit = static_cast<int>(blockIdx.x); unit < s.kv_heads * splits; unit += static_cast<int>(gridDim.x)) {
    Tracer& t = unit == static_cast<int>(blockIdx.x) ? trace : quiet;
    const int kvh = unit / splits, split = unit % splits;
    const int64_t begin = lo + static_cast<int64_t>(split) * per, end = min(p + 1, begin + per);
    // Key `key`'s K and V values of this lane (cached keys only: key p is this step's).
    auto load_key = [&](int64_t key, float* kf, float* vf) {
      const float* kr = L.k_cache + key * kv_width + static_cast<int64_t>(kvh) * D;
      const float* vr = L.v_cache + key * kv_width + static_cast<int64_t>(kvh) * D;
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        const int d = lane + 32 * i;
        const bool use = d < D && key < end && key != p;
        kf[i] = use ? ld(kr + d) : 0.0f;
        vf[i] = use ? ld(vr + d) : 0.0f;
      }
    };
    int64_t key = begin + warp;
    float kf[kSlots], vf[kSlots];
    load_key(key, kf, vf);  // in flight during the norms
    for (int r = warp; r <= G; r += kConsumerWarps) {
      if (r < G) {
        norm_rope_row(q_s + r * D, P.ws + wl.q + static_cast<int64_t>(kvh * G + r) * D, q_norm_s, inv_freq_s,
                      L.rope_position_scale, p, D, s.eps, s.norm_offset, lane);
      } else {
        norm_rope_row(k_s, P.ws + wl.k + static_cast<int64_t>(kvh) * D, k_norm_s, inv_freq_s, L.rope_position_scale, p,
                      D, s.eps, s.norm_offset, lane);
      }
    }
    for (int d = tid; d < D; d += kConsumers) v_s[d] = ld(P.ws + wl.v + static_cast<int64_t>(kvh) * D + d);
    consumers_sync();
    t.mark();
    if (split == 0) {  // nobody reads cache row p in this phase: key p comes from k_s / v_s
      for (int d = tid; d < D; d += kConsumers) {
        L.k_cache[p * kv_width + static_cast<int64_t>(kvh) * D + d] = k_s[d];
        L.v_cache[p * kv_width + static_cast<int64_t>(kvh) * D + d] = v_s[d];
      }
    }
    float m[kMaxGroup], l[kMaxGroup], acc[kMaxGroup][kSlots];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      m[g] = -CUDART_INF_F;
      l[g] = 0.0f;
#pragma unroll
      for (int i = 0; i < kSlots; ++i) acc[g][i] = 0.0f;
    }
    // (Holding the next key's values in registers during this one's arithmetic would spill;
    // prefetching the unit's keys into L2 during the QKV GEMV did not make this phase faster.)
    for (; key < end; key += kConsumerWarps) {
      if (key == p) {
#pragma unroll
        for (int i = 0; i < kSlots; ++i) {
          const int d = lane + 32 * i;
          kf[i] = d < D ? k_s[d] : 0.0f;
          vf[i] = d < D ? v_s[d] : 0.0f;
        }
      }
      // The group's scores, their warp sums interleaved (independent chains), then the updates.
      float part[kMaxGroup];
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        part[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < kSlots; ++i) {
          const int d = lane + 32 * i;
          if (g < G && d < D) part[g] += q_s[g * D + d] * kf[i];
        }
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) part[g] += __shfl_xor_sync(0xffffffffu, part[g], offset);
      }
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g < G) {
          const float score = part[g] * scale_log2;
          const float m_new = fmaxf(m[g], score);
          const float alpha = exp2f(m[g] - m_new);  // 0 on the first key (m = -inf)
          const float e = exp2f(score - m_new);
          l[g] = l[g] * alpha + e;
#pragma unroll
          for (int i = 0; i < kSlots; ++i) acc[g][i] = acc[g][i] * alpha + e * vf[i];
          m[g] = m_new;
        }
      }
      load_key(key + kConsumerWarps, kf, vf);
    }
    t.mark();
    // Merge the warps: each scales its output to the block's maximum (warps without keys weigh
    // 0), then a fixed tree (7 -> 3, 6 -> 2, 5 -> 1, 4 -> 0; 3 -> 1, 2 -> 0; 1 -> 0) through four
    // slots, slot w % 4 written only by warp w and the warp that read it before (no reuse
    // hazard): three block barriers, deterministic.
    if (lane == 0) {
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g < G) {
          wm[warp * kMaxGroup + g] = m[g];
          wlv[warp * kMaxGroup + g] = l[g];
        }
      }
    }
    consumers_sync();
    float mm[kMaxGroup];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      mm[g] = -CUDART_INF_F;
      if (g < G) {
        for (int w = 0; w < kConsumerWarps; ++w) mm[g] = fmaxf(mm[g], wm[w * kMaxGroup + g]);
        const float weight = m[g] == -CUDART_INF_F ? 0.0f : exp2f(m[g] - mm[g]);
#pragma unroll
        for (int i = 0; i < kSlots; ++i) acc[g][i] *= weight;
      }
    }
    // f(accumulator, index in a [G][D] buffer) for each of this lane's accumulators.
    const auto each_acc = [&](auto&& f) {
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g >= G) break;
#pragma unroll
        for (int i = 0; i < kSlots; ++i) {
          const int d = lane + 32 * i;
          if (d < D) f(acc[g][i], g * D + d);
        }
      }
    };
    for (int half = kConsumerWarps / 2; half >= 1; half /= 2) {
      float* slot = buf + (warp % 4) * G * D;
      if (warp >= half && warp < 2 * half) each_acc([&](float& a, int e) { slot[e] = a; });
      consumers_sync();
      if (warp < half) {
        const float* from = buf + ((warp + half) % 4) * G * D;
        each_acc([&](float& a, int e) { a += from[e]; });
      }
    }
    const int64_t qd = static_cast<int64_t>(s.heads) * D;
    if (warp == 0) {
      float* out = P.ws + wl.part_acc + split * qd + static_cast<int64_t>(kvh * G) * D;
      each_acc([&](float& a, int e) { out[e] = a; });
    }
    if (tid < G) {
      float ls = 0.0f;
      for (int w = 0; w < kConsumerWarps; ++w) {
        const float mw = wm[w * kMaxGroup + tid];
        ls += mw == -CUDART_INF_F ? 0.0f : exp2f(mw - mm[tid]) * wlv[w * kMaxGroup + tid];
      }
      P.ws[wl.part_m + split * s.heads + kvh * G + tid] = mm[tid];
      P.ws[wl.part_l + split * s.heads + kvh * G + tid] = ls;
    }
    t.mark();
    consumers_sync();  // q_s .. buf, wm, wlv are rewritten by the next unit
  }
}

/// x_s[h * D + d] = the attention output: the splits of each head combined. Each thread takes
/// four outputs of one head and has every split's values in flight at once; the splits'
/// weights per head go through shared memory (misc).
template <typename W>
__device__ void combine(const Params<W>& P, const DecodeLayer<W>& L, int64_t p, float* x_s, float* misc) {
  const DecodeLayersShape& s = P.s;
  const Workspace wl = workspace_layout(s);
  int64_t lo = 0;
  int per = 0, splits = 0;
  split_plan(p, L.window, &lo, &per, &splits);
  const int tid = static_cast<int>(threadIdx.x);
  const int qd = s.heads * s.head_dim, n4 = qd / 4;
  float* weight = misc + 16;  // [heads][kMaxSplits], then 1 / denominator per head
  float* inv_den = weight + s.heads * kMaxSplits;
  float* m_s = inv_den + s.heads;  // [kMaxSplits][heads] each: the splits' maxima and sums
  float* l_s = m_s + kMaxSplits * s.heads;
  // A thread's split values, four splits at a time, the next four loading while it adds these;
  // with one output chunk per thread the first four are in flight before the weights exist.
  constexpr int kBatch = 4;
  float4 pa[kBatch], pb[kBatch];
  auto load_batch = [&](float4* to, int c, int k0) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (k0 + j < splits) to[j] = ld4(P.ws + wl.part_acc + static_cast<int64_t>(k0 + j) * qd + 4 * c);
    }
  };
  const bool early = n4 <= kConsumers;
  if (early && tid < n4) load_batch(pa, tid, 0);
  for (int i = tid; i < splits * s.heads; i += kConsumers) {
    m_s[i] = ld(P.ws + wl.part_m + i);
    l_s[i] = ld(P.ws + wl.part_l + i);
  }
  consumers_sync();
  for (int h = tid; h < s.heads; h += kConsumers) {
    float mm = -CUDART_INF_F;
    for (int k = 0; k < splits; ++k) mm = fmaxf(mm, m_s[k * s.heads + h]);
    float den = 0.0f;
    for (int k = 0; k < splits; ++k) {
      const float w = exp2f(m_s[k * s.heads + h] - mm);
      weight[h * kMaxSplits + k] = w;
      den += w * l_s[k * s.heads + h];
    }
    inv_den[h] = 1.0f / den;
  }
  consumers_sync();
  for (int c = tid; c < n4; c += kConsumers) {
    const int h = 4 * c / s.head_dim;  // head_dim % 4 == 0: the four share a head
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (!early) load_batch(pa, c, 0);
    for (int k0 = 0; k0 < splits; k0 += kBatch) {
      if (k0 + kBatch < splits) load_batch(pb, c, k0 + kBatch);
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (k0 + j < splits) {
          const float w = weight[h * kMaxSplits + k0 + j];
          sum = make_float4(sum.x + w * pa[j].x, sum.y + w * pa[j].y, sum.z + w * pa[j].z, sum.w + w * pa[j].w);
        }
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) pa[j] = pb[j];
    }
    const float inv = inv_den[h];
    put4(x_s + 4 * c, make_float4(sum.x * inv, sum.y * inv, sum.z * inv, sum.w * inv));
  }
}

/// A layer's q norm, k norm and RoPE frequencies into head_s (stage_async).
template <typename W>
__device__ __forceinline__ void stage_head_norms(char* head_s, const DecodeLayer<W>& L, const DecodeLayersShape& s) {
  const int bytes = s.head_dim * static_cast<int>(sizeof(W));
  stage_async(head_s, L.q_norm, bytes);
  stage_async(head_s + bytes, L.k_norm, bytes);
  stage_async(head_s + 2 * bytes, L.inv_freq, s.head_dim / 2 * static_cast<int>(sizeof(float)));
}

template <typename W>
__device__ void decode_layers_body(const Params<W>& P) {
  extern __shared__ __align__(128) char smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + kMaxStages;
  char* ring = smem + 128;
  float* x_s = reinterpret_cast<float*>(ring + static_cast<size_t>(P.stages) * P.stage_bytes);
  float* misc = x_s + P.x_floats;
  char* norms_s = reinterpret_cast<char*>(misc + misc_floats(P.s.heads));  // two row norms' weights
  char* head_s = norms_s + row_norms_bytes(P.s);                           // q norm, k norm, RoPE frequencies
  auto* layers_s = reinterpret_cast<DecodeLayer<W>*>(head_s + head_norms_bytes(P.s));  // [2]
  const int tid = static_cast<int>(threadIdx.x);
  const DecodeLayersShape& s = P.s;
  const Workspace wl = workspace_layout(s);
  float* ws = P.ws;
  auto* counter = reinterpret_cast<unsigned*>(ws);
  const auto* norm_a = reinterpret_cast<const W*>(norms_s);
  const W* norm_b = norm_a + s.hidden;
  const int row_norm_bytes = s.hidden * static_cast<int>(sizeof(W));

  const int64_t p = index_at(P.positions, P.pos_i64, 0);
  if (p < 0 || p >= s.max_context) {  // every block sees the same p: none waits at a barrier
    if (blockIdx.x == 0) {
      if (tid == 0 && P.error_flag != nullptr) atomicExch(P.error_flag, 1);
      for (int i = tid; i < s.hidden; i += kThreads) P.h_out[i] = CUDART_NAN_F;
    }
    return;
  }
  if (tid == 0) {
    for (int i = 0; i < P.stages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (tid >= kConsumers) {  // the producer warp
    if (tid == kConsumers) produce(P, ring, full, empty);
    return;
  }

  uint32_t tile = 0;
  unsigned target = 0;
  const bool first_block = blockIdx.x == 0;
  Tracer trace;
  trace.at = first_block && tid == 0 ? P.trace : nullptr;
  auto stamp = [&] { trace.mark(); };
  stamp();
  // Each phase's norm weights (and each layer's descriptor) are staged into shared memory
  // during the GEMV before the grid barrier that precedes their use (and are complete when
  // the barrier is). (Staging the head norms during the previous layer's down GEMV instead
  // moved a microsecond from the QKV GEMV to the down GEMV.)
  stage_async(layers_s, P.layers, static_cast<int>(sizeof(DecodeLayer<W>)));
  cp_async_wait_all();
  consumers_sync();
  stage_async(norms_s, layers_s[0].input_norm, row_norm_bytes);
  cp_async_wait_all();
  consumers_sync();
  for (int l = 0; l < s.layers; ++l) {
    const DecodeLayer<W>& L = layers_s[l % 2];  // read where used: few registers held across the layer
    // QKV: the previous layer's post-FFN norm and residual add, this layer's input norm.
    if (l == 0) {
      input_norm(P.h_in, norm_a, x_s, s.hidden, s.eps, s.norm_offset, misc);
    } else {
      residual_norm(ws + wl.d, norm_a, ws + wl.res_a, first_block ? ws + wl.res_b : nullptr, norm_b, x_s, s.hidden,
                    s.eps, s.norm_offset, misc);
    }
    consumers_sync();
    stamp();
    stage_head_norms(head_s, L, s);
    if (l + 1 < s.layers) {  // the next layer's descriptor, over layer l - 1's
      stage_async(&layers_s[(l + 1) % 2], P.layers + l + 1, static_cast<int>(sizeof(DecodeLayer<W>)));
    }
    consume(P, layer_phase(P, L, 0), ring, full, empty, x_s, &tile);
    stamp();
    cp_async_wait_all();
    grid_barrier(counter, &target, P.error_flag);
    stamp();
    attention(P, L, p, x_s, misc, head_s, trace);
    stamp();
    grid_barrier(counter, &target, P.error_flag);
    stamp();
    combine(P, L, p, x_s, misc);
    consumers_sync();
    stamp();
    stage_async(norms_s, L.post_attention_norm, row_norm_bytes);
    stage_async(norms_s + row_norm_bytes, L.pre_ffn_norm, row_norm_bytes);
    consume(P, layer_phase(P, L, 1), ring, full, empty, x_s, &tile);
    stamp();
    cp_async_wait_all();
    grid_barrier(counter, &target, P.error_flag);
    stamp();
    // Gate/up: post-attention norm and residual add, pre-FFN norm.
    residual_norm(ws + wl.o, norm_a, l == 0 ? P.h_in : ws + wl.res_b, first_block ? ws + wl.res_a : nullptr, norm_b,
                  x_s, s.hidden, s.eps, s.norm_offset, misc);
    consumers_sync();
    stamp();
    consume(P, layer_phase(P, L, 2), ring, full, empty, x_s, &tile);
    stamp();
    grid_barrier(counter, &target, P.error_flag);
    stamp();
    {
      const int n4 = s.intermediate / 4;
#pragma unroll 4
      for (int c = tid; c < n4; c += kConsumers) put4(x_s + 4 * c, ld4(ws + wl.m + 4 * c));
    }
    consumers_sync();
    stamp();
    stage_async(norms_s, L.post_ffn_norm, row_norm_bytes);
    if (l + 1 < s.layers) stage_async(norms_s + row_norm_bytes, layers_s[(l + 1) % 2].input_norm, row_norm_bytes);
    consume(P, layer_phase(P, L, 3), ring, full, empty, x_s, &tile);
    stamp();
    cp_async_wait_all();
    grid_barrier(counter, &target, P.error_flag);
    stamp();
  }
  if (first_block) {
    residual_norm<W>(ws + wl.d, norm_a, ws + wl.res_a, P.h_out, nullptr, x_s, s.hidden, s.eps, s.norm_offset, misc);
  }
  // The last block out returns the counters to zero for the next launch: every block has
  // left its last barrier before it counts itself out.
  if (tid == 0) {
    __threadfence();
    const unsigned out = atomicAdd(counter + 1, 1u);
    if (out == gridDim.x - 1) {
      atomicExch(counter, 0u);
      atomicExch(counter + 1, 0u);
    }
  }
}

#endif  // __CUDA_ARCH__ >= 900

/// The compute_80 PTX has an empty body: the host launches it only on 9.x (plan_decode_layers).
template <typename W>
__global__ void __launch_bounds__(kThreads, 1) decode_layers_kernel(const Params<W> P) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  decode_layers_body(P);
#else
  (void)P;
#endif
}

}  // namespace

DecodeLayersPlan plan_decode_layers(const DecodeLayersShape& s) {
  DecodeLayersPlan plan;
  int device = 0, major = 0, sms = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    (void)cudaGetLastError();
    plan.why = "no CUDA device";
    return plan;
  }
  if (major != 9) {
    plan.why = "needs compute capability 9.x (bulk copies, mbarriers)";
    return plan;
  }
  const int wb = s.weight_bytes;
  if (s.layers < 1 || s.hidden < 1 || s.heads < 1 || s.kv_heads < 1 || s.heads % s.kv_heads != 0 ||
      s.heads / s.kv_heads > kMaxGroup || s.head_dim < 8 || s.head_dim % 8 != 0 || s.head_dim > kMaxHeadDim ||
      s.intermediate < 1 || s.max_context < 1 || (wb != 2)) {
    plan.why =
        "a shape it does not serve (group <= 4 query heads per KV head, head_dim a multiple of 8 up to 256, 16-bit "
        "weights)";
    return plan;
  }
  const int qd = s.heads * s.head_dim;
  for (int k : {s.hidden, qd, s.intermediate}) {
    if (k * wb % 16 != 0) {
      plan.why = "a row length that is not a multiple of 16 bytes";
      return plan;
    }
  }
  plan.x_floats = x_floats_for(s);
  const int widest = std::max({2 * s.hidden * wb, qd * wb, s.intermediate * wb});
  plan.stage_bytes = std::max(kMinStageBytes, (widest + 127) / 128 * 128);
  const size_t fixed = 128 + static_cast<size_t>(plan.x_floats + misc_floats(s.heads)) * sizeof(float) +
                       static_cast<size_t>(row_norms_bytes(s) + head_norms_bytes(s) + kLayerStageBytes);
  const int stages = optin > static_cast<int>(fixed) ? static_cast<int>((optin - fixed) / plan.stage_bytes) : 0;
  plan.stages = std::min(stages, kMaxStages);
  if (plan.stages < 2) {
    plan.why = "too little shared memory for two weight stages";
    return plan;
  }
  plan.smem_bytes = fixed + static_cast<size_t>(plan.stages) * plan.stage_bytes;
  auto kernel = decode_layers_kernel<__nv_bfloat16>;
  auto kernel16 = decode_layers_kernel<__half>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem_bytes)) !=
          cudaSuccess ||
      cudaFuncSetAttribute(kernel16, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem_bytes)) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    plan.why = "cudaFuncSetAttribute failed";
    return plan;
  }
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, plan.smem_bytes) != cudaSuccess ||
      per_sm < 1) {
    (void)cudaGetLastError();
    plan.why = "a block does not fit on an SM";
    return plan;
  }
  plan.blocks = sms;
  plan.workspace_bytes = workspace_layout(s).total * static_cast<int64_t>(sizeof(float));
  plan.ok = true;
  plan.why = "";
  return plan;
}

template <typename W>
cudaError_t decode_layers(const DecodeLayersPlan& plan, const DecodeLayer<W>* layers, const DecodeLayersShape& shape,
                          const float* h_in, const void* positions, bool pos_i64, float* h_out, void* workspace,
                          int* error_flag, cudaStream_t stream, uint64_t* trace) {
  if (!plan.ok || layers == nullptr || workspace == nullptr || shape.weight_bytes != static_cast<int>(sizeof(W))) {
    return cudaErrorInvalidValue;
  }
  Params<W> params{layers,
                   shape,
                   h_in,
                   positions,
                   pos_i64,
                   h_out,
                   static_cast<float*>(workspace),
                   error_flag,
                   plan.stages,
                   plan.stage_bytes,
                   plan.x_floats,
                   trace};
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;  // every block resident at once: the grid barriers need it
  attribute.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(plan.blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = plan.smem_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  (void)cudaLaunchKernelEx(&config, decode_layers_kernel<W>, params);
  return cudaGetLastError();
}

template cudaError_t decode_layers<__nv_bfloat16>(const DecodeLayersPlan&, const DecodeLayer<__nv_bfloat16>*,
                                                  const DecodeLayersShape&, const float*, const void*, bool, float*,
                                                  void*, int*, cudaStream_t, uint64_t*);
template cudaError_t decode_layers<__half>(const DecodeLayersPlan&, const DecodeLayer<__half>*,
                                           const DecodeLayersShape&, const float*, const void*, bool, float*, void*,
                                           int*, cudaStream_t, uint64_t*);

}  // namespace gearbox::cuda
