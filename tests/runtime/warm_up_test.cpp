// Session::warm_up: every profile runs once at the shapes its device names, with
// placeholder inputs; afterwards the session is on the profile it was on and computes what
// a session that was never warmed up computes. A shape the model refuses is skipped, a
// device failure is returned, and no pin warning is spent.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "gearbox/logging.h"
#include "gearbox/profile_guard.h"
#include "runtime/engine_handle.h"
#include "test_engine.h"

namespace gearbox::testing {
namespace {

class WarmUp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engine_ = new TestEngine(make_engine(tiny_config(), decode_prefill_profiles(32))); }
  static void TearDownTestSuite() { delete engine_; }

  static Session session() {
    Result<Session> s = Session::create(engine_->engine);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return std::move(*s);
  }
  /// The logits of a 9-token prompt (past the sliding window of 4), then of 6 decode steps
  /// alternating the two profiles by name.
  static std::vector<std::vector<float>> conversation(Session& s) {
    std::vector<std::vector<float>> all;
    auto call = [&](const TokenInputs& in, const char* profile) {
      auto pin = OptimizationProfileGuard::named(profile);
      Tensor logits;
      const Status st = s.run(in.span(), std::span(&logits, 1));
      EXPECT_TRUE(st.ok()) << st.to_string();
      all.emplace_back(logits.data<float>(), logits.data<float>() + logits.dims.volume());
    };
    call(TokenInputs({2, 17, 40, 5, 66, 81, 9, 13, 50}, 0), "prefill");
    for (int64_t pos = 9; pos < 15; ++pos)
      call(TokenInputs({(pos * 7) % 97}, pos), pos % 2 == 0 ? "decode" : "prefill");
    return all;
  }

  static TestEngine* engine_;
};
TestEngine* WarmUp::engine_ = nullptr;

TEST_F(WarmUp, LeavesTheProfileAndTheResultsAsTheyWere) {
  Session cold = session();
  const std::vector<std::vector<float>> want = conversation(cold);
  for (const int32_t start : {0, 1}) {
    SCOPED_TRACE("the session on profile " + std::to_string(start));
    Session warm = session();
    if (start == 1) {
      auto pin = OptimizationProfileGuard(1);
      Tensor logits;
      ASSERT_TRUE(warm.run(TokenInputs({3, 4}, 0).span(), std::span(&logits, 1)).ok());
    }
    ASSERT_EQ(warm.active_profile(), start);
    const Status s = warm.warm_up();
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(warm.active_profile(), start);
    // Bit for bit: the CPU device is deterministic, and no call reads a KV row before
    // writing it.
    EXPECT_EQ(conversation(warm), want);
  }
}

// SessionOptions::warm_up: create() warms the session up (it switches to the prefill profile
// and back: two switches a cold create does not make), and it computes what a cold session
// computes. Its debug lines: the session's creation and warm-up, and each warm-up call.
TEST_F(WarmUp, CreateWarmsUpWhereTheOptionsSay) {
  std::atomic<int> switches{0};
  std::vector<std::string> created;  // the sessions' own debug lines, in order
  std::vector<std::string> calls;    // the warm-up's, a line a call
  std::mutex mutex;
  const LogLevel was = log_level();
  set_log_level(LogLevel::kDebug);
  set_log_sink([&](LogLevel, std::string_view line) {
    if (line.find("switched to profile") != std::string_view::npos) ++switches;
    const std::lock_guard<std::mutex> lock(mutex);
    if (line.starts_with("session: created in")) created.emplace_back(line);
    if (line.starts_with("warm-up: profile")) calls.emplace_back(line);
  });
  Session cold = session();
  EXPECT_EQ(switches.load(), 0);
  SessionOptions options;
  options.warm_up = true;
  Result<Session> warm = Session::create(engine_->engine, options);
  set_log_sink(nullptr);
  set_log_level(was);
  ASSERT_TRUE(warm.ok()) << warm.status().to_string();
  EXPECT_EQ(switches.load(), 2);
  ASSERT_EQ(created.size(), 2u);
  EXPECT_NE(created[0].find("(no warm-up asked for)"), std::string::npos) << created[0];
  EXPECT_NE(created[1].find("ms after that"), std::string::npos) << created[1];
  EXPECT_EQ(created[1].find("no warm-up"), std::string::npos) << created[1];
  // One line a warm-up call (the CPU device: one a profile), naming the profile and the shape.
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_TRUE(calls[0].starts_with("warm-up: profile 0 '")) << calls[0];
  EXPECT_TRUE(calls[1].starts_with("warm-up: profile 1 '")) << calls[1];
  for (const std::string& c : calls) EXPECT_NE(c.find(" ms"), std::string::npos) << c;
  EXPECT_EQ(warm->active_profile(), 0);
  EXPECT_EQ(conversation(*warm), conversation(cold));
}

// The CPU device names each varying profile's smallest extent only: one call per profile,
// whatever guard the caller holds (the warm-up picks its own profiles).
TEST_F(WarmUp, RunsEveryProfileOnceOnTheCpuWhateverTheGuard) {
  Session s = session();
  int runs = 0;
  std::atomic<int> switches{0};
  s.handle()->fail_at = [&](internal::ExecuteStage stage) {
    if (stage == internal::ExecuteStage::kBeforeEnqueue) ++runs;
    return Status();
  };
  s.handle()->set_on_device_switch([&] { ++switches; });
  OptimizationProfileGuard pin(1);
  ASSERT_TRUE(s.warm_up().ok());
  s.handle()->fail_at = nullptr;
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(switches.load(), 2);  // onto the prefill profile, and back
  EXPECT_EQ(s.active_profile(), 0);
}

TEST_F(WarmUp, SkipsAShapeTheModelRefusesAndReturnsADeviceFailure) {
  Session s = session();
  s.handle()->fail_at = [](internal::ExecuteStage stage) {
    return stage == internal::ExecuteStage::kBeforeEnqueue ? invalid_argument("refused") : Status();
  };
  EXPECT_TRUE(s.warm_up().ok());
  s.handle()->fail_at = [](internal::ExecuteStage stage) {
    return stage == internal::ExecuteStage::kBeforeEnqueue ? device_error("the device failed") : Status();
  };
  const Status failed = s.warm_up();
  EXPECT_EQ(failed.code(), StatusCode::kDeviceError);
  EXPECT_NE(failed.message().find("warming up profile"), std::string::npos) << failed.to_string();
  EXPECT_NE(failed.message().find("the device failed"), std::string::npos) << failed.to_string();
  s.handle()->fail_at = nullptr;
}

// A warm-up pins each profile itself, not through a request: on a single-profile engine it
// spends no "pin ignored" warning, which the first ignored pin of a caller still gets.
TEST_F(WarmUp, SpendsNoPinWarningOnASingleProfileEngine) {
  TestEngine single = make_engine(tiny_config(), {seq_profile("only", 1, 4, 16)});
  std::atomic<int> warnings{0};
  set_log_sink([&](LogLevel level, std::string_view line) {
    if (level == LogLevel::kWarning && line.find("single profile") != std::string_view::npos) ++warnings;
  });
  Result<Session> s = Session::create(single.engine);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->warm_up().ok());
  EXPECT_EQ(warnings.load(), 0);
  {
    OptimizationProfileGuard pin(1);
    Tensor logits;
    EXPECT_TRUE(s->run(TokenInputs({1, 2}, 0).span(), std::span(&logits, 1)).ok());
  }
  set_log_sink(nullptr);
  EXPECT_EQ(warnings.load(), 1);
}

}  // namespace
}  // namespace gearbox::testing
