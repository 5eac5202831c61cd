// Decode on its own profile vs on the prefill profile, the profile switch, and prefill,
// timed in wall-clock time (the work runs on the stream's thread, not the caller's),
// on the mini Gemma-3 (the seed's config) with the CPU device. Google Benchmark; numbers
// go to docs/PERFORMANCE.md.
//
//   build/release/bench/decode_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdio>
#include <memory>

#include "builder/builder.h"
#include "format/engine_file.h"
#include "gearbox/engine.h"
#include "gearbox/profile_guard.h"
#include "models/gemma3.h"
#include "runtime/engine_handle.h"

namespace {

using namespace gearbox;

constexpr int64_t kContext = 128;  // decode steps run after a 128-token prompt

Engine& mini_engine() {
  static Engine* engine = [] {
    models::Gemma3Config c = models::gemma3_mini_config();
    c.max_context = 1024;
    models::RandomWeights weights(1);
    Result<models::BuiltModel> model = models::build_gemma3(c, weights);
    if (!model.ok()) std::abort();
    const InputProfileBounds decode{Dims{1, 1}, Dims{1, 1}, Dims{1, 1}};
    const InputProfileBounds prefill{Dims{1, 1}, Dims{1, 128}, Dims{1, 1024}};
    internal::BuildOptions options;
    Result<format::EngineDesc> desc = internal::build_engine(
        model->network, {{"decode", {decode, decode}}, {"prefill", {prefill, prefill}}}, model->payload, options);
    if (!desc.ok()) std::abort();
    Result<std::vector<uint8_t>> bytes = format::serialize_engine(*desc, model->payload);
    Result<Engine> e = Engine::load_buffer(*bytes);
    if (!e.ok()) std::abort();
    return new Engine(std::move(*e));
  }();
  return *engine;
}

struct Step {
  int64_t token = 7, position = 0;
  TensorView in[2];
  Step() {
    in[0] = {&token, DataType::kI64, Dims{1, 1}};
    in[1] = {&position, DataType::kI64, Dims{1, 1}};
  }
};

Session prompted_session() {
  Result<Session> s = Session::create(mini_engine());
  if (!s.ok()) std::abort();
  std::vector<int64_t> ids(kContext), pos(kContext);
  for (int64_t i = 0; i < kContext; ++i) {
    ids[static_cast<size_t>(i)] = (i * 31) % 2048;
    pos[static_cast<size_t>(i)] = i;
  }
  TensorView in[2] = {{ids.data(), DataType::kI64, Dims{1, kContext}}, {pos.data(), DataType::kI64, Dims{1, kContext}}};
  Tensor logits;
  OptimizationProfileGuard pin(1);
  if (!s->run(in, std::span(&logits, 1)).ok()) std::abort();
  return std::move(*s);
}

// One decode step (token at position 128) on profile `state.range(0)`.
void BM_DecodeStep(benchmark::State& state) {
  Session s = prompted_session();
  const int32_t profile = static_cast<int32_t>(state.range(0));
  Step step;
  step.position = kContext;
  Tensor logits;
  OptimizationProfileGuard pin(profile);
  for (auto _ : state) {
    if (!s.run(step.in, std::span(&logits, 1)).ok()) state.SkipWithError("run failed");
  }
  state.SetLabel(profile == 0 ? "decode profile" : "prefill profile");
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeStep)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The switch alone: alternate profiles on the execution context (no network run).
void BM_ProfileSwitch(benchmark::State& state) {
  Result<Stream> stream = Stream::create(DeviceKind::kCpu);
  Result<std::unique_ptr<internal::ExecutionContext>> ctx = internal::ExecutionContext::create(mini_engine().core());
  if (!stream.ok() || !ctx.ok()) std::abort();
  int32_t profile = 0;
  for (auto _ : state) {
    profile ^= 1;
    if (!(*ctx)->set_optimization_profile_async(profile, *stream->impl()).ok()) state.SkipWithError("switch failed");
  }
  if (!stream->synchronize().ok()) state.SkipWithError("sync failed");
}
BENCHMARK(BM_ProfileSwitch)->Unit(benchmark::kMicrosecond)->UseRealTime();

// A decode step that switches profile every call (pins alternate): compare with
// BM_DecodeStep for the end-to-end cost of switching.
void BM_DecodeStepAlternatingProfiles(benchmark::State& state) {
  Session s = prompted_session();
  Step step;
  step.position = kContext;
  Tensor logits;
  int32_t profile = 0;
  for (auto _ : state) {
    profile ^= 1;
    OptimizationProfileGuard pin(profile);
    if (!s.run(step.in, std::span(&logits, 1)).ok()) state.SkipWithError("run failed");
  }
}
BENCHMARK(BM_DecodeStepAlternatingProfiles)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Prefill of `state.range(0)` tokens from position 0.
void BM_Prefill(benchmark::State& state) {
  Result<Session> s = Session::create(mini_engine());
  if (!s.ok()) std::abort();
  const int64_t n = state.range(0);
  std::vector<int64_t> ids(static_cast<size_t>(n)), pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    ids[static_cast<size_t>(i)] = (i * 17) % 2048;
    pos[static_cast<size_t>(i)] = i;
  }
  TensorView in[2] = {{ids.data(), DataType::kI64, Dims{1, n}}, {pos.data(), DataType::kI64, Dims{1, n}}};
  Tensor logits;
  OptimizationProfileGuard pin(1);
  for (auto _ : state) {
    if (!s->run(in, std::span(&logits, 1)).ok()) state.SkipWithError("run failed");
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * n), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Prefill)->Arg(16)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
