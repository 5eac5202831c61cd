// copy_landed (devices/cuda/host_progress.h): the host's side of an output that the device's
// kernels store while they say, in progress slots, how much of it is there. Table cases on
// fixed slots, then a writer thread that stores an output as the CUDA logits GEMV does
// (blocks serving interleaved units, each slot moved past what its block has stored) while
// the reader polls: every byte the reader copies must be final (TSan checks the ordering).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "devices/cuda/host_progress.h"

namespace gearbox::internal {
namespace {

struct Case {
  const char* name;
  std::vector<uint32_t> slots;
  int64_t bytes;
  int64_t copied_before;
  int64_t want_copied;
  int32_t want_lowest;  // the slot that held the least, when the poll copied
};

TEST(HostProgress, CopiesWhatTheLeastSlotVouchesFor) {
  const Case cases[] = {
      {"nothing there yet", {0, 0, 0}, 96, 0, 0, 0},
      {"the least slot bounds the copy", {64, 32, 80}, 96, 0, 32, 1},
      {"the last slot is the least", {64, 48, 16}, 96, 0, 16, 2},
      {"slots past the end copy the whole output", {1000, 200}, 100, 0, 100, 1},
      {"nothing new past what was copied", {40, 32}, 96, 32, 32, 0},
      {"more beyond what was copied", {40, 72}, 96, 24, 40, 0},
      {"one slot", {7}, 9, 3, 7, 0},
      {"an awkward size, all there", {13, 13, 13}, 13, 5, 13, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<uint32_t> slots = c.slots;
    std::vector<uint8_t> landed(static_cast<size_t>(c.bytes));
    for (size_t i = 0; i < landed.size(); ++i) landed[i] = static_cast<uint8_t>(i * 7 + 1);
    std::vector<uint8_t> dst(landed.size() + 1, 0xAB);  // one guard byte after the view
    LandingCopy l{slots.data(),   static_cast<int32_t>(slots.size()), landed.data(), dst.data(), c.bytes,
                  c.copied_before};
    const bool moved = copy_landed(l);
    EXPECT_EQ(moved, c.want_copied > c.copied_before);
    EXPECT_EQ(l.copied, c.want_copied);
    if (moved) {
      EXPECT_EQ(l.lowest, c.want_lowest);
    }
    for (int64_t i = 0; i < static_cast<int64_t>(dst.size()); ++i) {
      const bool copied_now = i >= c.copied_before && i < c.want_copied;
      EXPECT_EQ(dst[static_cast<size_t>(i)], copied_now ? landed[static_cast<size_t>(i)] : 0xAB) << "byte " << i;
    }
  }
}

TEST(HostProgress, AnEmptyOutputIsWholeAtOnce) {
  uint32_t slot = 0;
  LandingCopy l{&slot, 1, nullptr, nullptr, 0, 0};
  EXPECT_FALSE(copy_landed(l));
  EXPECT_EQ(l.copied, 0);
}

// The writer stores units of kUnit bytes over a buffer of garbage: block b serves units b,
// b + kBlocks, ... in order, each unit's bytes written with their final values, then the
// block's slot released to the first byte of its next unit (or the end); blocks advance in a
// random order. The reader polls until it has the whole output, which must be the final
// values (and, under TSan, no read of a byte the writer is still writing).
TEST(HostProgress, ACopyWhileTheWriterStoresHoldsOnlyFinalBytes) {
  constexpr int kBlocks = 5;
  constexpr int64_t kUnit = 24;
  for (const int64_t bytes : {int64_t{1}, int64_t{24}, int64_t{1000}, int64_t{24 * 5 * 7}, int64_t{4099}}) {
    SCOPED_TRACE(bytes);
    const int64_t units = (bytes + kUnit - 1) / kUnit;
    const auto final_byte = [](int64_t i) { return static_cast<uint8_t>((i * 31 + 5) % 251); };
    std::vector<uint8_t> landed(static_cast<size_t>(bytes), 0xEE);
    std::vector<uint8_t> dst(static_cast<size_t>(bytes), 0x00);
    std::vector<uint32_t> slots(kBlocks, 0);
    // Blocks with no unit vouch for nothing: their slots start at the end.
    for (int b = static_cast<int>(units); b < kBlocks; ++b)
      slots[static_cast<size_t>(b)] = static_cast<uint32_t>(bytes);
    std::thread writer([&] {
      std::mt19937 rng(static_cast<uint32_t>(bytes));
      std::vector<int64_t> next(kBlocks);
      for (int b = 0; b < kBlocks; ++b) next[static_cast<size_t>(b)] = b;
      for (;;) {
        std::vector<int> busy;
        for (int b = 0; b < kBlocks; ++b) {
          if (next[static_cast<size_t>(b)] < units) busy.push_back(b);
        }
        if (busy.empty()) break;
        const int b = busy[rng() % busy.size()];
        const int64_t u = next[static_cast<size_t>(b)];
        const int64_t lo = u * kUnit, hi = std::min(bytes, lo + kUnit);
        for (int64_t i = lo; i < hi; ++i) landed[static_cast<size_t>(i)] = final_byte(i);
        next[static_cast<size_t>(b)] = u + kBlocks;
        const int64_t vouched = std::min(bytes, next[static_cast<size_t>(b)] * kUnit);
        std::atomic_ref<uint32_t>(slots[static_cast<size_t>(b)])
            .store(static_cast<uint32_t>(vouched), std::memory_order_release);
        if (rng() % 3 == 0) std::this_thread::yield();
      }
    });
    LandingCopy l{slots.data(), kBlocks, landed.data(), dst.data(), bytes, 0};
    int64_t polls = 0;
    while (l.copied < bytes) {
      const int64_t before = l.copied;
      if (!copy_landed(l)) spin_pause();
      ASSERT_GE(l.copied, before);
      ASSERT_LE(l.copied, bytes);
      ++polls;
    }
    writer.join();
    for (int64_t i = 0; i < bytes; ++i) ASSERT_EQ(dst[static_cast<size_t>(i)], final_byte(i)) << "byte " << i;
    EXPECT_GT(polls, 0);
  }
}

}  // namespace
}  // namespace gearbox::internal
