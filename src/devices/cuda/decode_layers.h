// The whole-step decode kernel of the CUDA device: every decoder layer of a Gemma-3-style
// network for one token in one persistent launch (sm_90).
//
// A decode step as separate kernels is ~8 launches per layer, each a few microseconds of
// start-up, first-load latency and tail with DRAM idle in between (docs/PERFORMANCE.md).
// Here one block per SM runs the whole step:
// - Consumer warps run the layer as five phases (QKV GEMV; q/k norm + RoPE + split-KV
//   attention; O GEMV; gate/up GEMV + activation; down GEMV) separated by grid-wide
//   barriers. The norms and residual adds around them run redundantly in every block at the
//   start of the phase that reads them (each block needs the whole vector anyway), so no
//   phase exists for them; block 0 stores the residual stream.
// - One producer warp streams the block's share of every weight matrix, layer after layer,
//   into a ring of shared-memory stages with bulk copies (cp.async.bulk) and mbarriers. It
//   never waits at a grid barrier, only for a free stage, so weight reads continue across
//   phase boundaries: a barrier costs its latency only when the ring is empty.
// - Each GEMV phase splits its matrices' rows evenly over the blocks; a block's rows are
//   contiguous in memory, so its share is a few large copies. A warp takes two rows at a
//   time (gate and up, or two rows of one tile), sharing the x loads.
// - Latency is what it spends: the norms' weights and the next layer's descriptor are
//   staged into shared memory (cp.async) during the GEMV before the barrier that precedes
//   their use; the attention merges its warps through a fixed tree and the split combine
//   has its loads in flight four splits ahead.
// Where the time goes per layer and what did not help: docs/PERFORMANCE.md. It is not yet
// faster than the separate kernels, so the runtime uses it only when asked
// (GEARBOX_CUDA_DECODE_KERNEL, cuda_backend.cpp).
// Results follow the separate kernels' order of operations per element (norm then add then
// norm, norm then RoPE, f32 accumulation of f32 activations times weights); only the order
// of summation differs, as between any two of our kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "devices/cuda/kernels.h"

namespace gearbox::cuda {

/// One decoder layer's weights (device memory, W = bf16 or f16) and KV cache. Gemma-3 order:
/// input_norm -> q/k/v -> q_norm/k_norm + RoPE -> attention -> o -> post_attention_norm + add
/// -> pre_ffn_norm -> gate/up + activation -> down -> post_ffn_norm + add.
template <typename W>
struct DecodeLayer {
  const W* input_norm;
  const W* q;  // [heads * head_dim, hidden]
  const W* k;  // [kv_heads * head_dim, hidden]
  const W* v;  // [kv_heads * head_dim, hidden]
  const W* q_norm;
  const W* k_norm;  // [head_dim]
  const W* o;       // [hidden, heads * head_dim]
  const W* post_attention_norm;
  const W* pre_ffn_norm;
  const W* gate;  // [intermediate, hidden]
  const W* up;    // [intermediate, hidden]
  const W* down;  // [hidden, intermediate]
  const W* post_ffn_norm;
  const float* inv_freq;  // [head_dim / 2], cpu::rope_inv_freq's values, 16-byte aligned
  float rope_position_scale;
  float attention_scale;
  int64_t window;  // sliding window in keys; 0: global
  float* k_cache;  // [max_context, kv_heads * head_dim]
  float* v_cache;
};

struct DecodeLayersShape {
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int intermediate = 0;
  int64_t max_context = 0;
  float eps = 0.0f;          // every norm's (row and head norms)
  float norm_offset = 0.0f;  // every norm's weight offset
  GatedActivation activation = GatedActivation::kGeluTanh;
  int weight_bytes = 2;  // sizeof(W)
};

/// The launch geometry decode_layers uses on the current device, or ok = false with the
/// reason when it cannot run there (not compute capability 9.x, a shape it does not serve:
/// group of more than 4 query heads per KV head, head_dim not a multiple of 8 or above 256,
/// row lengths not a multiple of 16 bytes, or too little shared memory).
struct DecodeLayersPlan {
  bool ok = false;
  const char* why = "";
  int blocks = 0;  // one per SM
  int stages = 0;
  int stage_bytes = 0;
  int x_floats = 0;
  size_t smem_bytes = 0;
  int64_t workspace_bytes = 0;  // device memory, zero-filled once before the first launch
};
DecodeLayersPlan plan_decode_layers(const DecodeLayersShape& s);

/// h_out [hidden] = the layers applied to h_in [hidden] for the token at positions[0] (i32 or
/// i64, device memory), each layer writing its K and V rows at that position. `layers`: a
/// device array of shape.layers entries. `workspace`: plan.workspace_bytes of device memory,
/// zero-filled before its first use and then only used by this kernel (its barrier counters
/// return to zero at the end of every launch); one launch at a time per workspace. A position
/// outside [0, max_context) sets *error_flag to 1, writes NaN to h_out and touches no cache.
/// A grid barrier that waits more than a second (a fault of this kernel) sets it to 2.
/// trace (nullable, for the kernel bench): block 0 writes the %globaltimer (ns) at its start
/// and at each of the 17 phase boundaries per layer (decode_layers_trace_marks in all).
template <typename W>
cudaError_t decode_layers(const DecodeLayersPlan& plan, const DecodeLayer<W>* layers, const DecodeLayersShape& shape,
                          const float* h_in, const void* positions, bool pos_i64, float* h_out, void* workspace,
                          int* error_flag, cudaStream_t stream, uint64_t* trace = nullptr);
constexpr int kDecodeLayersMarksPerLayer = 17;
inline int decode_layers_trace_marks(int layers) { return 1 + kDecodeLayersMarksPerLayer * layers; }

}  // namespace gearbox::cuda
