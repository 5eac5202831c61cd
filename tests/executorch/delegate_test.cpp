// The ExecuTorch delegate end to end: .pte programs exported by tests/executorch/
// make_test_programs.py (directory in $GEARBOX_TEST_PROGRAMS) from transformers'
// Gemma3ForCausalLM (mini config, random weights) as `python -m gearbox.export` does, and from
// its Llama, Qwen2 and Qwen3 (tiny, random) as its own export wrapper does, run by
// ExecuTorch's Module on the CPU device, against eager transformers' logits (reference.json).
// The delegate holds the whole network; the integer bookkeeping that turns the positions
// into the static cache's rows stays on ExecuTorch's portable kernels.
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/backend/interface.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gearbox/executorch/backend.h"
#include "gearbox/executorch/binding_names.h"
#include "gearbox/executorch/blob.h"
#include "gearbox/profile_guard.h"
#include "module_fixture.h"

namespace {

using executorch::extension::Module;
using gearbox::OptimizationProfileGuard;
using gearbox::executorch::ProfileRecord;
using gearbox::testing::program_path;
namespace et = ::executorch::runtime;

const nlohmann::json& reference() { return gearbox::testing::reference("reference.json"); }

std::vector<int64_t> ids(const char* key) { return reference()[key].get<std::vector<int64_t>>(); }
std::vector<float> logits(const char* key, size_t call) { return reference()[key][call].get<std::vector<float>>(); }

struct Out {
  et::Error error = et::Error::Ok;
  std::vector<std::vector<float>> logits;  // per output
  std::vector<ProfileRecord> records;
};

// Runs `method` on tokens [1, n] at positions start.. : [1, n] as gearbox.export's programs
// take them, or [n] (`cache_position`) as transformers' export wrapper's do.
enum class Positions { kRow, kCachePosition };

Out call(Module& m, const std::string& method, const std::vector<int64_t>& tokens, int64_t start,
         Positions layout = Positions::kRow) {
  const auto n = static_cast<executorch::aten::SizesType>(tokens.size());
  std::vector<int64_t> pos(tokens.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = start + static_cast<int64_t>(i);
  auto t = executorch::extension::make_tensor_ptr({1, n}, std::vector<int64_t>(tokens));
  auto p = layout == Positions::kRow ? executorch::extension::make_tensor_ptr({1, n}, std::move(pos))
                                     : executorch::extension::make_tensor_ptr({n}, std::move(pos));
  (void)gearbox::executorch::take_profile_records();
  Out out;
  auto r = m.execute(method, {t, p});
  out.records = gearbox::executorch::take_profile_records();
  if (!r.ok()) {
    out.error = r.error();
    return out;
  }
  for (const auto& v : *r) {
    const auto& tensor = v.toTensor();
    out.logits.emplace_back(tensor.const_data_ptr<float>(), tensor.const_data_ptr<float>() + tensor.numel());
  }
  return out;
}

float max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  float worst = 0.0f, scale = 1e-6f;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    worst = std::max(worst, std::fabs(got[i] - want[i]) / scale);
  }
  return worst;
}

// Relative to the largest reference logit. GEARBOX_TEST_TOLERANCE overrides it (the CUDA
// device reduces in another order than eager PyTorch on the CPU).
const float kTolerance = [] {
  const char* v = std::getenv("GEARBOX_TEST_TOLERANCE");
  return v != nullptr ? std::strtof(v, nullptr) : 2e-5f;
}();

TEST(Delegate, BackendIsRegisteredUnderTheSharedId) {
  ASSERT_TRUE(gearbox::executorch::register_backend().ok());
  ASSERT_TRUE(gearbox::executorch::register_backend().ok());  // idempotent
  EXPECT_NE(et::get_backend_class(gearbox::executorch::kBackendId), nullptr);
}

TEST(Delegate, ForwardMatchesEagerPyTorchOnPrefillAndDecodes) {
  Module m(program_path("mini.pte"));
  const auto prompt = ids("prompt"), next = ids("next");
  Out a = call(m, "forward", prompt, 0);
  ASSERT_EQ(a.error, et::Error::Ok);
  EXPECT_LT(max_rel_error(a.logits[0], logits("mini", 0)), kTolerance);
  for (size_t s = 0; s < next.size(); ++s) {
    OptimizationProfileGuard pin(0);  // decode
    Out d = call(m, "forward", {next[s]}, static_cast<int64_t>(prompt.size() + s));
    ASSERT_EQ(d.error, et::Error::Ok);
    EXPECT_LT(max_rel_error(d.logits[0], logits("mini", s + 1)), kTolerance) << "decode step " << s;
    ASSERT_EQ(d.records.size(), 1u);
    EXPECT_EQ(d.records[0].name, "decode");
  }
}

TEST(Delegate, PinsAutomaticAndNamesPickTheProfileTheySay) {
  Module m(program_path("mini.pte"));
  const auto prompt = ids("prompt");
  {
    OptimizationProfileGuard pin(1);
    Out o = call(m, "forward", prompt, 0);
    ASSERT_EQ(o.error, et::Error::Ok);
    EXPECT_EQ(o.records.at(0).profile, 1);
    EXPECT_EQ(o.records.at(0).name, "prefill");
  }
  {
    auto pick = OptimizationProfileGuard::automatic();  // seq 1 after prefill: sticky
    Out o = call(m, "forward", {7}, 5);
    ASSERT_EQ(o.error, et::Error::Ok);
    EXPECT_EQ(o.records.at(0).name, "prefill");
  }
  {
    auto pin = OptimizationProfileGuard::named("decode");
    Out o = call(m, "forward", {8}, 6);
    ASSERT_EQ(o.error, et::Error::Ok);
    EXPECT_EQ(o.records.at(0).profile, 0);
  }
  {
    Out o = call(m, "forward", {9}, 7);  // no guard: forward's default is automatic, decode fits
    ASSERT_EQ(o.error, et::Error::Ok);
    EXPECT_EQ(o.records.at(0).name, "decode");
  }
}

TEST(Delegate, RejectedCallsChangeNothing) {
  Module m(program_path("mini.pte"));
  const auto prompt = ids("prompt"), next = ids("next");
  ASSERT_EQ(call(m, "forward", prompt, 0).error, et::Error::Ok);
  {
    OptimizationProfileGuard pin(7);  // no such profile
    Out o = call(m, "forward", {next[0]}, 5);
    EXPECT_NE(o.error, et::Error::Ok);
    EXPECT_TRUE(o.records.empty());
  }
  {
    auto pin = OptimizationProfileGuard::named("warp");  // no such name
    EXPECT_NE(call(m, "forward", {next[0]}, 5).error, et::Error::Ok);
  }
  {
    OptimizationProfileGuard pin(0);  // decode takes seq 1 only
    EXPECT_NE(call(m, "forward", {next[0], next[1]}, 5).error, et::Error::Ok);
  }
  EXPECT_NE(call(m, "forward", {4096}, 5).error, et::Error::Ok);  // token id >= vocab
  EXPECT_NE(call(m, "forward", {-1}, 5).error, et::Error::Ok);    // negative id
  EXPECT_NE(call(m, "forward", {3}, 64).error, et::Error::Ok);    // position >= max context
  // None of the rejected calls touched the KV cache or the profile: the decode step
  // still matches the reference of the uninterrupted sequence.
  OptimizationProfileGuard pin(0);
  Out d = call(m, "forward", {next[0]}, 5);
  ASSERT_EQ(d.error, et::Error::Ok);
  EXPECT_LT(max_rel_error(d.logits[0], logits("mini", 1)), kTolerance);
}

TEST(Delegate, MethodsShareOneEngineAndDecodeContinuesPrefill) {
  const int64_t before = gearbox::executorch::loaded_engine_count();
  Module m(program_path("mini_pd.pte"));
  ASSERT_EQ(m.load_method("prefill"), et::Error::Ok);
  ASSERT_EQ(m.load_method("decode"), et::Error::Ok);
  EXPECT_EQ(gearbox::executorch::loaded_engine_count(), before + 1) << "two methods, one engine";
  const auto prompt = ids("prompt"), next = ids("next");
  Out p = call(m, "prefill", prompt, 0);
  ASSERT_EQ(p.error, et::Error::Ok);
  EXPECT_EQ(p.records.at(0).name, "prefill");  // the method's default
  EXPECT_LT(max_rel_error(p.logits[0], logits("mini", 0)), kTolerance);
  for (size_t s = 0; s < next.size(); ++s) {
    Out d = call(m, "decode", {next[s]}, static_cast<int64_t>(prompt.size() + s));
    ASSERT_EQ(d.error, et::Error::Ok);
    EXPECT_EQ(d.records.at(0).name, "decode");
    EXPECT_LT(max_rel_error(d.logits[0], logits("mini", s + 1)), kTolerance) << "the context is shared";
  }
  {
    auto pin = OptimizationProfileGuard::named("prefill");  // a guard overrides the default
    Out d = call(m, "decode", {next[0]}, static_cast<int64_t>(prompt.size()));
    ASSERT_EQ(d.error, et::Error::Ok);
    EXPECT_EQ(d.records.at(0).name, "prefill");
  }
  // A second program instance shares the engine, not the context.
  Module other(program_path("mini_pd.pte"));
  ASSERT_EQ(other.load_method("decode"), et::Error::Ok);
  EXPECT_EQ(gearbox::executorch::loaded_engine_count(), before + 1);
}

TEST(Delegate, TwoEnginesInOneMethodAnIndexMeansDifferentRegimesANameTheSame) {
  Module m(program_path("two_engines.pte"));
  const int64_t id = ids("next")[0];
  {
    OptimizationProfileGuard pin(1);  // A: prefill, B: decode (records in execution order)
    Out o = call(m, "forward", {id}, 0);
    ASSERT_EQ(o.error, et::Error::Ok);
    ASSERT_EQ(o.records.size(), 2u);
    EXPECT_EQ(o.records[0].profile, 1);
    EXPECT_EQ(o.records[1].profile, 1);
    EXPECT_NE(o.records[0].name, o.records[1].name) << "index 1 is a different regime in each engine";
    EXPECT_NE(o.records[0].engine, o.records[1].engine);
    EXPECT_LT(max_rel_error(o.logits[0], reference()["two_engines_a"].get<std::vector<float>>()), kTolerance);
    EXPECT_LT(max_rel_error(o.logits[1], reference()["two_engines_b"].get<std::vector<float>>()), kTolerance);
  }
  {
    auto pin = OptimizationProfileGuard::named("decode");
    Out o = call(m, "forward", {id}, 0);
    ASSERT_EQ(o.error, et::Error::Ok);
    ASSERT_EQ(o.records.size(), 2u);
    EXPECT_EQ(o.records[0].name, "decode");
    EXPECT_EQ(o.records[1].name, "decode");
    EXPECT_NE(o.records[0].profile, o.records[1].profile);
  }
  {
    OptimizationProfileGuard pin(1);  // 3 tokens: prefill in A, but decode in B rejects them
    EXPECT_NE(call(m, "forward", {id, id, id}, 0).error, et::Error::Ok);
  }
  {
    auto pin = OptimizationProfileGuard::named("prefill");  // the same regime in both: fine
    EXPECT_EQ(call(m, "forward", {id, id, id}, 0).error, et::Error::Ok);
  }
}

TEST(Delegate, FortyThreadsInitExecuteAndDestroyAcrossTwoMethods) {
  const auto prompt = ids("prompt"), next = ids("next");
  const std::vector<float> want_prefill = logits("mini", 0), want_decode = logits("mini", 1);
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 40; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 2; ++round) {
        auto m = std::make_unique<Module>(program_path(t % 2 == 0 ? "mini_pd.pte" : "mini.pte"));
        const bool pd = t % 2 == 0;
        Out p = call(*m, pd ? "prefill" : "forward", prompt, 0);
        OptimizationProfileGuard pin(0);
        Out d = call(*m, pd ? "decode" : "forward", {next[0]}, static_cast<int64_t>(prompt.size()));
        if (p.error != et::Error::Ok || d.error != et::Error::Ok) {
          ++failed;
        } else if (max_rel_error(p.logits[0], want_prefill) > kTolerance ||
                   max_rel_error(d.logits[0], want_decode) > kTolerance) {
          ++wrong;
        }
        m.reset();  // destroy: every delegate handle of the program
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
}

// NAME.pte: transformers' NAMEForCausalLM exported by its own export wrapper, inputs
// input_ids [1, n] and cache_position [n], logits of every position.
class TransformersExportWrapper : public ::testing::TestWithParam<std::string> {};

TEST_P(TransformersExportWrapper, ProgramRunsPrefillThenDecodes) {
  ASSERT_TRUE(gearbox::testing::device_chosen());
  const std::string name = GetParam();
  Module m(program_path(name + ".pte"));
  const auto& steps = reference()["hf_steps"];
  ASSERT_EQ(steps.size(), 3u);
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto tokens = steps[s]["ids"].get<std::vector<int64_t>>();
    const auto start = steps[s]["start"].get<int64_t>();
    const bool prefill = s == 0;
    auto pin = prefill ? OptimizationProfileGuard::named("prefill") : OptimizationProfileGuard(0);
    Out o = call(m, "forward", tokens, start, Positions::kCachePosition);
    ASSERT_EQ(o.error, et::Error::Ok) << "step " << s;
    ASSERT_EQ(o.records.size(), 1u) << "one delegate";
    EXPECT_EQ(o.records[0].name, prefill ? "prefill" : "decode");
    EXPECT_LT(max_rel_error(o.logits.at(0), logits(name.c_str(), s)), kTolerance) << "step " << s;
  }
  {
    auto pick = OptimizationProfileGuard::automatic();
    Out o = call(m, "forward", {5, 6}, 8, Positions::kCachePosition);
    ASSERT_EQ(o.error, et::Error::Ok);
    EXPECT_EQ(o.records.at(0).name, "prefill");
  }
  OptimizationProfileGuard pin(0);  // decode takes one token: rejected, nothing changes
  EXPECT_NE(call(m, "forward", {5, 6}, 10, Positions::kCachePosition).error, et::Error::Ok);
}

INSTANTIATE_TEST_SUITE_P(Delegate, TransformersExportWrapper, ::testing::Values("llama", "qwen2", "qwen3"),
                         [](const ::testing::TestParamInfo<std::string>& model) { return model.param; });

TEST(Delegate, BlobHeaderIdentifiesEngines) {
  std::ifstream in(program_path("mini.pte"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find(std::string(gearbox::executorch::kBlobMagic, 8));
  ASSERT_NE(at, std::string::npos) << "the .pte holds the engine file unchanged";
  gearbox::executorch::BlobHeader h{};
  ASSERT_TRUE(gearbox::executorch::read_blob_header(bytes.data() + at, bytes.size() - at, &h));
  EXPECT_EQ(h.format_version, 1u);
  EXPECT_GT(h.payload_bytes, 0u);
  EXPECT_FALSE(gearbox::executorch::read_blob_header(bytes.data(), 10, &h));
  EXPECT_EQ(gearbox::executorch::kTokensArg, 0);
  EXPECT_EQ(gearbox::executorch::kLogitsArg, 2);
}

}  // namespace
