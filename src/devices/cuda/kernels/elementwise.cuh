// Elementwise ops of f32 vectors and rows: the gated activations, residual and bias adds, the
// columns of a stacked GEMM output, the last position, and the conversions that feed a GEMM
// (elementwise.cu); and spin, which keeps a stream busy for timing.
#pragma once

#include "devices/cuda/kernels/conventions.h"

namespace gearbox::cuda {

/// The activation of a gated pair: out = act(gate) * up (gelu_tanh_mul, silu_mul).
enum class GatedActivation : int { kGeluTanh = 0, kSilu = 1 };

// ---- elementwise (n elements, f32) --------------------------------------------------------------
/// out = gelu_tanh(gate) * up, gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
cudaError_t gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n, const Launch& launch);
/// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, const Launch& launch);
/// out = a + b (out may alias a or b).
cudaError_t add(const float* a, const float* b, float* out, int64_t n, const Launch& launch);
/// y[r, :] += bias for each of `rows` rows of y [rows, n] (the GEMM's bias).
cudaError_t add_bias_rows(float* y, const float* bias, int64_t rows, int64_t n, const Launch& launch);
/// One output of split_columns: out [rows, n] (+ bias [n], nullable).
struct ColumnTarget {
  float* out;
  const float* bias;
  int64_t n;
};
inline constexpr int kColumnSplitMaxTargets = 4;
struct ColumnSplit {
  ColumnTarget targets[kColumnSplitMaxTargets];
  int count;
};
/// y [rows, sum n_i] -> out_i [rows, n_i] = the columns of target i (+ its bias): the outputs
/// of a multi-output linear computed as one GEMM over its stacked weights. 1..4 targets, each
/// n_i >= 1; no out_i may overlap y.
cudaError_t split_columns(const float* y, int64_t rows, const ColumnSplit& split, const Launch& launch);
/// x [batch, T, F] -> y [batch, F]: the last position of each sequence. T >= 1.
cudaError_t take_last(const float* x, float* y, int64_t batch, int64_t T, int64_t F, const Launch& launch);
/// y[i] = W(x[i]), round to nearest even (the GEMM's activation conversion; W = float copies).
template <typename W>
cudaError_t convert_f32_to(const float* x, W* y, int64_t n, const Launch& launch);
/// out[i] = W(act(gate[i]) * up[i]) for act GELU (tanh) or SiLU: gelu_tanh_mul / silu_mul
/// and convert_f32_to in one pass (a prefill's MLP activation feeding the down projection's
/// GEMM), the f32 product never stored. W: bf16 or f16 (or float).
template <typename W>
cudaError_t gated_activation_to(const float* gate, const float* up, GatedActivation activation, W* out, int64_t n,
                                const Launch& launch);
/// out[r, c] = Out(act(gate[r * ld + c]) * up[r * ld + c]) for r < rows, c < n: the gated
/// activation of 16-bit gate and up rows (the gate / up GEMMs' outputs rounded to W, each
/// [rows, n] with ld = n, or side by side in one stacked [rows, 2n] output with ld = 2n), out
/// [rows, n] contiguous, f32 or W (rounded to nearest even). W: bf16 or f16. ld >= n; out
/// must not overlap gate or up.
template <typename W, typename Out>
cudaError_t gated_activation_rows(const W* gate, const W* up, int64_t ld, GatedActivation activation, Out* out,
                                  int64_t rows, int64_t n, const Launch& launch);

/// One thread that keeps the stream busy for at least `microseconds` (by the GPU's global
/// timer): what the host enqueues behind it meanwhile then runs back to back, so events
/// around it time the device work and not the host's launches (the builder's tuning).
/// Always a plain launch: nothing before it is waited for early, nothing after it starts early.
cudaError_t spin(int64_t microseconds, const Launch& launch);

}  // namespace gearbox::cuda
