// The engine end to end on the CPU device: logits against a double-precision Gemma-3
// reference, prefill vs token-by-token decode, the builder's per-profile tactics, and the
// file round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "gearbox/logging.h"
#include "gearbox/profile_guard.h"
#include "gemma_reference.h"
#include "runtime/engine_core.h"
#include "test_engine.h"

namespace gearbox::testing {
namespace {

// Under ThreadSanitizer every memory access is instrumented, which changes which of two
// kernels runs faster: tests that check what timing chose skip those checks there.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kTimingDistorted = true;
#else
constexpr bool kTimingDistorted = false;
#endif
#elif defined(__SANITIZE_THREAD__)
constexpr bool kTimingDistorted = true;
#else
constexpr bool kTimingDistorted = false;
#endif

std::vector<int64_t> random_tokens(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> d(0, vocab - 1);
  std::vector<int64_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

// Max |got - want| / max|want| over a logits row; the error bound is relative to the
// row's scale because logits of random weights are small.
double row_error(const float* got, const std::vector<double>& want) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(std::isfinite(got[i])) << "logit " << i;
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

constexpr double kLogitTolerance = 2e-5;  // f32 compute vs a double reference, 2 layers

TEST(Engine, PrefillLogitsMatchTheReference) {
  const models::Gemma3Config c = tiny_config();
  TestEngine t = make_engine(c, decode_prefill_profiles(32));
  const GemmaReference ref(c, t.model);
  for (size_t len : {1u, 3u, 9u, 32u}) {  // 9 and 32 run past the sliding window of 4
    Result<Session> session = Session::create(t.engine);
    ASSERT_TRUE(session.ok()) << session.status().to_string();
    const std::vector<int64_t> ids = random_tokens(len, c.vocab, static_cast<uint32_t>(len));
    TokenInputs in(ids, 0);
    Tensor logits;
    auto pick = OptimizationProfileGuard::automatic();
    ASSERT_TRUE(session->run(in.span(), std::span(&logits, 1)).ok());
    EXPECT_EQ(logits.dims, (Dims{1, 1, c.vocab}));
    EXPECT_LT(row_error(logits.data<float>(), ref.forward(ids).back()), kLogitTolerance) << "length " << len;
  }
}

TEST(Engine, DecodeStepsMatchTheReferenceOnEitherProfile) {
  const models::Gemma3Config c = tiny_config();
  TestEngine t = make_engine(c, decode_prefill_profiles(32));
  const GemmaReference ref(c, t.model);
  const std::vector<int64_t> ids = random_tokens(14, c.vocab, 3);
  const auto want = ref.forward(ids);
  for (const char* decode_profile : {"decode", "prefill"}) {
    Result<Session> session = Session::create(t.engine);
    ASSERT_TRUE(session.ok());
    Tensor logits;
    {
      auto pin = OptimizationProfileGuard::named("prefill");
      TokenInputs prompt({ids.begin(), ids.begin() + 5}, 0);
      ASSERT_TRUE(session->run(prompt.span(), std::span(&logits, 1)).ok());
      EXPECT_LT(row_error(logits.data<float>(), want[4]), kLogitTolerance);
    }
    for (size_t pos = 5; pos < ids.size(); ++pos) {
      auto pin = OptimizationProfileGuard::named(decode_profile);
      TokenInputs step({ids[pos]}, static_cast<int64_t>(pos));
      ASSERT_TRUE(session->run(step.span(), std::span(&logits, 1)).ok());
      EXPECT_EQ(session->active_profile(), std::string(decode_profile) == "decode" ? 0 : 1);
      EXPECT_LT(row_error(logits.data<float>(), want[pos]), kLogitTolerance) << decode_profile << " pos " << pos;
    }
  }
}

TEST(Engine, AllocateHostGivesMemoryARunWritesInto) {
  const models::Gemma3Config c = tiny_config();
  TestEngine t = make_engine(c, decode_prefill_profiles(32));
  const GemmaReference ref(c, t.model);
  // On the CPU device: ordinary memory, 64-byte aligned, that outputs land in as any host memory.
  Result<HostMemory> host = t.engine.allocate_host(c.vocab * 4);
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  EXPECT_EQ(host->bytes(), c.vocab * 4);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(host->data()) % 64, 0u);
  auto* floats = static_cast<float*>(host->data());
  std::fill(floats, floats + c.vocab, std::nanf(""));
  Result<Session> session = Session::create(t.engine);
  ASSERT_TRUE(session.ok());
  const std::vector<int64_t> ids = random_tokens(3, c.vocab, 8);
  TokenInputs in(ids, 0);
  TensorView out{floats, DataType::kF32, Dims(), MemoryKind::kHost, host->bytes()};
  auto pick = OptimizationProfileGuard::automatic();
  ASSERT_TRUE(session->run(in.span(), std::span(&out, 1)).ok());
  EXPECT_EQ(out.dims, (Dims{1, 1, c.vocab}));
  EXPECT_LT(row_error(floats, ref.forward(ids).back()), kLogitTolerance);
  EXPECT_EQ(t.engine.allocate_host(-1).status().code(), StatusCode::kInvalidArgument);
  Result<HostMemory> empty = t.engine.allocate_host(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->bytes(), 0);
}

// At debug level a load says where its time went: each phase's end in ms from its start, in
// the order the phases end.
TEST(Engine, ADebugLoadLogsItsPhasesInOrder) {
  TestEngine t = make_engine(tiny_config(), decode_prefill_profiles(32));
  std::vector<std::string> lines;
  std::mutex mutex;
  const LogLevel was = log_level();
  set_log_level(LogLevel::kDebug);
  set_log_sink([&](LogLevel level, std::string_view line) {
    const std::lock_guard<std::mutex> lock(mutex);
    if (level == LogLevel::kDebug && line.starts_with("engine load")) lines.emplace_back(line);
  });
  Result<Engine> loaded = load_bytes(t.bytes, DeviceKind::kCpu);
  set_log_sink(nullptr);
  set_log_level(was);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  ASSERT_EQ(lines.size(), 1u);
  const std::optional<internal::LoadPhases> p = internal::parse_load_phases(lines[0]);
  ASSERT_TRUE(p.has_value()) << lines[0];
  EXPECT_NE(lines[0].find("cpu device"), std::string::npos) << lines[0];
  EXPECT_GE(p->parsed_ms, 0.0);
  EXPECT_LE(p->parsed_ms, p->device_ready_ms);
  EXPECT_LE(p->device_ready_ms, p->uploaded_ms);
  EXPECT_LE(p->uploaded_ms, p->checked_ms);
  EXPECT_LE(p->checked_ms, p->planned_ms);
}

TEST(Engine, AllLogitsNetworkMatchesTheReferenceAtEveryPosition) {
  models::Gemma3Config c = tiny_config();
  c.all_logits = true;
  c.dtype = DataType::kBF16;  // bf16 weights, converted once at upload
  TestEngine t = make_engine(c, {seq_profile("prefill", 1, 8, 16)});
  const GemmaReference ref(c, t.model);
  const std::vector<int64_t> ids = random_tokens(11, c.vocab, 5);
  Result<Session> session = Session::create(t.engine);
  ASSERT_TRUE(session.ok());
  TokenInputs in(ids, 0);
  Tensor logits;
  ASSERT_TRUE(session->run(in.span(), std::span(&logits, 1)).ok());
  ASSERT_EQ(logits.dims, (Dims{1, 11, c.vocab}));
  const auto want = ref.forward(ids);
  for (size_t p = 0; p < ids.size(); ++p) {
    EXPECT_LT(row_error(logits.data<float>() + p * static_cast<size_t>(c.vocab), want[p]), kLogitTolerance) << p;
  }
}

TEST(Builder, ChoosesTacticsPerProfile) {
  TestEngine t = make_engine(tiny_config(), decode_prefill_profiles(32));
  const internal::EngineCore& core = *t.engine.core();
  const ir::Network& net = core.network();
  const std::span<const uint32_t> decode = core.tactics(0), prefill = core.tactics(1);
  int small_m_in_decode = 0;
  for (size_t n = 0; n < net.nodes.size(); ++n) {
    if (net.nodes[n].kind != ir::OpKind::kLinear) continue;
    const Dims& x = core.max_dims(1)[static_cast<size_t>(net.nodes[n].inputs[0])];
    if (x.volume() / x[x.rank() - 1] > 8) {  // the logits after take_last have one row even in prefill
      EXPECT_EQ(prefill[n], 2u) << "small-M linear is invalid for up to 32 rows: " << net.nodes[n].name;
    }
    small_m_in_decode += decode[n] == 1u ? 1 : 0;
  }
  if (!kTimingDistorted) {  // what the timing chose (the validity check above holds everywhere)
    EXPECT_GT(small_m_in_decode, 0) << "the decode profile should pick the one-pass small-M linear somewhere";
    EXPECT_NE(std::vector<uint32_t>(decode.begin(), decode.end()),
              std::vector<uint32_t>(prefill.begin(), prefill.end()));
  }
  // The tactic table records a time for every node and an arena for every profile.
  const format::TacticTable& table = core.desc().tactic_tables.at(0);
  for (const format::ProfileTactics& p : table.profiles) {
    EXPECT_EQ(p.time_us_per_node.size(), net.nodes.size());
    EXPECT_GT(p.arena_bytes, 0u);
  }
  EXPECT_LT(table.profiles[0].arena_bytes, table.profiles[1].arena_bytes);
  EXPECT_EQ(core.arena_bytes(), static_cast<int64_t>(table.profiles[1].arena_bytes));
}

TEST(Builder, RejectsBadProfiles) {
  const models::Gemma3Config c = tiny_config();
  models::RandomWeights w(1);
  Result<models::BuiltModel> m = models::build_gemma3(c, w);
  ASSERT_TRUE(m.ok());
  struct Case {
    std::vector<format::ProfileDesc> profiles;
    const char* message;
  };
  const Case cases[] = {
      {{}, "at least one"},
      {{seq_profile("a", 1, 1, 1), seq_profile("a", 1, 2, 4)}, "used twice"},
      {{seq_profile("", 1, 1, 1)}, "has no name"},
      {{seq_profile("a", 4, 2, 8)}, "min <= opt <= max"},
      {{seq_profile("a", 0, 1, 8)}, "must be >= 1"},
      {{seq_profile("a", 1, 8, 65)}, "do not fit the context of 64"},
      {{{"a", {{Dims{1, 1}, Dims{1, 1}, Dims{1, 1}}}}}, "1 bounds for 2 network inputs"},
      {{{"a", {{Dims{2, 1}, Dims{2, 1}, Dims{2, 1}}, {Dims{2, 1}, Dims{2, 1}, Dims{2, 1}}}}}, "built for 1"},
  };
  for (const Case& k : cases) {
    internal::BuildOptions options;
    Result<format::EngineDesc> d = internal::build_engine(m->network, k.profiles, m->payload, options);
    ASSERT_FALSE(d.ok()) << k.message;
    EXPECT_NE(d.status().message().find(k.message), std::string::npos) << d.status().to_string();
  }
}

TEST(Engine, LoadsFromAFileAndReportsMissingOrDamagedFiles) {
  TestEngine t = make_engine(tiny_config(), decode_prefill_profiles(16));
  const std::string path = (std::filesystem::temp_directory_path() / "gearbox_engine_test.gbx").string();
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(t.bytes.data(), 1, t.bytes.size(), f), t.bytes.size());
    std::fclose(f);
  }
  Result<Engine> loaded = Engine::load_file(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->profiles().size(), 2);
  EXPECT_EQ(loaded->profiles().names[1], "prefill");
  EXPECT_EQ(loaded->inputs()[0].name, "tokens");
  EXPECT_EQ(loaded->outputs()[0].name, "logits");
  EXPECT_EQ(loaded->max_context(), 64);
  EXPECT_GT(loaded->weight_bytes(), 0);

  EXPECT_EQ(Engine::load_file(path + ".missing").status().code(), StatusCode::kNotFound);
  std::vector<uint8_t> damaged = t.bytes;
  damaged[damaged.size() / 2] ^= 0x40;
  EXPECT_EQ(Engine::load_buffer(damaged).status().code(), StatusCode::kDataLoss);
  // A damaged weight: the load checks the payload while it uploads, with parse_engine's message.
  damaged = t.bytes;
  damaged[damaged.size() - 5] ^= 0x40;
  const Status weight = Engine::load_buffer(damaged).status();
  EXPECT_EQ(weight.code(), StatusCode::kDataLoss);
  EXPECT_NE(weight.message().find("payload checksum mismatch"), std::string::npos) << weight.message();
  std::filesystem::remove(path);
}

// An engine whose payload spans three checksum chunks (format 4: the tiny model's weights,
// then bytes no weight reads) loads, checking its chunks on threads while it uploads, and
// gives the logits of the same weights in a one-chunk engine; a damaged chunk fails the
// load by its byte range.
TEST(Engine, AVersionFourEngineLoadsAndADamagedChunkIsNamed) {
  TestEngine t = make_engine(tiny_config(), decode_prefill_profiles(16));
  Result<format::ParsedEngine> parsed = format::parse_engine(t.bytes);
  ASSERT_TRUE(parsed.ok());
  std::vector<uint8_t> payload = t.model.payload;
  payload.resize(2 * format::kPayloadChunkBytes + 100, 0x5A);
  Result<std::vector<uint8_t>> bytes = format::serialize_engine(parsed->desc, payload);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  uint32_t version = 0;
  std::memcpy(&version, bytes->data() + 8, 4);
  ASSERT_EQ(version, 4u);

  const auto logits_of = [](const Engine& engine) {
    Result<Session> session = Session::create(engine);
    EXPECT_TRUE(session.ok());
    TokenInputs in({5, 9, 2}, 0);
    Tensor logits;
    auto pick = OptimizationProfileGuard::automatic();
    EXPECT_TRUE(session->run(in.span(), std::span(&logits, 1)).ok());
    const float* v = logits.data<float>();
    return std::vector<float>(v, v + logits.dims.volume());
  };
  Result<Engine> large = Engine::load_buffer(*bytes);
  ASSERT_TRUE(large.ok()) << large.status().to_string();
  EXPECT_EQ(logits_of(*large), logits_of(t.engine));

  std::vector<uint8_t>& damaged = *bytes;
  damaged[damaged.size() - 50] ^= 0x40;  // in the last chunk
  const Status s = Engine::load_buffer(damaged).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("payload checksum mismatch in bytes 67108864 to 67108964 of the payload (chunk 2 of 3)"),
            std::string::npos)
      << s.to_string();
}

TEST(Engine, TunesAtLoadWhenTheFileHasNoTacticsForTheDevice) {
  TestEngine t = make_engine(tiny_config(), decode_prefill_profiles(16));
  Result<format::ParsedEngine> parsed = format::parse_engine(t.bytes);
  ASSERT_TRUE(parsed.ok());
  format::EngineDesc desc = parsed->desc;
  desc.tactic_tables.clear();
  Result<std::vector<uint8_t>> bytes = format::serialize_engine(desc, t.model.payload);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  Result<Engine> engine = Engine::load_buffer(*bytes);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Result<Session> session = Session::create(*engine);
  ASSERT_TRUE(session.ok());
  TokenInputs in({1, 2, 3}, 0);
  Tensor logits;
  auto pick = OptimizationProfileGuard::automatic();
  EXPECT_TRUE(session->run(in.span(), std::span(&logits, 1)).ok());
}

}  // namespace
}  // namespace gearbox::testing
