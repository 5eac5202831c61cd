// The engine end to end on the CUDA device against the CPU device: the same engine file's
// logits on both, prefill and decode on either profile (the decode profile replays a
// captured CUDA graph), f32 and bf16 weights, the asynchronous return, and the refusal of
// batched networks (no CUDA kernels for them yet). Label `gpu`:
// skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "gearbox/logging.h"

#include "core/settings.h"
#include "devices/cuda/host_outputs.h"
#include "devices/cuda/linear_tactics.h"
#include "gearbox/profile_guard.h"
#include "ir/shape_inference.h"
#include "runtime/device_backend.h"
#include "runtime/engine_handle.h"
#include "test_engine.h"

namespace gearbox::testing {
namespace {

bool have_cuda() { return internal::device_backend(DeviceKind::kCuda).ok(); }

std::vector<float> run(Session& s, const TokenInputs& in, const ProfileRequest& request) {
  Tensor logits;
  Status st;
  if (request.kind() == ProfileRequest::Kind::kNamed) {
    auto pin = OptimizationProfileGuard::named(request.name());
    st = s.run(in.span(), std::span(&logits, 1));
  } else {
    auto pick = OptimizationProfileGuard::automatic();
    st = s.run(in.span(), std::span(&logits, 1));
  }
  EXPECT_TRUE(st.ok()) << st.to_string();
  return {logits.data<float>(), logits.data<float>() + logits.dims.volume()};
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return err / scale;
}

/// The debug log lines written while f() runs.
template <typename F>
std::vector<std::string> debug_lines(F&& f) {
  std::mutex mutex;
  std::vector<std::string> lines;
  const LogLevel level = log_level();
  set_log_level(LogLevel::kDebug);
  set_log_sink([&](LogLevel, std::string_view line) {
    const std::lock_guard<std::mutex> lock(mutex);
    lines.emplace_back(line);
  });
  f();
  set_log_sink(nullptr);
  set_log_level(level);
  return lines;
}

/// The debug lines that report a prefill graph captured for a shape met before.
int64_t shape_captures(const std::vector<std::string>& lines) {
  return std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("captured a graph for a shape it met before") != std::string::npos;
  });
}

/// `t` tokens at `position` on the prefill profile of both sessions: their logits agree.
void expect_prefill_matches(Session& gpu, Session& ref, int64_t vocab, int64_t t, int64_t position) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < t; ++i) ids.push_back((position * 13 + i * 7 + 5) % vocab);
  const TokenInputs call(ids, position);
  EXPECT_LT(relative_error(run(gpu, call, ProfileRequest::named("prefill")),
                           run(ref, call, ProfileRequest::named("prefill"))),
            2e-2)
      << t << " tokens at position " << position;
}

// The CUDA engine is built (tuned) on the GPU and the CPU engine from the same weights.
void compare_devices(DataType dtype, double tolerance) {
  models::Gemma3Config c = tiny_config();
  c.dtype = dtype;
  TestEngine cuda = make_engine(c, decode_prefill_profiles(32), 11, DeviceKind::kCuda);
  TestEngine cpu = make_engine(c, decode_prefill_profiles(32), 11, DeviceKind::kCpu);
  ASSERT_EQ(cuda.engine.device(), DeviceKind::kCuda);
  Result<Session> gpu = Session::create(cuda.engine), ref = Session::create(cpu.engine);
  ASSERT_TRUE(gpu.ok() && ref.ok());
  const TokenInputs prompt({2, 17, 40, 5, 66, 81, 9, 13, 50}, 0);  // past the sliding window of 4
  EXPECT_LT(relative_error(run(*gpu, prompt, ProfileRequest::named("prefill")),
                           run(*ref, prompt, ProfileRequest::named("prefill"))),
            tolerance);
  for (int64_t pos = 9; pos < 20; ++pos) {
    const TokenInputs step({(pos * 7) % 97}, pos);
    const ProfileRequest req = ProfileRequest::named(pos % 3 == 0 ? "prefill" : "decode");
    EXPECT_LT(relative_error(run(*gpu, step, req), run(*ref, step, req)), tolerance) << "position " << pos;
  }
}

TEST(CudaEngine, F32LogitsMatchTheCpuDevice) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  compare_devices(DataType::kF32, 1e-4);
}

TEST(CudaEngine, Bf16LogitsMatchTheCpuDevice) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  // Both devices read the same bf16 weights; the GEMMs also round activations to bf16.
  compare_devices(DataType::kBF16, 2e-2);
}

// A multi-output linear with stacked weights (ir::linear_weights_stacked: the builder lays
// out q/k/v and gate/up one after another) may run as one GEMM over them followed by a
// column split (for the QKV, whose q and k feed the per-head norm + RoPE chain, that chain
// reads them from the stacked output and copies v out of it), or as one GEMM per output.
// A gated MLP's gate / up GEMMs write bf16 outputs where their rows are whole 16-byte
// chunks. Both, forced on every such linear of the prefill profile (the tuner picks by time),
// give the CPU's logits.
TEST(CudaEngine, StackedAndPerOutputLinearsMatchTheCpu) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  Result<std::shared_ptr<const internal::DeviceBackend>> device = internal::device_backend(DeviceKind::kCuda);
  ASSERT_TRUE(device.ok());
  // intermediate 48: the gate / up GEMMs write 16-bit outputs that the activation reads;
  // 44 (rows not whole 16-byte chunks): f32 outputs.
  for (const int64_t intermediate : {48, 44}) {
    SCOPED_TRACE("intermediate " + std::to_string(intermediate));
    models::Gemma3Config c = tiny_config();
    c.dtype = DataType::kBF16;
    c.intermediate = intermediate;
    models::RandomWeights random(11);
    Result<models::BuiltModel> model = models::build_gemma3(c, random);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const ir::Network& net = model->network;
    internal::BuildOptions options;
    options.device = DeviceKind::kCuda;
    Result<format::EngineDesc> desc = internal::build_engine(net, decode_prefill_profiles(32), model->payload, options);
    ASSERT_TRUE(desc.ok()) << desc.status().to_string();
    TestEngine cpu = make_engine(c, decode_prefill_profiles(32), 11, DeviceKind::kCpu);
    const TokenInputs prompt({2, 17, 40, 5, 66, 81, 9, 13, 50}, 0);
    for (const char* linear : {"cublaslt_stacked", "cublaslt"}) {
      SCOPED_TRACE(linear);
      Result<Session> ref = Session::create(cpu.engine);
      ASSERT_TRUE(ref.ok());
      format::EngineDesc forced = *desc;
      int stacked = 0;
      format::ProfileTactics& prefill = forced.tactic_tables[0].profiles[1];
      for (size_t n = 0; n < net.nodes.size(); ++n) {
        if (!ir::linear_weights_stacked(net, net.nodes[n])) continue;
        prefill.tactic_per_node[n] = tactic_id(**device, net.nodes[n], linear);
        ++stacked;
      }
      EXPECT_EQ(stacked, 2 * c.layers) << "each layer's QKV and gate+up linears have stacked weights";
      Result<Engine> engine = testing::load_engine(forced, model->payload, DeviceKind::kCuda);
      ASSERT_TRUE(engine.ok()) << engine.status().to_string();
      Result<Session> gpu = Session::create(*engine);
      ASSERT_TRUE(gpu.ok());
      EXPECT_LT(relative_error(run(*gpu, prompt, ProfileRequest::named("prefill")),
                               run(*ref, prompt, ProfileRequest::named("prefill"))),
                2e-2);
      for (int64_t pos = 9; pos < 12; ++pos) {
        const TokenInputs step({(pos * 7) % 97}, pos);
        EXPECT_LT(relative_error(run(*gpu, step, ProfileRequest::named("prefill")),
                                 run(*ref, step, ProfileRequest::named("prefill"))),
                  2e-2)
            << "position " << pos;
      }
    }
  }
}

// The prefill profile's shapes vary, so its calls run launch by launch, except that a call
// whose addresses and dims were met before replays a graph captured then (at most 4 kept
// per profile, the least recently used replaced). Calls of one shape at new positions with
// new tokens (what a replay must read afresh), shapes that come back after being replaced,
// and one token at a time on that profile all give the CPU's logits; the debug log counts
// the captures.
TEST(CudaEngine, PrefillShapesThatComeBackReplayACapturedGraph) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  models::Gemma3Config c = tiny_config();
  c.dtype = DataType::kBF16;
  TestEngine cuda = make_engine(c, decode_prefill_profiles(32), 11, DeviceKind::kCuda);
  TestEngine cpu = make_engine(c, decode_prefill_profiles(32), 11, DeviceKind::kCpu);
  Result<Session> gpu = Session::create(cuda.engine), ref = Session::create(cpu.engine);
  ASSERT_TRUE(gpu.ok() && ref.ok());
  // 3 tokens: launches, capture 1, replay; 1, 2, 4, 5 and 6 tokens twice each (captures 2-6;
  // the graphs of 1 then 2 tokens replaced, 3 replayed twice in between); 1 token twice
  // again (met anew after its graph went: launches, capture 7). 53 positions of 64.
  const std::vector<int64_t> lengths = {3, 3, 3, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 1, 1};
  int64_t position = 0;
  const std::vector<std::string> lines = debug_lines([&] {
    for (int64_t t : lengths) {
      expect_prefill_matches(*gpu, *ref, c.vocab, t, position);
      position += t;
    }
  });
  ASSERT_LE(position, c.max_context);
  // GEARBOX_CUDA_SHAPE_GRAPHS=0: every call runs launch by launch, and the results above
  // still hold.
  EXPECT_EQ(shape_captures(lines), internal::settings().cuda_shape_graphs ? 7 : 0);
}

// Session::warm_up runs the prefill profile at its buckets' top row counts launch by launch
// and records none of them as a shape met: a request's first call of such a length then runs
// launch by launch too, and only its second captures a graph. Results match the CPU's.
TEST(CudaEngine, AWarmUpIsNoShapeMet) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  models::Gemma3Config c = tiny_config();
  c.dtype = DataType::kBF16;
  TestEngine cuda = make_engine(c, decode_prefill_profiles(32), 11, DeviceKind::kCuda);
  TestEngine cpu = make_engine(c, decode_prefill_profiles(32), 11, DeviceKind::kCpu);
  Result<Session> gpu = Session::create(cuda.engine), ref = Session::create(cpu.engine);
  ASSERT_TRUE(gpu.ok() && ref.ok());
  const Status warmed = gpu->warm_up();
  ASSERT_TRUE(warmed.ok()) << warmed.to_string();
  EXPECT_EQ(gpu->active_profile(), 0);
  int64_t position = 0;
  // 16 tokens: the prefill profile's opt and a bucket's top, which the warm-up ran.
  auto captures_of_a_call = [&] {
    const std::vector<std::string> lines = debug_lines([&] {
      expect_prefill_matches(*gpu, *ref, c.vocab, 16, position);
      position += 16;
    });
    return shape_captures(lines);
  };
  EXPECT_EQ(captures_of_a_call(), 0) << "the first call of the length";
  EXPECT_EQ(captures_of_a_call(), internal::settings().cuda_shape_graphs ? 1 : 0) << "the second";
}

// A profile whose row count spans several buckets (here 1 to 300 tokens: buckets to 16, 32,
// ... 512) stores, for each cuBLASLt linear, a row-bucketed tactic: the heuristic each
// bucket's timing chose (devices/cuda/linear_tactics.h), taken from the heuristics at the
// bucket's top row count for every row count in it. Whatever heuristic a bucket names,
// prompts at, below and just above bucket tops give the CPU's logits.
TEST(CudaEngine, CublasLtLinearsTakeAHeuristicPerRowBucket) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  Result<std::shared_ptr<const internal::DeviceBackend>> device = internal::device_backend(DeviceKind::kCuda);
  ASSERT_TRUE(device.ok());
  models::Gemma3Config c = tiny_config();
  c.dtype = DataType::kBF16;
  c.max_context = 320;
  models::RandomWeights random(11);
  Result<models::BuiltModel> model = models::build_gemma3(c, random);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const ir::Network& net = model->network;
  const std::vector<format::ProfileDesc> profiles = {seq_profile("decode", 1, 1, 1),
                                                     seq_profile("prefill", 1, 16, 300)};
  internal::BuildOptions options;
  options.device = DeviceKind::kCuda;
  Result<format::EngineDesc> desc = internal::build_engine(net, profiles, model->payload, options);
  ASSERT_TRUE(desc.ok()) << desc.status().to_string();
  namespace lt = cuda::linear_tactics;
  format::ProfileTactics& prefill = desc->tactic_tables[0].profiles[1];
  int bucketed = 0;
  for (size_t n = 0; n < net.nodes.size(); ++n) {
    const uint32_t t = prefill.tactic_per_node[n];
    if (net.nodes[n].kind != ir::OpKind::kLinear || !(lt::is_by_rows(t) || lt::is_per_output(t) || lt::is_stacked(t))) {
      continue;  // a GEMV, or not a linear
    }
    EXPECT_TRUE(lt::is_by_rows(t)) << net.nodes[n].name << " keeps one heuristic over 1 to 300 rows";
    EXPECT_EQ((*device)->tactic_name(net.nodes[n], t), lt::by_rows_name(t));
    // Each bucket to another heuristic than the timing chose (the next one, cyclically).
    std::array<int, lt::kRowBuckets> other{};
    for (int b = 0; b < lt::kRowBuckets; ++b) {
      other[static_cast<size_t>(b)] = (lt::heuristic(t, lt::bucket_top(b)) + 1 + b) % (lt::kAltAlgos + 1);
    }
    prefill.tactic_per_node[n] = lt::by_rows(lt::is_stacked(t), other);
    ++bucketed;
  }
  EXPECT_GT(bucketed, 0) << "the prefill profile runs some linear on cuBLASLt";
  TestEngine cpu = make_engine(c, profiles, 11, DeviceKind::kCpu);
  for (bool forced : {false, true}) {
    SCOPED_TRACE(forced ? "every bucket forced to another heuristic" : "as tuned");
    Result<format::EngineDesc> built = internal::build_engine(net, profiles, model->payload, options);
    ASSERT_TRUE(built.ok());
    Result<Engine> engine = testing::load_engine(forced ? *desc : *built, model->payload, DeviceKind::kCuda);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    for (int64_t T : {2, 9, 16, 17, 40, 100, 129, 300}) {
      std::vector<int64_t> ids;
      for (int64_t i = 0; i < T; ++i) ids.push_back((i * 31 + 7) % c.vocab);
      const TokenInputs prompt(ids, 0);
      Result<Session> gpu = Session::create(*engine), ref = Session::create(cpu.engine);
      ASSERT_TRUE(gpu.ok() && ref.ok());
      EXPECT_LT(relative_error(run(*gpu, prompt, ProfileRequest::named("prefill")),
                               run(*ref, prompt, ProfileRequest::named("prefill"))),
                2e-2)
          << T << " tokens";
    }
  }
}

// Prompts at, just above and well above large row bucket tops give the CPU's logits.
TEST(CudaEngine, PrefillRowsAroundLargeTopsMatchTheCpu) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  models::Gemma3Config c = tiny_config();
  c.dtype = DataType::kBF16;
  c.max_context = 1600;
  const std::vector<format::ProfileDesc> profiles = {seq_profile("decode", 1, 1, 1),
                                                     seq_profile("prefill", 1, 128, 1600)};
  TestEngine cuda = make_engine(c, profiles, 11, DeviceKind::kCuda);
  TestEngine cpu = make_engine(c, profiles, 11, DeviceKind::kCpu);
  Result<Session> gpu = Session::create(cuda.engine), ref = Session::create(cpu.engine);
  ASSERT_TRUE(gpu.ok() && ref.ok());
  for (int64_t T : {256, 257, 384, 385, 512, 513, 520, 700, 768, 769, 1024, 1100, 1536, 1537}) {
    expect_prefill_matches(*gpu, *ref, c.vocab, T, 0);
  }
}

// Decode on awkward shapes against the CPU, as a table: one query head per KV head, four,
// three; head_dim 8 to 256 (the attention's widest rows); hidden and intermediate sizes
// that are multiples of 8 but not of the 256 threads or the 4-float loads' 1024; sliding
// windows shorter than a split and positions spanning three key splits of 16.
TEST(CudaEngine, Bf16DecodeMatchesTheCpuOnAwkwardShapes) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  struct Shape {
    int hidden, intermediate, layers, heads, kv_heads, head_dim, window;
  };
  const Shape shapes[] = {
      {24, 40, 3, 2, 2, 16, 5},   // G = 1, a 3-layer pattern (sliding, sliding, global)
      {56, 104, 2, 8, 2, 8, 3},   // G = 4, head_dim 8
      {16, 24, 2, 1, 1, 256, 7},  // head_dim 256 > hidden
      {48, 8, 1, 3, 1, 32, 48},   // G = 3, a window past every position used
      {4104, 72, 1, 2, 1, 8, 9},  // hidden 4104: the row norms' loads take a second batch
  };
  for (const Shape& sh : shapes) {
    SCOPED_TRACE("hidden " + std::to_string(sh.hidden) + ", heads " + std::to_string(sh.heads) + "/" +
                 std::to_string(sh.kv_heads) + ", head_dim " + std::to_string(sh.head_dim));
    models::Gemma3Config c = tiny_config();
    c.dtype = DataType::kBF16;
    c.hidden = sh.hidden;
    c.intermediate = sh.intermediate;
    c.layers = sh.layers;
    c.heads = sh.heads;
    c.kv_heads = sh.kv_heads;
    c.head_dim = sh.head_dim;
    c.sliding_window = sh.window;
    c.layer_is_sliding.assign(static_cast<size_t>(sh.layers), true);
    c.layer_is_sliding.back() = sh.layers == 1;
    TestEngine cuda = make_engine(c, decode_prefill_profiles(48), 5, DeviceKind::kCuda);
    TestEngine cpu = make_engine(c, decode_prefill_profiles(48), 5, DeviceKind::kCpu);
    Result<Session> gpu = Session::create(cuda.engine), ref = Session::create(cpu.engine);
    ASSERT_TRUE(gpu.ok() && ref.ok());
    const TokenInputs prompt({3, 14, 15, 92, 65, 35, 89}, 0);
    EXPECT_LT(relative_error(run(*gpu, prompt, ProfileRequest::named("prefill")),
                             run(*ref, prompt, ProfileRequest::named("prefill"))),
              2e-2);
    for (int64_t pos = 7; pos < 41; ++pos) {
      const TokenInputs step({(pos * 11) % 97}, pos);
      const ProfileRequest req = ProfileRequest::named("decode");
      EXPECT_LT(relative_error(run(*gpu, step, req), run(*ref, step, req)), 2e-2) << "position " << pos;
    }
  }
}

TEST(CudaEngine, DeviceOutputsReturnWithoutWaiting) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  TestEngine t = make_engine(tiny_config(), decode_prefill_profiles(32), 11, DeviceKind::kCuda);
  Result<Session> s = Session::create(t.engine);
  Result<Stream> stream = Stream::create(DeviceKind::kCuda);
  ASSERT_TRUE(s.ok() && stream.ok());
  Result<DeviceMemory> out_memory = t.engine.allocate(97 * 4);
  ASSERT_TRUE(out_memory.ok());
  TensorView out{out_memory->data(), DataType::kF32, Dims(), MemoryKind::kDevice, out_memory->bytes()};
  const TokenInputs in({3}, 0);
  OptimizationProfileGuard pin(0);
  for (int i = 0; i < 3; ++i) {  // capture, then replays
    ASSERT_TRUE(s->run(in.span(), std::span(&out, 1), &*stream).ok());
    EXPECT_TRUE(s->handle()->inflight_pending());
  }
  ASSERT_TRUE(s->synchronize().ok());
  std::vector<float> got(97);
  ASSERT_TRUE(stream->synchronize().ok());
  Tensor host;
  ASSERT_TRUE(s->run(in.span(), std::span(&host, 1)).ok());
  // Copy the device result back through the engine's own path for comparison.
  Result<std::shared_ptr<const internal::DeviceBackend>> dev = internal::device_backend(DeviceKind::kCuda);
  ASSERT_TRUE(dev.ok());
  ASSERT_TRUE((*dev)->enqueue_copy(got.data(), out_memory->data(), 97 * 4, *stream->impl()).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  EXPECT_EQ(std::memcmp(got.data(), host.data<float>(), 97 * 4), 0);
}

// Host inputs and outputs go through page-locked staging that grows with the call: the
// caller's input buffers may be reused as soon as a run returns, even while its work is in
// flight, and calls of growing and shrinking lengths get the CPU's logits.
TEST(CudaEngine, HostInputsMayBeReusedOnceARunReturns) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  TestEngine cuda = make_engine(tiny_config(), decode_prefill_profiles(32), 11, DeviceKind::kCuda);
  TestEngine cpu = make_engine(tiny_config(), decode_prefill_profiles(32), 11, DeviceKind::kCpu);
  Result<Session> gpu = Session::create(cuda.engine), ref = Session::create(cpu.engine);
  ASSERT_TRUE(gpu.ok() && ref.ok());
  for (const std::vector<int64_t>& ids :
       {std::vector<int64_t>{5, 9}, std::vector<int64_t>{2, 17, 40, 5, 66, 81, 9, 13, 50}, std::vector<int64_t>{8}}) {
    const TokenInputs in(ids, 0);
    EXPECT_LT(relative_error(run(*gpu, in, ProfileRequest::named("prefill")),
                             run(*ref, in, ProfileRequest::named("prefill"))),
              1e-4)
        << ids.size() << " tokens";
  }
  // Device logits: the run returns with its work in flight; then the inputs are overwritten.
  Result<Session> async = Session::create(cuda.engine);
  ASSERT_TRUE(async.ok());
  Result<DeviceMemory> out_memory = cuda.engine.allocate(97 * 4);
  ASSERT_TRUE(out_memory.ok());
  TensorView out{out_memory->data(), DataType::kF32, Dims(), MemoryKind::kDevice, out_memory->bytes()};
  TokenInputs in({2, 17, 40, 5, 66, 81}, 0);
  {
    auto pin = OptimizationProfileGuard::named("prefill");
    ASSERT_TRUE(async->run(in.span(), std::span(&out, 1)).ok());
  }
  std::fill(in.tokens.begin(), in.tokens.end(), 96);
  std::fill(in.positions.begin(), in.positions.end(), 31);
  ASSERT_TRUE(async->synchronize().ok());
  std::vector<float> got(97);
  Result<Stream> stream = Stream::create(DeviceKind::kCuda);
  Result<std::shared_ptr<const internal::DeviceBackend>> dev = internal::device_backend(DeviceKind::kCuda);
  ASSERT_TRUE(stream.ok() && dev.ok());
  ASSERT_TRUE((*dev)->enqueue_copy(got.data(), out_memory->data(), 97 * 4, *stream->impl()).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  Result<Session> fresh = Session::create(cpu.engine);
  ASSERT_TRUE(fresh.ok());
  EXPECT_LT(relative_error(got, run(*fresh, TokenInputs({2, 17, 40, 5, 66, 81}, 0), ProfileRequest::named("prefill"))),
            1e-4);
  // Token ids in host memory, positions already on the device: only the host input is staged.
  Result<Session> mixed = Session::create(cuda.engine);
  ASSERT_TRUE(mixed.ok());
  const TokenInputs host_in({2, 17, 40, 5, 66, 81}, 0);
  Result<DeviceMemory> positions = cuda.engine.allocate(6 * 8);
  ASSERT_TRUE(positions.ok());
  ASSERT_TRUE((*dev)->enqueue_copy(positions->data(), host_in.positions.data(), 6 * 8, *stream->impl()).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  TensorView mixed_in[2] = {host_in.views[0], host_in.views[1]};
  mixed_in[1].data = positions->data();
  mixed_in[1].memory = MemoryKind::kDevice;
  Tensor logits;
  {
    auto pin = OptimizationProfileGuard::named("prefill");
    ASSERT_TRUE(mixed->run(mixed_in, std::span(&logits, 1)).ok());
  }
  EXPECT_LT(relative_error({logits.data<float>(), logits.data<float>() + logits.dims.volume()}, got), 1e-6);
}

TEST(CudaEngine, OutputsInPageLockedHostMemoryAreWrittenThereByDma) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  TestEngine cuda = make_engine(tiny_config(), decode_prefill_profiles(32), 11, DeviceKind::kCuda);
  TestEngine cpu = make_engine(tiny_config(), decode_prefill_profiles(32), 11, DeviceKind::kCpu);
  Result<std::shared_ptr<const internal::DeviceBackend>> dev = internal::device_backend(DeviceKind::kCuda);
  ASSERT_TRUE(dev.ok());
  // Room for two rows of 97 logits plus one float, so that a view may start off the base.
  Result<HostMemory> host = cuda.engine.allocate_host((2 * 97 + 1) * 4);
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  using Kind = cuda::HostMemoryKind;
  EXPECT_NE(cuda::host_memory_kind(host->data(), host->bytes()), Kind::kPageable);
  std::vector<float> pageable(97);
  EXPECT_EQ(cuda::host_memory_kind(pageable.data(), 97 * 4), Kind::kPageable);
  EXPECT_EQ(cuda::host_memory_kind(host->data(), host->bytes() + 4096), Kind::kPageable)
      << "a range running past the allocation";
  auto* floats = static_cast<float*>(host->data());
  Result<Session> gpu = Session::create(cuda.engine), ref = Session::create(cpu.engine);
  ASSERT_TRUE(gpu.ok() && ref.ok());
  for (const int offset : {0, 1}) {  // a view at the base, and one 4 bytes in
    for (const std::vector<int64_t>& ids : {std::vector<int64_t>{5, 9, 40}, std::vector<int64_t>{8}}) {
      std::fill(floats, floats + 2 * 97 + 1, std::nanf(""));
      TensorView out{floats + offset, DataType::kF32, Dims(), MemoryKind::kHost, 97 * 4};
      const TokenInputs in(ids, 0);
      {
        auto pin = OptimizationProfileGuard::named(ids.size() == 1 ? "decode" : "prefill");
        ASSERT_TRUE(gpu->run(in.span(), std::span(&out, 1)).ok());
      }
      ASSERT_EQ(out.dims.volume(), 97);
      const std::vector<float> got(floats + offset, floats + offset + 97);
      EXPECT_LT(relative_error(got, run(*ref, in, ProfileRequest::named(ids.size() == 1 ? "decode" : "prefill"))), 1e-4)
          << ids.size() << " tokens, offset " << offset;
      EXPECT_TRUE(std::isnan(floats[offset == 0 ? 97 : 0])) << "a float outside the view was written";
    }
  }
  // Too little room: an error, and the memory untouched.
  std::fill(floats, floats + 2 * 97 + 1, 1.5f);
  TensorView small{floats, DataType::kF32, Dims(), MemoryKind::kHost, 96 * 4};
  EXPECT_FALSE(gpu->run(TokenInputs({8}, 0).span(), std::span(&small, 1)).ok());
  EXPECT_EQ(floats[0], 1.5f);
  EXPECT_EQ(cuda.engine.allocate_host(-1).status().code(), StatusCode::kInvalidArgument);
}

// Where the device allows it (cuda::writes_output_to_host: the logits come from a
// GEMV that no kernel reads back), a call's host logits are the GEMV's own stores: into the
// caller's page-locked memory when it is the memory of the caller's previous call (a new
// address keeps the copy, so that a caller alternating buffers does not make the decode
// graph be captured again), into the session's page-locked staging for pageable memory (copied
// on to the caller's as the GEMV's progress slots say it lands, where the logits are large
// enough for that to pay: cuda::kHostProgressMinBytes).
// Every route gives the bytes a device output gets, inside the view only; a cuBLASLt logits
// linear keeps the copy. The tiny model with `vocab` logits.
void check_host_logits_routes(int64_t vocab) {
  Result<std::shared_ptr<const internal::DeviceBackend>> device = internal::device_backend(DeviceKind::kCuda);
  ASSERT_TRUE(device.ok());
  const internal::DeviceBackend& dev = **device;
  models::Gemma3Config c = tiny_config();
  c.dtype = DataType::kBF16;
  c.vocab = vocab;
  const bool copied_on = vocab * 4 >= cuda::kHostProgressMinBytes;
  models::RandomWeights random(11);
  Result<models::BuiltModel> model = models::build_gemma3(c, random);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const ir::Network& net = model->network;
  internal::BuildOptions options;
  options.device = DeviceKind::kCuda;
  Result<format::EngineDesc> desc = internal::build_engine(net, decode_prefill_profiles(32), model->payload, options);
  ASSERT_TRUE(desc.ok()) << desc.status().to_string();
  size_t head = net.nodes.size();
  for (size_t n = 0; n < net.nodes.size(); ++n) {
    if (std::find(net.nodes[n].outputs.begin(), net.nodes[n].outputs.end(), net.outputs[0]) !=
        net.nodes[n].outputs.end()) {
      head = n;
    }
  }
  ASSERT_LT(head, net.nodes.size());
  TestEngine cpu = make_engine(c, decode_prefill_profiles(32), 11, DeviceKind::kCpu);
  const auto tokens = [&](int64_t pos) { return TokenInputs({(pos * 7 + 3) % c.vocab}, pos); };
  constexpr int64_t kSteps = 6;
  for (const char* linear : {"gemv", "cublaslt"}) {
    SCOPED_TRACE(linear);
    const bool by_kernels = std::string(linear) == "gemv";
    format::EngineDesc forced = *desc;
    for (format::ProfileTactics& p : forced.tactic_tables[0].profiles)
      p.tactic_per_node[head] = tactic_id(dev, net.nodes[head], linear);
    EXPECT_EQ(cuda::writes_output_to_host(net, forced.tactic_tables[0].profiles[0].tactic_per_node, 0), by_kernels);
    Result<Engine> engine = testing::load_engine(forced, model->payload, DeviceKind::kCuda);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    // Two page-locked buffers, each with a guard float on both sides of the view.
    Result<HostMemory> locked[2] = {engine->allocate_host((c.vocab + 2) * 4), engine->allocate_host((c.vocab + 2) * 4)};
    ASSERT_TRUE(locked[0].ok() && locked[1].ok());
    // Each route: a fresh session decoding kSteps tokens; the logits of every step.
    enum Route { kDevice, kPageable, kSameLocked, kAlternatingLocked };
    const auto decode = [&](Route route, std::vector<std::string>* lines) {
      std::vector<std::vector<float>> steps;
      const auto body = [&] {
        Result<Session> s = Session::create(*engine);
        Result<DeviceMemory> out_memory = engine->allocate(c.vocab * 4);
        Result<Stream> stream = Stream::create(DeviceKind::kCuda);
        ASSERT_TRUE(s.ok() && out_memory.ok() && stream.ok());
        auto pin = OptimizationProfileGuard::named("decode");
        for (int64_t pos = 0; pos < kSteps; ++pos) {
          const TokenInputs in = tokens(pos);
          std::vector<float> got(static_cast<size_t>(c.vocab));
          if (route == kDevice) {
            TensorView out{out_memory->data(), DataType::kF32, Dims(), MemoryKind::kDevice, out_memory->bytes()};
            ASSERT_TRUE(s->run(in.span(), std::span(&out, 1), &*stream).ok());
            ASSERT_TRUE(s->synchronize().ok());
            ASSERT_TRUE(dev.enqueue_copy(got.data(), out_memory->data(), c.vocab * 4, *stream->impl()).ok());
            ASSERT_TRUE(stream->synchronize().ok());
          } else if (route == kPageable) {
            Tensor out;
            ASSERT_TRUE(s->run(in.span(), std::span(&out, 1)).ok());
            ASSERT_EQ(out.dims.volume(), c.vocab);
            std::memcpy(got.data(), out.data<float>(), got.size() * 4);
          } else {
            auto* floats = static_cast<float*>(locked[route == kAlternatingLocked ? pos % 2 : 0]->data());
            std::fill(floats, floats + c.vocab + 2, std::nanf(""));
            TensorView out{floats + 1, DataType::kF32, Dims(), MemoryKind::kHost, c.vocab * 4};
            ASSERT_TRUE(s->run(in.span(), std::span(&out, 1)).ok());
            EXPECT_TRUE(std::isnan(floats[0]) && std::isnan(floats[c.vocab + 1])) << "written outside the view";
            std::memcpy(got.data(), floats + 1, got.size() * 4);
          }
          steps.push_back(std::move(got));
        }
      };
      if (lines != nullptr) {
        *lines = debug_lines(body);
      } else {
        body();
      }
      return steps;
    };
    const auto count = [](const std::vector<std::string>& lines, const char* text) {
      return std::count_if(lines.begin(), lines.end(),
                           [&](const std::string& l) { return l.find(text) != std::string::npos; });
    };
    const std::vector<std::vector<float>> want = decode(kDevice, nullptr);
    Result<Session> ref = Session::create(cpu.engine);
    ASSERT_TRUE(ref.ok());
    for (int64_t pos = 0; pos < kSteps; ++pos) {
      EXPECT_LT(relative_error(want[static_cast<size_t>(pos)], run(*ref, tokens(pos), ProfileRequest::named("decode"))),
                2e-2)
          << "position " << pos;
    }
    for (const Route route : {kPageable, kSameLocked, kAlternatingLocked}) {
      SCOPED_TRACE("route " + std::to_string(route));
      std::vector<std::string> lines;
      const std::vector<std::vector<float>> got = decode(route, &lines);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), want[i].size() * 4), 0) << "step " << i;
      }
      const auto stores = [&](const char* where) { return count(lines, where); };
      const auto captures = count(lines, "captured its graph for new addresses");
      switch (route) {
        case kPageable:
          EXPECT_EQ(stores("the kernels' stores into page-locked staging"), by_kernels ? 1 : 0);
          EXPECT_EQ(stores("copied on to the caller's memory as they land"), by_kernels && copied_on ? 1 : 0);
          EXPECT_EQ(captures, 1);
          break;
        case kSameLocked:  // the first call copies; from the second on the GEMV stores (one more capture)
          EXPECT_EQ(stores("the kernels' stores into the caller's memory"), by_kernels ? 1 : 0);
          EXPECT_EQ(captures, by_kernels ? 2 : 1);
          break;
        case kAlternatingLocked:
          EXPECT_EQ(stores("the kernels' stores"), 0);
          EXPECT_EQ(captures, 1);
          break;
        case kDevice: break;
      }
    }
  }
  // What the device answers for outputs that a kernel reads back, or that do not exist.
  ir::Network read_back = net;
  read_back.nodes.back().inputs.push_back(net.outputs[0]);
  const std::vector<uint32_t> gemv(net.nodes.size(), tactic_id(dev, net.nodes[head], "gemv"));
  EXPECT_TRUE(cuda::writes_output_to_host(net, gemv, 0));
  EXPECT_FALSE(cuda::writes_output_to_host(read_back, gemv, 0));
  EXPECT_FALSE(cuda::writes_output_to_host(net, gemv, 1));
  EXPECT_FALSE(cuda::writes_output_to_host(net, std::span(gemv).first(head), 0)) << "too few tactics";
}

TEST(CudaEngine, HostLogitsAreStoredByTheLogitsGemvItself) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  check_host_logits_routes(97);
}

// Logits of 256 KiB and more (65539 x 4 bytes) are copied on to pageable memory as they land.
TEST(CudaEngine, LargeHostLogitsAreCopiedOnAsTheyLand) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  constexpr int64_t kVocab = 65539;
  ASSERT_GE(kVocab * 4, cuda::kHostProgressMinBytes) << "the test's logits no longer take the route";
  check_host_logits_routes(kVocab);
}

TEST(CudaEngine, ABadDeviceResidentTokenIdOrPositionIsReportedByTheWait) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  // The host cannot check ids and positions in device memory before enqueueing (it would
  // have to wait), so the kernels do: the call that waits for the run reports it, once.
  for (DataType dtype : {DataType::kF32, DataType::kBF16}) {
    SCOPED_TRACE(data_type_name(dtype));
    models::Gemma3Config c = tiny_config();
    c.dtype = dtype;
    TestEngine t = make_engine(c, decode_prefill_profiles(32), 11, DeviceKind::kCuda);
    Result<Session> s = Session::create(t.engine);
    Result<Stream> stream = Stream::create(DeviceKind::kCuda);
    Result<DeviceMemory> ids = t.engine.allocate(8), pos = t.engine.allocate(8), out_memory = t.engine.allocate(97 * 4);
    ASSERT_TRUE(s.ok() && stream.ok() && ids.ok() && pos.ok() && out_memory.ok());
    Result<std::shared_ptr<const internal::DeviceBackend>> dev = internal::device_backend(DeviceKind::kCuda);
    ASSERT_TRUE(dev.ok());
    const auto put = [&](DeviceMemory& m, int64_t v) {
      ASSERT_TRUE((*dev)->enqueue_copy(m.data(), &v, 8, *stream->impl()).ok());
      ASSERT_TRUE(stream->synchronize().ok());
    };
    TensorView in[2] = {{ids->data(), DataType::kI64, Dims{1, 1}, MemoryKind::kDevice},
                        {pos->data(), DataType::kI64, Dims{1, 1}, MemoryKind::kDevice}};
    TensorView device_out{out_memory->data(), DataType::kF32, Dims(), MemoryKind::kDevice, out_memory->bytes()};
    for (const char* profile : {"decode", "prefill"}) {  // a captured graph, and plain launches
      SCOPED_TRACE(profile);
      auto pin = OptimizationProfileGuard::named(profile);
      Tensor logits;
      // A token id past the vocabulary, host output: this run waits, so it reports it.
      put(*ids, 97);
      put(*pos, 0);
      Status st = s->run(in, std::span(&logits, 1), &*stream);
      EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
      EXPECT_NE(st.message().find("'tokens' in [0, 97)"), std::string::npos) << st.to_string();
      put(*ids, 5);
      st = s->run(in, std::span(&logits, 1), &*stream);
      EXPECT_TRUE(st.ok()) << "reported once: " << st.to_string();
      EXPECT_TRUE(std::isfinite(logits.data<float>()[0]));
      // A position past the KV cache, device output: the run returns at once, the wait reports.
      put(*pos, 1 << 20);
      st = s->run(in, std::span(&device_out, 1), &*stream);
      EXPECT_TRUE(st.ok()) << st.to_string();
      st = s->synchronize();
      EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
      EXPECT_NE(st.message().find("device-resident"), std::string::npos) << st.to_string();
      EXPECT_TRUE(s->synchronize().ok());
      put(*pos, 1);
      st = s->run(in, std::span(&logits, 1), &*stream);
      EXPECT_TRUE(st.ok()) << st.to_string();
      EXPECT_TRUE(std::isfinite(logits.data<float>()[0]));
    }
  }
}

}  // namespace
}  // namespace gearbox::testing
