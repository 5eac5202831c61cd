// The one table of CUDA kernel cases: the model shapes, written once, and per kernel family
// the shapes (with the dtypes and tolerances they are checked under) that the kernel tests
// check against the CPU reference and the kernel benchmark times.
//
// A case marked `check` runs in tests/devices/cuda/<family>_test.cpp; a case marked `time`
// runs in bench/cuda_kernels/ (a shape too large for the CPU reference is timed only).
#pragma once

#include <cstdint>
#include <span>

#include "gearbox/data_type.h"

namespace gearbox::kernel_cases {

/// A decoder's dimensions, as the kernels see them.
struct ModelShape {
  const char* name;
  int64_t vocab, hidden, intermediate, heads, kv_heads, head_dim, window;
  /// The widths of q and of k (or v): the attention projections' output rows.
  constexpr int64_t q_width() const { return heads * head_dim; }
  constexpr int64_t kv_width() const { return kv_heads * head_dim; }
};

/// The mini Gemma-3 (gearbox.export.MINI_CONFIG, the delegate tests' model).
inline constexpr ModelShape kMini = {"mini", 2048, 320, 640, 4, 1, 80, 0};
/// Gemma-3-1B (bf16 weights in the product; the benchmark's shape).
inline constexpr ModelShape kGemma3_1B = {"gemma-3-1b", 262144, 1152, 6912, 4, 1, 256, 512};
/// Llama-3.2-1B and Qwen3-0.6B (the pre-norm families' benchmark shapes; no window).
inline constexpr ModelShape kLlama32_1B = {"llama-3.2-1b", 128256, 2048, 8192, 32, 8, 64, 0};
inline constexpr ModelShape kQwen3_06B = {"qwen3-0.6b", 151936, 1024, 3072, 16, 8, 128, 0};

/// Where a case runs.
struct Use {
  bool check;  // the tests compare it with the CPU reference
  bool time;   // the benchmark times it
};
inline constexpr Use kCheck = {true, false};
inline constexpr Use kTime = {false, true};
inline constexpr Use kCheckAndTime = {true, true};

/// got within atol + rtol * |want| (plus a per-element reduction allowance where a test
/// computes one).
struct Tolerance {
  double atol = 1e-5;
  double rtol = 1e-4;
};
/// The f32 kernels against the CPU's f32 kernels.
inline constexpr Tolerance kF32Tolerance = {1e-5, 1e-4};
/// The tensor-core prefill rounds q, k, v and the softmax weights to bf16. With q, k, v that
/// bf16 holds exactly, only the weights' rounding (relative 2^-9 each) is left, and the
/// output, a weighted mean of v rows, is then off by at most 2^-9 * max |v| < 2.5e-3 (|v| <= 1
/// in the tests).
inline constexpr Tolerance kMmaTolerance = {2.5e-3, 0.0};

/// The weight dtypes every weight-reading kernel is checked with; the benchmark times bf16.
inline constexpr DataType kWeightTypes[] = {DataType::kF32, DataType::kBF16, DataType::kF16};
inline constexpr DataType kTimedWeightType = DataType::kBF16;

// ---- GEMV -----------------------------------------------------------------------------------------

/// y[M, N] = x[M, K] * w[N, K]^T: awkward shapes (1, 7, 13, 130, 2304, 6912: no whole vector,
/// a unit cut short, one row) and the 1B's linears. Checked with kF32Tolerance plus the
/// reduction allowance, at M 1, 3 and 8 and every geometry at M = 1; timed at M 1, 4 and 8
/// (lm_head at M = 1 only).
struct LinearCase {
  const char* name;
  int64_t N, K;
  Use use;
};
std::span<const LinearCase> gemv_cases();
/// The row counts the GEMV is checked and timed at.
inline constexpr int64_t kGemvCheckedRows[] = {1, 3, 8};
inline constexpr int64_t kGemvTimedRows[] = {1, 4, 8};
/// The row counts the tensor-core GEMV (bf16 weights, K % 8 == 0 of the same cases) is
/// checked at (one n-tile full and part-full, two) and timed at (the lm_head too).
inline constexpr int64_t kGemvMmaCheckedRows[] = {1, 3, 8, 9, 16};
inline constexpr int64_t kGemvMmaTimedRows[] = {1, 4, 8, 16};

// ---- cuBLASLt GEMM --------------------------------------------------------------------------------

/// The prefill GEMM's linears, checked at kGemmCheckedRows (odd and past a tile: 5, 127, 129,
/// 300); the benchmark times the timed GEMV linears at kGemmTimedRows (a batched decode's 8
/// and 16 rows beside the tensor-core GEMV's, and prefill's).
std::span<const LinearCase> gemm_cases();
inline constexpr int64_t kGemmCheckedRows[] = {1, 5, 127, 129, 300};
inline constexpr int64_t kGemmTimedRows[] = {8, 16, 128, 512};

// ---- attention ------------------------------------------------------------------------------------

/// One attention layer's heads: GQA groups of 1, 2 and 4, head dims 8, 12, 80 (the mini) and
/// 256 (the 1B), no window, a window shorter than the context (3, 5) and the 1B's 512.
/// Checked with kF32Tolerance (decode, tiled prefill) or kMmaTolerance (tensor-core prefill)
/// against a cache of kAttentionMaxCtx rows; the timed case is the 1B's global layer.
struct AttentionCase {
  int64_t heads, kv_heads, head_dim, window;
  Use use = kCheck;
};
std::span<const AttentionCase> attention_cases();
inline constexpr int64_t kAttentionMaxCtx = 1024;

// ---- norms ----------------------------------------------------------------------------------------

/// RMS norm row widths: awkward (1, 7, 13, 513), the head dims (64, 80, 256) and the 1B's
/// hidden (1152) and twice it; over 1, 3 and 129 rows, aligned and not.
std::span<const int64_t> rms_norm_dims();
inline constexpr int64_t kRmsNormRows[] = {1, 3, 129};

/// Residual + norm widths: awkward, the mini's and the 1B's hidden, and past the cached kernel
/// (2048) into the looping one.
std::span<const int64_t> residual_norm_dims();

/// Embedding row widths.
std::span<const int64_t> embedding_dims();

// ---- elementwise ----------------------------------------------------------------------------------

/// Element counts of the elementwise kernels: below, at and past a vector, odd, and the 1B's
/// intermediate width.
std::span<const int64_t> elementwise_sizes();

/// The number of cases in the table (every family's list).
int64_t case_count();

}  // namespace gearbox::kernel_cases
