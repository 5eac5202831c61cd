// The staged copy of the CUDA weight upload (devices/cuda/staged_copy.h) on the CPU: host
// lanes stand in for the device, and their copies out of a buffer happen late (when the lane
// next waits for that buffer, or finishes), as a device's asynchronous copies do. A source
// byte that reached the destination wrong, twice or not at all, a buffer refilled before its
// copy went out, or a copy still pending when staged_copy returns fails the test. The GPU
// test (weight_upload_test.cpp) runs the same cases through page-locked memory and streams.
#include "devices/cuda/staged_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gearbox::internal {
namespace {

TEST(StagingPlan, CutsIntoChunksLanesAndBuffers) {
  struct Case {
    int64_t bytes;
    int32_t lanes, buffers;
    int64_t chunk;
    StagingPlan want;
  };
  const Case cases[] = {
      {0, 4, 2, 4096, {0, 0, 0, 0}},
      {1, 4, 2, 4096, {1, 1, 1, 1}},
      {4095, 4, 2, 4096, {1, 1, 4095, 1}},
      {4096, 4, 2, 4096, {1, 1, 4096, 1}},
      {4097, 4, 2, 4096, {2, 1, 4096, 2}},
      {5 * 4096, 4, 2, 4096, {4, 2, 4096, 5}},
      {13 * 4096 + 7, 3, 2, 4096, {3, 2, 4096, 14}},
      {13 * 4096 + 7, 1, 3, 4096, {1, 3, 4096, 14}},
      {100, 0, 0, 0, {1, 1, 1, 100}},  // limits below 1 count as 1
  };
  for (const Case& c : cases) {
    const StagingPlan p = plan_staging(c.bytes, c.lanes, c.buffers, c.chunk);
    const std::string at = "bytes " + std::to_string(c.bytes) + ", lanes " + std::to_string(c.lanes);
    EXPECT_EQ(p.lanes, c.want.lanes) << at;
    EXPECT_EQ(p.buffers, c.want.buffers) << at;
    EXPECT_EQ(p.chunk_bytes, c.want.chunk_bytes) << at;
    EXPECT_EQ(p.chunks, c.want.chunks) << at;
  }
}

// Copies out of a buffer happen at the next wait for it, or at finish. Every call comes from
// the lane's own thread (begin() records it).
class LateLane final : public StagingLane {
 public:
  /// `hits`: per destination byte, how many copies wrote it.
  LateLane(uint8_t* dst, std::vector<int>* hits, const StagingPlan& plan, int64_t fail_at_send = -1)
      : dst_(dst),
        hits_(hits),
        buffers_(static_cast<size_t>(plan.buffers)),
        pending_(static_cast<size_t>(plan.buffers)),
        fail_at_send_(fail_at_send) {
    for (std::vector<uint8_t>& b : buffers_) b.assign(static_cast<size_t>(plan.chunk_bytes), 0xA5);
  }
  Status begin() override {
    thread_ = std::this_thread::get_id();
    began_ = true;
    return {};
  }
  uint8_t* buffer(int32_t b) override {
    on_own_thread();
    EXPECT_FALSE(pending_[static_cast<size_t>(b)].has) << "buffer " << b << " refilled before its copy went out";
    return buffers_[static_cast<size_t>(b)].data();
  }
  Status wait(int32_t b) override {
    on_own_thread();
    land(b);
    return {};
  }
  Status send(int32_t b, int64_t offset, int64_t bytes) override {
    on_own_thread();
    if (sends_++ == fail_at_send_) return device_error("the copy engine is on fire");
    EXPECT_FALSE(pending_[static_cast<size_t>(b)].has);
    pending_[static_cast<size_t>(b)] = {true, offset, bytes};
    return {};
  }
  Status finish() override {
    on_own_thread();
    for (size_t b = 0; b < buffers_.size(); ++b) land(static_cast<int32_t>(b));
    finished_ = true;
    return {};
  }
  bool began() const { return began_; }
  bool finished() const { return finished_; }
  int64_t sends() const { return sends_; }

 private:
  struct Pending {
    bool has = false;
    int64_t offset = 0, bytes = 0;
  };
  void on_own_thread() const { EXPECT_EQ(std::this_thread::get_id(), thread_) << "a lane called from two threads"; }
  void land(int32_t b) {
    Pending& p = pending_[static_cast<size_t>(b)];
    if (!p.has) return;
    for (int64_t i = 0; i < p.bytes; ++i) {
      dst_[p.offset + i] = buffers_[static_cast<size_t>(b)][static_cast<size_t>(i)];
      ++(*hits_)[static_cast<size_t>(p.offset + i)];
    }
    p.has = false;
  }
  uint8_t* dst_;
  std::vector<int>* hits_;
  std::vector<std::vector<uint8_t>> buffers_;
  std::vector<Pending> pending_;
  int64_t fail_at_send_;
  int64_t sends_ = 0;
  std::thread::id thread_;
  bool began_ = false, finished_ = false;
};

std::vector<uint8_t> source(int64_t bytes) {
  std::vector<uint8_t> v(static_cast<size_t>(bytes));
  for (int64_t i = 0; i < bytes; ++i) v[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 131 + i / 251) % 251);
  return v;
}

TEST(StagedCopy, EveryByteArrivesOnceOverAwkwardSizesLanesAndBuffers) {
  for (const int64_t bytes :
       {int64_t{1}, int64_t{5}, int64_t{127}, int64_t{128}, int64_t{129}, int64_t{1000}, int64_t{13 * 128 + 7}}) {
    for (int32_t lanes = 1; lanes <= 4; ++lanes) {
      for (int32_t buffers = 1; buffers <= 3; ++buffers) {
        const StagingPlan plan = plan_staging(bytes, lanes, buffers, 128);
        const std::vector<uint8_t> src = source(bytes);
        std::vector<uint8_t> dst(static_cast<size_t>(bytes) + 64, 0);  // 64 sentinel bytes after
        std::vector<int> hits(dst.size(), 0);
        std::vector<std::unique_ptr<LateLane>> owned;
        std::vector<StagingLane*> views;
        for (int32_t l = 0; l < plan.lanes; ++l) {
          owned.push_back(std::make_unique<LateLane>(dst.data(), &hits, plan));
          views.push_back(owned.back().get());
        }
        const std::string at = "bytes " + std::to_string(bytes) + ", lanes " + std::to_string(lanes) + ", buffers " +
                               std::to_string(buffers);
        ASSERT_TRUE(staged_copy(src, plan, views).ok()) << at;
        for (size_t i = 0; i < src.size(); ++i) {
          ASSERT_EQ(hits[i], 1) << at << ": byte " << i << " written " << hits[i] << " times";
          ASSERT_EQ(dst[i], src[i]) << at << ": byte " << i;
        }
        for (size_t i = src.size(); i < dst.size(); ++i) ASSERT_EQ(hits[i], 0) << at << ": wrote past the end";
        for (const auto& lane : owned) EXPECT_TRUE(lane->finished()) << at;
      }
    }
  }
}

TEST(StagedCopy, AnEmptySourceCopiesNothing) {
  const StagingPlan plan = plan_staging(0, 4, 2, 128);
  EXPECT_TRUE(staged_copy({}, plan, {}).ok());
}

TEST(StagedCopy, AFailedCopyStopsEveryLaneAndLeavesNothingInFlight) {
  const std::vector<uint8_t> src = source(40 * 128);
  std::vector<uint8_t> dst(src.size(), 0);
  std::vector<int> hits(dst.size(), 0);
  const StagingPlan plan = plan_staging(static_cast<int64_t>(src.size()), 3, 2, 128);
  std::vector<std::unique_ptr<LateLane>> owned;
  std::vector<StagingLane*> views;
  for (int32_t l = 0; l < plan.lanes; ++l) {
    owned.push_back(std::make_unique<LateLane>(dst.data(), &hits, plan, l == 1 ? 2 : -1));  // lane 1's third send fails
    views.push_back(owned.back().get());
  }
  const Status s = staged_copy(src, plan, views);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDeviceError);
  EXPECT_NE(s.message().find("on fire"), std::string::npos) << s.message();
  for (const auto& lane : owned) {
    EXPECT_TRUE(lane->began());
    EXPECT_TRUE(lane->finished()) << "a lane left copies in flight";
  }
  EXPECT_EQ(owned[1]->sends(), 3) << "the failing lane went on after its error";
}

TEST(StagedCopy, RefusesAPlanThatDoesNotMatchTheLanes) {
  const std::vector<uint8_t> src = source(1000);
  std::vector<uint8_t> dst(src.size(), 0);
  std::vector<int> hits(dst.size(), 0);
  const StagingPlan plan = plan_staging(1000, 2, 2, 128);
  LateLane one(dst.data(), &hits, plan);
  StagingLane* views[] = {&one};
  EXPECT_EQ(staged_copy(src, plan, views).code(), StatusCode::kInternal);
  StagingPlan short_plan = plan;
  short_plan.chunks = 1;
  LateLane two(dst.data(), &hits, plan);
  StagingLane* both[] = {&one, &two};
  EXPECT_EQ(staged_copy(src, short_plan, both).code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace gearbox::internal
