#include "support/cuda_kernel_cases.h"

#include <iterator>

namespace gearbox::kernel_cases {
namespace {

constexpr LinearCase kGemvCases[] = {
    {"1x1", 1, 1, kCheck},
    {"7x13", 7, 13, kCheck},
    {"13x7", 13, 7, kCheck},
    {"64x64", 64, 64, kCheck},
    {"130x130", 130, 130, kCheck},
    {"1x2304", 1, 2304, kCheck},
    // A square hidden x hidden linear, printed as the benchmark has always named it (the 1B's
    // own q projection, q_width() rows, runs fused in the QKV GEMV).
    {"q_proj", kGemma3_1B.hidden, kGemma3_1B.hidden, kCheckAndTime},
    {"k_proj/v_proj", kGemma3_1B.kv_width(), kGemma3_1B.hidden, kCheckAndTime},
    {"2304x13", 2304, 13, kCheck},
    {"130x2304", 130, 2304, kCheck},
    {"5x6912", 5, 6912, kCheck},
    {"gate_proj/up_proj", kGemma3_1B.intermediate, kGemma3_1B.hidden, kCheckAndTime},
    {"down_proj", kGemma3_1B.hidden, kGemma3_1B.intermediate, kCheckAndTime},
    {"lm_head (tied)", kGemma3_1B.vocab, kGemma3_1B.hidden, kTime},
};

constexpr AttentionCase kAttentionCases[] = {
    {4, 1, 8, 0},
    {4, 1, 80, 3},
    {kGemma3_1B.heads, kGemma3_1B.kv_heads, kGemma3_1B.head_dim, kGemma3_1B.window},
    {4, 2, 8, 3},
    {4, 2, 80, 512},
    {4, 2, 256, 0},
    {8, 8, 8, 512},
    {8, 8, 80, 0},
    {8, 8, 256, 3},
    {kGemma3_1B.heads, kGemma3_1B.kv_heads, kGemma3_1B.head_dim, 0, kCheckAndTime},
    {4, 2, 12, 5},
    {kMini.heads, kMini.kv_heads, kMini.head_dim, kMini.window},
    {kLlama32_1B.heads, kLlama32_1B.kv_heads, kLlama32_1B.head_dim, kLlama32_1B.window, kCheckAndTime},
    {kQwen3_06B.heads, kQwen3_06B.kv_heads, kQwen3_06B.head_dim, kQwen3_06B.window, kCheckAndTime},
};

constexpr LinearCase kGemmCases[] = {
    {"7x13", 7, 13, kCheck},         {"64x64", 64, 64, kCheck},         {"130x1152", 130, 1152, kCheck},
    {"1152x130", 1152, 130, kCheck}, {"2304x1152", 2304, 1152, kCheck}, {"13x2304", 13, 2304, kCheck},
};

constexpr int64_t kResidualNormDims[] = {1, 7, kMini.hidden, kGemma3_1B.hidden, 2048, 2305, 8200};
constexpr int64_t kEmbeddingDims[] = {1, 7, 64, kGemma3_1B.hidden};
constexpr int64_t kElementwiseSizes[] = {1, 3, 4, 5, 1000, 4099, kGemma3_1B.intermediate};

constexpr int64_t kRmsNormDims[] = {1, 7, 13, 64, 80, 256, 513, kGemma3_1B.hidden, 2 * kGemma3_1B.hidden};

}  // namespace

std::span<const LinearCase> gemv_cases() { return kGemvCases; }
std::span<const AttentionCase> attention_cases() { return kAttentionCases; }
std::span<const int64_t> rms_norm_dims() { return kRmsNormDims; }
std::span<const LinearCase> gemm_cases() { return kGemmCases; }
std::span<const int64_t> residual_norm_dims() { return kResidualNormDims; }
std::span<const int64_t> embedding_dims() { return kEmbeddingDims; }
std::span<const int64_t> elementwise_sizes() { return kElementwiseSizes; }

int64_t case_count() {
  return static_cast<int64_t>(std::size(kGemvCases) + std::size(kAttentionCases) + std::size(kRmsNormDims) +
                              std::size(kGemmCases) + std::size(kResidualNormDims) + std::size(kEmbeddingDims) +
                              std::size(kElementwiseSizes));
}

}  // namespace gearbox::kernel_cases
