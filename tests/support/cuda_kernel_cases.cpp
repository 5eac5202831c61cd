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
};

constexpr int64_t kRmsNormDims[] = {1, 7, 13, 64, 80, 256, 513, kGemma3_1B.hidden, 2 * kGemma3_1B.hidden};

}  // namespace

std::span<const LinearCase> gemv_cases() { return kGemvCases; }
std::span<const AttentionCase> attention_cases() { return kAttentionCases; }
std::span<const int64_t> rms_norm_dims() { return kRmsNormDims; }

int64_t case_count() {
  return static_cast<int64_t>(std::size(kGemvCases) + std::size(kAttentionCases) + std::size(kRmsNormDims));
}

}  // namespace gearbox::kernel_cases
