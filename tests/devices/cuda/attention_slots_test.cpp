// The CUDA attention kernels over a batched network's KV-cache slots (kv_cache.cuh's
// CacheSlots) against the CPU's attention_rows as the reference: rows of different lengths,
// left-padded, one of them all padding, each in its own slot of a pool of caches, written by
// kv_cache_write and read by the split-KV and tiled kernels, and written by the split-KV
// kernel itself. Label `gpu`: every test skips where there is no CUDA device.

#include "support/cuda_attention_util.h"
#include "support/cuda_test_util.h"

namespace gearbox {
namespace {

using namespace cuda_test;  // NOLINT(google-build-using-namespace)

constexpr int64_t kPool = 4;  // slots
constexpr int64_t kCtx = 64;  // rows of one slot's cache

/// One call: per batch row its real tokens' count, its first position and its slot (-1: a
/// padding row), every row left-padded to `seq` tokens.
struct SlotCall {
  int64_t seq;
  std::vector<int64_t> counts, starts, slots;
};

const SlotCall kCalls[] = {
    {1, {1, 1, 1, 0}, {0, 17, 40, 0}, {2, 0, 3, -1}},  // decode: a token a row, and a padding row
    {7, {7, 2, 5}, {0, 3, 0}, {1, 3, 0}},              // prefill rows of different lengths
    {20, {20, 13}, {0, 30}, {3, 1}},                   // rows longer than a block of 16 queries
};

std::vector<int64_t> call_positions(const SlotCall& call) {
  std::vector<int64_t> pos;
  for (size_t b = 0; b < call.slots.size(); ++b) {
    const int64_t pad = call.seq - call.counts[b];
    for (int64_t t = 0; t < call.seq; ++t) pos.push_back(t < pad ? -1 : call.starts[b] + t - pad);
  }
  return pos;
}

enum class SlotKernel { kDecode, kDecodeWritesRows, kTiled };

TEST_F(CudaKernels, AttentionOverSlotsMatchesCpuRows) {
  for (const AttentionCase& c : checked_attention_cases()) {
    for (const SlotCall& call : kCalls) {
      const auto rows = static_cast<int64_t>(call.slots.size());
      const int64_t T = rows * call.seq, q_width = c.heads * c.head_dim, kv_width = c.kv_heads * c.head_dim;
      const std::vector<int64_t> pos = call_positions(call);
      const std::vector<float> q = random_floats(T * q_width, 80), k = random_floats(T * kv_width, 81),
                               v = random_floats(T * kv_width, 82);
      // Every slot's rows hold values: a kernel reading another slot's cache reads wrong ones.
      const std::vector<float> kc0 = random_floats(kPool * kCtx * kv_width, 83),
                               vc0 = random_floats(kPool * kCtx * kv_width, 84);
      cpu::AttentionShape s;
      s.T = call.seq;
      s.heads = c.heads;
      s.kv_heads = c.kv_heads;
      s.head_dim = c.head_dim;
      s.window = c.window;
      s.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      std::vector<float> kc = kc0, vc = vc0, want(static_cast<size_t>(T * q_width));
      std::vector<float> scratch(static_cast<size_t>(cpu::attention_scratch_floats(s, kCtx)));
      cpu::SlotAttention a;
      a.q = q.data();
      a.k = k.data();
      a.v = v.data();
      a.positions = pos.data();
      a.slots = call.slots.data();
      a.rows = rows;
      a.seq = call.seq;
      a.slot_count = kPool;
      a.max_ctx = kCtx;
      a.k_cache = kc.data();
      a.v_cache = vc.data();
      a.out = want.data();
      ASSERT_TRUE(cpu::attention_rows(a, s, false, scratch.data()).ok());

      // The split-KV kernel also as on a device of one SM, where its rows fill the device
      // with one split each (attention_decode_grid).
      cuda::DeviceLimits one_sm = *launch_.limits;
      one_sm.sm_count = 1;
      const cuda::Launch on_one_sm{launch_.stream, false, false, &one_sm};
      for (const auto& [kernel, on] :
           {std::pair{SlotKernel::kDecode, launch_}, std::pair{SlotKernel::kDecode, on_one_sm},
            std::pair{SlotKernel::kDecodeWritesRows, launch_}, std::pair{SlotKernel::kDecodeWritesRows, on_one_sm},
            std::pair{SlotKernel::kTiled, launch_}}) {
        const bool few_splits = on.limits == &one_sm;
        for (bool i64 : {false, true}) {
          Floats d_q(q), d_k(k), d_v(v), d_kc(kc0), d_vc(vc0);
          Floats out = Floats::poisoned(T * q_width);
          Indices d_pos(i64, pos), d_slots(i64, call.slots);
          const cuda::CacheSlots slots{d_slots.get(), i64, call.seq};
          const int64_t scratch_floats =
              kernel == SlotKernel::kTiled
                  ? cuda::attention_prefill_scratch_floats(T, c.heads, c.head_dim, *launch_.limits)
                  : cuda::attention_decode_partials_floats(T, c.heads, c.head_dim, 16);
          Floats partials = Floats::poisoned(std::max<int64_t>(1, scratch_floats));
          if (kernel != SlotKernel::kDecodeWritesRows) {
            ASSERT_EQ(cudaSuccess, cuda::kv_cache_write(d_k.get(), d_v.get(), d_pos.get(), i64, T, kv_width, d_kc.get(),
                                                        d_vc.get(), kCtx, flag(), on, slots));
          }
          cudaError_t err = cudaSuccess;
          if (kernel == SlotKernel::kTiled) {
            err = cuda::attention_prefill(d_q.get(), d_kc.get(), d_vc.get(), d_pos.get(), i64, out.get(), T, c.heads,
                                          c.kv_heads, c.head_dim, kCtx, c.window, s.scale, partials.get(), on, slots);
          } else {
            const bool writes = kernel == SlotKernel::kDecodeWritesRows;
            err = cuda::attention_decode(d_q.get(), writes ? d_k.get() : nullptr, writes ? d_v.get() : nullptr,
                                         d_kc.get(), d_vc.get(), d_pos.get(), i64, out.get(), T, c.heads, c.kv_heads,
                                         c.head_dim, kCtx, c.window, s.scale, partials.get(), 16, flag(), on, false,
                                         slots);
          }
          ASSERT_EQ(cudaSuccess, err);
          EXPECT_EQ(take_flag(), 0) << "padding is no bad position";
          const std::string what = std::string(kernel == SlotKernel::kTiled ? "tiled" : "split-KV") +
                                   (kernel == SlotKernel::kDecodeWritesRows ? " writing rows " : " ") +
                                   (few_splits ? "on one SM " : "") +
                                   shape({{"heads", c.heads},
                                          {"kv", c.kv_heads},
                                          {"hd", c.head_dim},
                                          {"window", c.window},
                                          {"rows", rows},
                                          {"seq", call.seq},
                                          {"i64", i64}});
          EXPECT_TRUE(close(what + " out", out.download(), want, {2e-5, 1e-4}));
          EXPECT_TRUE(close(what + " k cache", d_kc.download(), kc, {0, 0}));
          EXPECT_TRUE(close(what + " v cache", d_vc.download(), vc, {0, 0}));
          EXPECT_TRUE(out.guard_intact() && partials.guard_intact() && d_kc.guard_intact()) << what;
        }
      }
    }
  }
}

TEST_F(CudaKernels, RopeLeavesPaddingUnrotatedAndFlagsNoError) {
  const int64_t heads = 3, head_dim = 16, width = heads * head_dim;
  const std::vector<int64_t> pos = {-1, -1, 5, 6};
  const std::vector<float> x = random_floats(4 * width, 90);
  Floats d_x(x);
  Floats y = Floats::poisoned(4 * width);
  Indices d_pos(true, pos);
  ASSERT_EQ(cudaSuccess, cuda::rope(d_x.get(), d_pos.get(), true, y.get(), 4, heads, head_dim, 10000.0f, 1.0f, flag(),
                                    launch_, true));
  EXPECT_EQ(take_flag(), 0);
  std::vector<float> want(x.size()), inv_freq;
  for (int64_t i = 0; i < head_dim / 2; ++i) inv_freq.push_back(cpu::rope_inv_freq(10000.0f, i, head_dim));
  ASSERT_TRUE(
      cpu::rope_rows(x.data(), pos.data(), DataType::kI64, want.data(), 1, 4, heads, head_dim, inv_freq, 1.0f).ok());
  EXPECT_TRUE(close("rope with padding", y.download(), want, {1e-6, 1e-5}));
  // Without padding allowed, -1 is a bad position: NaN rows and the flag.
  ASSERT_EQ(cudaSuccess,
            cuda::rope(d_x.get(), d_pos.get(), true, y.get(), 4, heads, head_dim, 10000.0f, 1.0f, flag(), launch_));
  EXPECT_EQ(take_flag(), 1);
}

}  // namespace
}  // namespace gearbox
