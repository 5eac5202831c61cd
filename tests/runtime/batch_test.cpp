// Batched networks on one device (the CPU; built with GEARBOX_TEST_CUDA, the CUDA device,
// skipped without a GPU): rows of different lengths give, row for row, the logits each
// sequence gives alone; KV-cache slots are checked, released and reused without exposing an
// earlier sequence's keys; rejected calls change no state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/check.h"
#include "format/engine_file.h"
#include "gearbox/engine.h"
#include "gearbox/profile_guard.h"
#include "models/decoder.h"
#include "models/gemma3.h"
#include "runtime/device_backend.h"
#include "runtime/engine_handle.h"
#include "test_engine.h"

namespace gearbox {
namespace {

constexpr int64_t kMaxBatch = 8;
constexpr int64_t kMaxSeq = 24;
constexpr int kDecodeSteps = 16;
#ifdef GEARBOX_TEST_CUDA
constexpr DeviceKind kDevice = DeviceKind::kCuda;
// A row alone and in a batch take different kernels there (a GEMV of one row, a GEMM or a
// GEMV of several), whose f32 sums add in other orders.
constexpr float kTolerance = 1e-4f;
#else
constexpr DeviceKind kDevice = DeviceKind::kCpu;
constexpr float kTolerance = 1e-5f;
#endif

/// Skips the test where this build's device is not there (the CUDA variant without a GPU).
#define SKIP_WITHOUT_DEVICE() \
  if (!internal::device_backend(kDevice).ok()) GTEST_SKIP() << device_kind_name(kDevice) << " device not present"

// decode: B x 1 for B in [1, 8]; prefill: B x S for S in [1, 24].
std::vector<format::ProfileDesc> batch_profiles() {
  auto profile = [](const std::string& name, int64_t seq_min, int64_t seq_opt, int64_t seq_max) {
    const InputProfileBounds rows{Dims{1, seq_min}, Dims{4, seq_opt}, Dims{kMaxBatch, seq_max}};
    const InputProfileBounds slots{Dims{1}, Dims{4}, Dims{kMaxBatch}};
    return format::ProfileDesc{name, {rows, rows, slots}};
  };
  return {profile("decode", 1, 1, 1), profile("prefill", 1, 8, kMaxSeq)};
}

testing::TestEngine make_batched_engine(DeviceKind device = kDevice) {
  models::DecoderDescription d = models::gemma3_description(testing::tiny_config());
  d.max_batch = kMaxBatch;
  models::RandomWeights weights(7);
  Result<models::BuiltModel> model = models::build_decoder(d, weights);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return testing::engine_from_model(std::move(*model), batch_profiles(), device, 1);
}

const testing::TestEngine& shared_engine() {
  static const testing::TestEngine engine = make_batched_engine();
  return engine;
}

Session new_session(const Engine& engine) {
  Result<Session> s = Session::create(engine);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(*s);
}

// One call's rows: each row's tokens (left-padded with token 0 at position -1 to the
// longest), its first position and its slot.
struct Row {
  std::vector<int64_t> tokens;
  int64_t start = 0;
  int64_t slot = 0;
};

struct CallInputs {
  std::vector<int64_t> tokens, positions, slots;
  TensorView views[3];
  explicit CallInputs(const std::vector<Row>& rows) {
    size_t seq = 0;
    for (const Row& r : rows) seq = std::max(seq, r.tokens.size());
    for (const Row& r : rows) {
      const size_t pad = seq - r.tokens.size();
      for (size_t t = 0; t < seq; ++t) {
        tokens.push_back(t < pad ? 0 : r.tokens[t - pad]);
        positions.push_back(t < pad ? -1 : r.start + static_cast<int64_t>(t - pad));
      }
      slots.push_back(r.slot);
    }
    const Dims d{static_cast<int64_t>(rows.size()), static_cast<int64_t>(seq)};
    views[0] = {tokens.data(), DataType::kI64, d};
    views[1] = {positions.data(), DataType::kI64, d};
    views[2] = {slots.data(), DataType::kI64, Dims{static_cast<int64_t>(rows.size())}};
  }
};

// Runs one call; returns the logits, [rows, vocab].
Result<std::vector<float>> run(Session& session, const std::vector<Row>& rows) {
  CallInputs in(rows);
  Tensor logits;
  auto pick = OptimizationProfileGuard::automatic();
  GEARBOX_RETURN_IF_ERROR(session.run(in.views, std::span(&logits, 1)));
  const auto* f = logits.data<float>();
  return std::vector<float>(f, f + logits.dims.volume());
}

std::vector<int64_t> prompt(int64_t length, int64_t seed) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back((seed * 31 + i * 7 + 3) % 97);
  return ids;
}

int64_t decode_token(int64_t step, int64_t seq) { return (step * 13 + seq * 5 + 1) % 97; }

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return std::numeric_limits<float>::infinity();
    m = std::max(m, std::abs(a[i] - b[i]));
  }
  return m;
}

// Per step (prefill, then each decode), the logits of one sequence run alone.
std::vector<std::vector<float>> run_alone(const Engine& engine, const std::vector<int64_t>& ids, int64_t seq) {
  Session session = new_session(engine);
  std::vector<std::vector<float>> steps;
  Result<std::vector<float>> prefill = run(session, {{ids, 0, 0}});
  EXPECT_TRUE(prefill.ok()) << prefill.status().to_string();
  steps.push_back(*prefill);
  for (int step = 0; step < kDecodeSteps; ++step) {
    Result<std::vector<float>> r =
        run(session, {{{decode_token(step, seq)}, static_cast<int64_t>(ids.size()) + step, 0}});
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    steps.push_back(*r);
  }
  return steps;
}

class BatchRows : public ::testing::TestWithParam<int64_t> {};

TEST_P(BatchRows, EachRowGivesTheLogitsOfItsSequenceAlone) {
  SKIP_WITHOUT_DEVICE();
  const int64_t batch = GetParam();
  const Engine& engine = shared_engine().engine;
  const int64_t vocab = 97;
  const int64_t lengths[] = {5, 13, 2, 9, 1, 17, 7, 11};
  std::vector<std::vector<int64_t>> prompts;
  std::vector<Row> rows;
  for (int64_t b = 0; b < batch; ++b) {
    prompts.push_back(prompt(lengths[b], b));
    rows.push_back({prompts.back(), 0, (b * 3 + 1) % kMaxBatch});  // slots apart from row order
  }
  Session session = new_session(engine);
  std::vector<std::vector<std::vector<float>>> batched(static_cast<size_t>(kDecodeSteps + 1));
  Result<std::vector<float>> prefill = run(session, rows);
  ASSERT_TRUE(prefill.ok()) << prefill.status().to_string();
  batched[0].push_back(*prefill);
  for (int step = 0; step < kDecodeSteps; ++step) {
    std::vector<Row> decode;
    for (int64_t b = 0; b < batch; ++b) {
      decode.push_back({{decode_token(step, b)}, lengths[b] + step, rows[static_cast<size_t>(b)].slot});
    }
    Result<std::vector<float>> r = run(session, decode);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    batched[static_cast<size_t>(step + 1)].push_back(*r);
  }
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<std::vector<float>> alone = run_alone(engine, prompts[static_cast<size_t>(b)], b);
    for (size_t step = 0; step < alone.size(); ++step) {
      const std::span<const float> row(batched[step][0].data() + b * vocab, static_cast<size_t>(vocab));
      EXPECT_LE(max_abs_diff(row, alone[step]), kTolerance) << "row " << b << " step " << step;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Batches, BatchRows, ::testing::Values(1, 2, 3, 8));

TEST(Batch, BatchedEngineReportsItsSlotsAndBindings) {
  SKIP_WITHOUT_DEVICE();
  const Engine& engine = shared_engine().engine;
  EXPECT_EQ(engine.max_batch(), kMaxBatch);
  ASSERT_EQ(engine.inputs().size(), 3u);
  EXPECT_EQ(engine.inputs()[2].name, "slots");
  EXPECT_EQ(engine.inputs()[0].dims, (Dims{-1, -1}));
}

TEST(Batch, FormatVersionThreeOnlyForBatchedNetworks) {
  SKIP_WITHOUT_DEVICE();
  uint32_t version = 0;
  std::memcpy(&version, shared_engine().bytes.data() + 8, 4);
  EXPECT_EQ(version, 3u);
  const testing::TestEngine one = testing::make_engine(testing::tiny_config(), testing::decode_prefill_profiles(16));
  std::memcpy(&version, one.bytes.data() + 8, 4);
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(one.engine.max_batch(), 0);
  Result<format::ParsedEngine> parsed = format::parse_engine(shared_engine().bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->desc.network.slots, kMaxBatch);
}

TEST(Batch, BatchOfOneMatchesTheUnbatchedEngine) {
  SKIP_WITHOUT_DEVICE();
  const testing::TestEngine one = testing::make_engine(testing::tiny_config(), testing::decode_prefill_profiles(16));
  Session plain = new_session(one.engine);
  const std::vector<int64_t> ids = prompt(6, 4);
  testing::TokenInputs in(ids, 0);
  Tensor logits;
  {
    auto pick = OptimizationProfileGuard::automatic();
    ASSERT_TRUE(plain.run(in.span(), std::span(&logits, 1)).ok());
  }
  const std::vector<std::vector<float>> alone = run_alone(shared_engine().engine, ids, 0);
  EXPECT_LE(max_abs_diff(std::span(logits.data<float>(), 97), alone[0]), kTolerance);
}

// Fills every cache row of `slot` with NaN (through the device, whose memory the caches are).
void poison_slot(const Session& session, int64_t slot) {
  const internal::ExecutionContext& ctx = session.handle()->context();
  const internal::EngineCore& core = *shared_engine().engine.core();
  const ir::Network& net = core.network();
  Result<std::shared_ptr<internal::StreamImpl>> stream = core.device().create_stream();
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  for (size_t s = 0; s < net.states.size(); ++s) {
    const int64_t floats = net.max_context * net.states[s].width;
    const std::vector<float> nan(static_cast<size_t>(floats), std::numeric_limits<float>::quiet_NaN());
    for (size_t kv = 0; kv < 2; ++kv) {
      float* cache = static_cast<float*>(ctx.states()[s * 2 + kv]) + slot * floats;
      ASSERT_TRUE(core.device().copy_from_host(cache, nan.data(), floats * 4, **stream).ok());
    }
  }
  ASSERT_TRUE((*stream)->synchronize().ok());
}

TEST(Batch, ReleasedSlotNeverExposesTheOldSequence) {
  SKIP_WITHOUT_DEVICE();
  const Engine& engine = shared_engine().engine;
  Session session = new_session(engine);
  // Sequence A fills 20 rows of slot 5 while sequence C runs in slot 0.
  ASSERT_TRUE(run(session, {{prompt(20, 1), 0, 5}, {prompt(3, 2), 0, 0}}).ok());
  EXPECT_EQ(session.slot_length(5), 20);
  ASSERT_TRUE(session.release_slot(5).ok());
  EXPECT_EQ(session.slot_length(5), 0);
  // A new sequence may not pick up where the old one was.
  EXPECT_FALSE(run(session, {{prompt(2, 3), 20, 5}}).ok());
  EXPECT_FALSE(run(session, {{prompt(2, 3), 1, 5}}).ok());
  poison_slot(session, 5);
  // Sequence B in the poisoned slot, beside C's next step: B gives what it gives alone.
  const std::vector<int64_t> b = prompt(6, 9);
  Result<std::vector<float>> got = run(session, {{b, 0, 5}, {{4}, 3, 0}});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  const std::vector<std::vector<float>> alone = run_alone(engine, b, 0);
  EXPECT_LE(max_abs_diff(std::span(got->data(), 97), alone[0]), kTolerance);
  for (int step = 0; step < 4; ++step) {
    Result<std::vector<float>> r = run(session, {{{decode_token(step, 0)}, 6 + step, 5}});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_LE(max_abs_diff(*r, alone[static_cast<size_t>(step + 1)]), kTolerance) << "step " << step;
  }
}

TEST(Batch, BadSlotsAreErrorsThatChangeNoState) {
  SKIP_WITHOUT_DEVICE();
  const Engine& engine = shared_engine().engine;
  Session session = new_session(engine);
  Session reference = new_session(engine);
  const std::vector<Row> prefill = {{prompt(4, 1), 0, 2}, {prompt(7, 2), 0, 6}};
  ASSERT_TRUE(run(session, prefill).ok());
  ASSERT_TRUE(run(reference, prefill).ok());
  const int32_t profile = session.active_profile();

  const std::vector<std::pair<std::string, std::vector<Row>>> bad = {
      {"slot past the pool", {{{5}, 4, 8}}},           {"negative slot", {{{5}, 4, -2}}},
      {"duplicate slots", {{{5}, 4, 2}, {{6}, 4, 2}}}, {"padding slot with a real token", {{{5}, 4, -1}}},
      {"gap after the sequence", {{{5}, 5, 2}}},       {"fresh slot not at 0", {{{5}, 1, 3}}},
  };
  for (const auto& [what, rows] : bad) {
    Result<std::vector<float>> r = run(session, rows);
    EXPECT_FALSE(r.ok()) << what;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << what << ": " << r.status().to_string();
    }
  }
  // Non-consecutive positions in one row.
  {
    CallInputs in({{{5, 6}, 4, 2}});
    in.positions[1] = 7;
    Tensor logits;
    auto pick = OptimizationProfileGuard::automatic();
    EXPECT_EQ(session.run(in.views, std::span(&logits, 1)).code(), StatusCode::kInvalidArgument);
  }
  // A batch above the profile's (and the pool's) maximum.
  {
    std::vector<Row> nine;
    for (int64_t b = 0; b < 9; ++b) nine.push_back({{5}, 0, b});
    EXPECT_FALSE(run(session, nine).ok());
  }
  // Pinned to decode, a prefill-shaped call is refused too.
  {
    CallInputs in({{{5, 6}, 4, 2}});
    Tensor logits;
    auto pin = OptimizationProfileGuard::named("decode");
    EXPECT_FALSE(session.run(in.views, std::span(&logits, 1)).ok());
  }
  EXPECT_EQ(session.active_profile(), profile);
  EXPECT_EQ(session.slot_length(2), 4);
  EXPECT_EQ(session.slot_length(6), 7);
  EXPECT_EQ(session.slot_length(3), 0);
  EXPECT_FALSE(session.release_slot(8).ok());
  EXPECT_FALSE(session.release_slot(-1).ok());
  // The same next step gives the same logits as a session that saw no bad call.
  const std::vector<Row> next = {{{5}, 4, 2}, {{9}, 7, 6}};
  Result<std::vector<float>> got = run(session, next);
  Result<std::vector<float>> want = run(reference, next);
  ASSERT_TRUE(got.ok() && want.ok());
  EXPECT_EQ(*got, *want);
}

TEST(Batch, PaddingRowsCostNoWrongResults) {
  SKIP_WITHOUT_DEVICE();
  const Engine& engine = shared_engine().engine;
  Session session = new_session(engine);
  const std::vector<int64_t> ids = prompt(5, 3);
  // Row 0 is padding only (slot -1); row 1 the sequence.
  CallInputs in({{{}, 0, -1}, {ids, 0, 4}});
  Tensor logits;
  auto pick = OptimizationProfileGuard::automatic();
  ASSERT_TRUE(session.run(in.views, std::span(&logits, 1)).ok());
  const std::vector<std::vector<float>> alone = run_alone(engine, ids, 0);
  EXPECT_LE(max_abs_diff(std::span(logits.data<float>() + 97, 97), alone[0]), kTolerance);
  EXPECT_EQ(session.slot_length(4), 5);
}

TEST(Batch, TheDeviceGivesTheCpuDevicesLogits) {
  SKIP_WITHOUT_DEVICE();
  // One call of rows of different lengths (one padded), then a decode step, on this device and
  // on the CPU device, from the same weights.
  const testing::TestEngine cpu = make_batched_engine(DeviceKind::kCpu);
  Session here = new_session(shared_engine().engine);
  Session there = new_session(cpu.engine);
  const std::vector<Row> prefill = {{prompt(9, 1), 0, 3}, {prompt(4, 2), 0, 0}, {{}, 0, -1}};
  const std::vector<Row> decode = {{{5}, 9, 3}, {{7}, 4, 0}};
  for (const std::vector<Row>& rows : {prefill, decode}) {
    Result<std::vector<float>> got = run(here, rows);
    Result<std::vector<float>> want = run(there, rows);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    ASSERT_EQ(got->size(), want->size());
    for (size_t r = 0; r < rows.size(); ++r) {
      if (rows[r].slot < 0) continue;  // a padding row's logits are computed and never read
      EXPECT_LE(max_abs_diff(std::span(got->data() + r * 97, 97), std::span(want->data() + r * 97, 97)), 1e-4f)
          << "row " << r << " of a call of " << rows.size();
    }
  }
}

#ifdef GEARBOX_TEST_CUDA
// Decode steps of up to 16 rows of a bf16 engine whose every linear in the decode profile
// runs the tensor-core GEMV (gemv_mma; one n-tile of x up to 8 rows, two above), fed one
// token a step: each row's logits are the CPU device's.
TEST(Batch, TheTensorCoreGemvGivesTheCpuDevicesLogits) {
  SKIP_WITHOUT_DEVICE();
  constexpr int64_t kRows = 16;
  const auto build = [] {
    models::Gemma3Config c = testing::tiny_config();
    c.dtype = DataType::kBF16;
    models::DecoderDescription d = models::gemma3_description(c);
    d.max_batch = kRows;
    models::RandomWeights weights(7);
    Result<models::BuiltModel> model = models::build_decoder(d, weights);
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    return std::move(*model);
  };
  const InputProfileBounds rows{Dims{1, 1}, Dims{8, 1}, Dims{kRows, 1}};
  const InputProfileBounds slots{Dims{1}, Dims{8}, Dims{kRows}};
  const std::vector<format::ProfileDesc> profiles = {{"decode", {rows, rows, slots}}};
  const models::BuiltModel model = build();
  internal::BuildOptions options;
  options.device = DeviceKind::kCuda;
  options.repetitions = 1;
  Result<format::EngineDesc> desc = internal::build_engine(model.network, profiles, model.payload, options);
  ASSERT_TRUE(desc.ok()) << desc.status().to_string();
  Result<std::shared_ptr<const internal::DeviceBackend>> device = internal::device_backend(DeviceKind::kCuda);
  ASSERT_TRUE(device.ok());
  int forced = 0;
  for (size_t n = 0; n < model.network.nodes.size(); ++n) {
    const ir::Node& node = model.network.nodes[n];
    if (node.kind != ir::OpKind::kLinear) continue;
    desc->tactic_tables[0].profiles[0].tactic_per_node[n] = testing::tactic_id(**device, node, "gemv_mma");
    ++forced;
  }
  EXPECT_EQ(forced, 4 * 2 + 1) << "each layer's QKV, o, gate + up and down, and the lm_head";
  Result<Engine> engine = testing::load_engine(*desc, model.payload, DeviceKind::kCuda);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const testing::TestEngine cpu = testing::engine_from_model(build(), profiles, DeviceKind::kCpu, 1);
  Session here = new_session(*engine);
  Session there = new_session(cpu.engine);
  std::vector<int64_t> length(kRows, 0);
  int64_t step = 0;
  for (const int64_t batch : {16, 9, 3, 16, 1, 12, 16, 8}) {
    std::vector<Row> call;
    for (int64_t s = 0; s < batch; ++s) call.push_back({{decode_token(step, s)}, length[static_cast<size_t>(s)]++, s});
    Result<std::vector<float>> got = run(here, call);
    Result<std::vector<float>> want = run(there, call);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    ASSERT_EQ(got->size(), want->size());
    for (int64_t r = 0; r < batch; ++r) {
      EXPECT_LE(max_abs_diff(std::span(got->data() + r * 97, 97), std::span(want->data() + r * 97, 97)), 1e-4f)
          << "row " << r << " of a call of " << batch << ", step " << step;
    }
    ++step;
  }
}
#endif

}  // namespace
}  // namespace gearbox
