// Several threads, each with its own guard, on one engine: with their own sessions, and
// sharing one session. Run under TSan in CI.
#include <gtest/gtest.h>

#include <thread>

#include "gearbox/profile_guard.h"
#include "test_engine.h"

namespace gearbox::testing {
namespace {

std::vector<float> logits_of(Session& s, const TokenInputs& in) {
  Tensor t;
  const Status st = s.run(in.span(), std::span(&t, 1));
  EXPECT_TRUE(st.ok()) << st.to_string();
  return {t.data<float>(), t.data<float>() + t.dims.volume()};
}

// One thread's work: a prompt on prefill, then decode steps under the thread's own request.
std::vector<std::vector<float>> conversation(Session& s, int thread, const ProfileRequest& decode_request) {
  std::vector<std::vector<float>> out;
  std::vector<int64_t> prompt;
  for (int i = 0; i < 6; ++i) prompt.push_back((thread * 13 + i * 7) % 97);
  {
    auto pin = OptimizationProfileGuard::named("prefill");
    out.push_back(logits_of(s, TokenInputs(prompt, 0)));
  }
  for (int step = 0; step < 8; ++step) {
    const int64_t token = (thread * 5 + step * 3) % 97;
    if (decode_request.kind() == ProfileRequest::Kind::kAutomatic) {
      auto g = OptimizationProfileGuard::automatic();
      out.push_back(logits_of(s, TokenInputs({token}, 6 + step)));
    } else {
      OptimizationProfileGuard g(decode_request.index());
      out.push_back(logits_of(s, TokenInputs({token}, 6 + step)));
    }
  }
  return out;
}

TEST(Threads, EachThreadWithItsOwnSessionAndGuard) {
  TestEngine t = make_engine(tiny_config(), decode_prefill_profiles(32));
  constexpr int kThreads = 6;
  const ProfileRequest requests[] = {ProfileRequest::pinned(0), ProfileRequest::pinned(1), ProfileRequest::automatic()};
  std::vector<std::vector<std::vector<float>>> expected(kThreads), got(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    Result<Session> s = Session::create(t.engine);
    ASSERT_TRUE(s.ok());
    expected[static_cast<size_t>(i)] = conversation(*s, i, requests[i % 3]);
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      Result<Session> s = Session::create(t.engine);
      ASSERT_TRUE(s.ok());
      got[static_cast<size_t>(i)] = conversation(*s, i, requests[i % 3]);
    });
  }
  for (std::thread& th : threads) th.join();
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_EQ(got[static_cast<size_t>(i)].size(), expected[static_cast<size_t>(i)].size());
    for (size_t k = 0; k < got[static_cast<size_t>(i)].size(); ++k) {
      // The decode profile and the prefill profile use different kernels: compare within
      // rounding, not bit for bit, only where the requests differ; here they are the same.
      EXPECT_EQ(got[static_cast<size_t>(i)][k], expected[static_cast<size_t>(i)][k]) << "thread " << i << " call " << k;
    }
  }
}

TEST(Threads, ManyThreadsShareOneSession) {
  TestEngine t = make_engine(tiny_config(), decode_prefill_profiles(32));
  Result<Session> shared = Session::create(t.engine);
  ASSERT_TRUE(shared.ok());
  // Every call starts at position 0, so its result does not depend on the others' KV rows.
  const TokenInputs one({42}, 0);
  const TokenInputs prompt({1, 2, 3, 4}, 0);
  std::vector<float> want_one, want_prompt;
  {
    Result<Session> ref = Session::create(t.engine);
    ASSERT_TRUE(ref.ok());
    OptimizationProfileGuard pin(0);
    want_one = logits_of(*ref, one);
    OptimizationProfileGuard pin1(1);
    want_prompt = logits_of(*ref, prompt);
  }
  constexpr int kThreads = 8;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 20; ++k) {
        if ((i + k) % 2 == 0) {
          OptimizationProfileGuard pin(0);
          if (logits_of(*shared, one) != want_one) ++mismatches[static_cast<size_t>(i)];
        } else {
          auto pick = OptimizationProfileGuard::automatic();
          if (logits_of(*shared, prompt) != want_prompt) ++mismatches[static_cast<size_t>(i)];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(mismatches[static_cast<size_t>(i)], 0) << "thread " << i;
}

}  // namespace
}  // namespace gearbox::testing
