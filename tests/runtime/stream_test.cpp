// The CPU stream: in order, asynchronous, sticky errors, events; and the page-locked buffers
// a device without them (the CPU) does not give.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <vector>

#include "gearbox/stream.h"
#include "runtime/device_backend.h"
#include "runtime/stream_impl.h"

namespace gearbox::internal {
namespace {

TEST(CpuStream, RunsWorkInOrderAndAsynchronously) {
  CpuStream stream;
  std::promise<void> go;
  std::shared_future<void> started = go.get_future().share();
  std::vector<int> order;
  ASSERT_TRUE(stream
                  .enqueue([started] {
                    started.wait();
                    return Status();
                  })
                  .ok());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(stream
                    .enqueue([&order, i] {
                      order.push_back(i);
                      return Status();
                    })
                    .ok());
  }
  Event event;
  ASSERT_TRUE(stream.record(event).ok());
  EXPECT_FALSE(event.query());  // held by the first task: enqueue did not wait
  go.set_value();
  EXPECT_TRUE(event.synchronize().ok());
  EXPECT_TRUE(event.query());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(CpuStream, AFailureIsStickyAndSkipsLaterWork) {
  CpuStream stream;
  std::atomic<bool> ran_after{false};
  ASSERT_TRUE(stream.enqueue([] { return device_error("boom"); }).ok());
  (void)stream.enqueue([&] {  // may already be refused: the first task can fail first
    ran_after = true;
    return Status();
  });
  EXPECT_EQ(stream.synchronize().code(), StatusCode::kDeviceError);
  EXPECT_FALSE(ran_after.load());
  Event event;
  EXPECT_EQ(stream.record(event).code(), StatusCode::kDeviceError);
  EXPECT_EQ(stream.enqueue([] { return Status(); }).code(), StatusCode::kDeviceError);
}

TEST(CpuStream, EventsOutliveTheirStreamAndDefaultEventsAreComplete) {
  Event fresh;
  EXPECT_TRUE(fresh.query());
  EXPECT_TRUE(fresh.synchronize().ok());
  Event event;
  {
    CpuStream stream;
    ASSERT_TRUE(stream.enqueue([] { return Status(); }).ok());
    ASSERT_TRUE(stream.record(event).ok());
  }  // the destructor drains the queue
  EXPECT_TRUE(event.query());
  EXPECT_TRUE(event.synchronize().ok());
}

TEST(Stream, PublicHandle) {
  Result<Stream> s = Stream::create(DeviceKind::kCpu);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->device(), DeviceKind::kCpu);
  EXPECT_TRUE(s->synchronize().ok());
  EXPECT_EQ(Stream::create(DeviceKind::kCpu, 1).status().code(), StatusCode::kNotFound);
}

// PinnedSource: none from a default source or from the CPU device (its memory is the
// host's), and the buffer asked for is left as it was.
TEST(PinnedSource, GivesNoneWhereTheDeviceHasNone) {
  int dummy = 0;
  DeviceBuffer into(&dummy, [](void*) {});
  PinnedSource none;
  EXPECT_FALSE(none.take(into, 64, "a test"));
  PinnedSource cpu(*cpu_backend());
  EXPECT_FALSE(cpu.take(into, 64, "a test"));
  EXPECT_FALSE(cpu.take(into, 64, "a test"));
  EXPECT_EQ(into.get(), &dummy);
}

}  // namespace
}  // namespace gearbox::internal
