// Edits a valid engine's metadata (a one-layer mini Gemma-3 tuned for the CPU), recomputes
// both checksums, and when parse_engine accepts the result, loads it on the CPU and runs
// one call per profile. An edited file that the reader accepts must load and run, or be
// refused with a Status: never an abort ("internal check failed"), an out-of-bounds access
// or undefined behaviour. This is the reader's contract with the runtime: every field it
// accepts is one the runtime can execute.
//
// The input is a list of 5-byte edits: a little-endian u32 position (modulo the metadata
// size) and the byte to store there (run with -max_len of a few dozen bytes). Few edits keep most of the structure
// intact, so the decoder accepts many of them and the runtime sees the values they change (dtypes, op attributes,
// profile bounds, tactic ids).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "builder/builder.h"
#include "format/engine_file.h"
#include "gearbox/binding_names.h"
#include "gearbox/engine.h"
#include "gearbox/profile_guard.h"
#include "models/gemma3.h"

namespace {

constexpr size_t kHeaderBytes = 64;

const std::vector<uint8_t>& base_engine() {
  static const std::vector<uint8_t> bytes = [] {
    gearbox::models::Gemma3Config c = gearbox::models::gemma3_mini_config();
    // Tiny, so that a load and a call take little of the fuzzing time.
    c.vocab = 32;
    c.hidden = 16;
    c.intermediate = 32;
    c.heads = 2;
    c.kv_heads = 1;
    c.head_dim = 8;
    c.sliding_window = 4;
    c.layers = 1;
    c.layer_is_sliding = {true};
    c.max_context = 16;
    gearbox::models::RandomWeights weights(1);
    gearbox::Result<gearbox::models::BuiltModel> model = gearbox::models::build_gemma3(c, weights);
    if (!model.ok()) std::abort();
    const gearbox::InputProfileBounds one{gearbox::Dims{1, 1}, gearbox::Dims{1, 1}, gearbox::Dims{1, 1}};
    const gearbox::InputProfileBounds many{gearbox::Dims{1, 1}, gearbox::Dims{1, 4}, gearbox::Dims{1, 16}};
    std::vector<gearbox::format::ProfileDesc> profiles = {{"decode", {one, one}}, {"prefill", {many, many}}};
    gearbox::internal::BuildOptions options;
    options.repetitions = 1;
    options.warmup = 0;
    gearbox::Result<gearbox::format::EngineDesc> desc =
        gearbox::internal::build_engine(model->network, profiles, model->payload, options);
    if (!desc.ok()) std::abort();
    gearbox::Result<std::vector<uint8_t>> out = gearbox::format::serialize_engine(*desc, model->payload);
    if (!out.ok()) std::abort();
    return std::move(*out);
  }();
  return bytes;
}

uint64_t u64_at(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

void repair_checksums(std::vector<uint8_t>& b) {
  const uint64_t metadata = XXH3_64bits(b.data() + u64_at(b, 16), u64_at(b, 24));
  const uint64_t payload = XXH3_64bits(b.data() + u64_at(b, 32), u64_at(b, 40));
  std::memcpy(b.data() + 48, &metadata, sizeof metadata);
  std::memcpy(b.data() + 56, &payload, sizeof payload);
}

void run_each_profile(const gearbox::Engine& engine) {
  gearbox::Result<gearbox::Session> session = gearbox::Session::create(engine);
  if (!session.ok()) return;
  const gearbox::ProfileTable& table = engine.profiles();
  for (int32_t p = 0; p < table.size(); ++p) {
    const std::vector<gearbox::InputProfileBounds>& bounds = table.bounds[static_cast<size_t>(p)];
    if (bounds.empty() || bounds[0].min.rank() != 2 || bounds[0].min[1] > 16) continue;
    const int64_t seq = bounds[0].min[1];
    std::vector<int64_t> ids(static_cast<size_t>(seq), 1), positions(static_cast<size_t>(seq));
    for (int64_t i = 0; i < seq; ++i) positions[static_cast<size_t>(i)] = i;
    std::vector<gearbox::TensorView> inputs;
    for (const gearbox::BindingInfo& in : engine.inputs()) {
      std::vector<int64_t>& data = in.name == gearbox::kPositionsBinding ? positions : ids;
      inputs.push_back({data.data(), gearbox::DataType::kI64, gearbox::Dims{1, seq}});
    }
    std::vector<gearbox::Tensor> outputs(engine.outputs().size());
    gearbox::OptimizationProfileGuard guard(p);
    (void)session->run(inputs, outputs);
  }
}

// Keeps each run short: an edit that grows the context or a profile, or drops the CPU
// tactic table (the load would tune), is accepted by the reader and loads like any other
// engine, only more slowly; the fuzzer spends its time on the other edits.
bool too_slow_to_run(const gearbox::format::EngineDesc& desc) {
  constexpr int64_t kMaxExtent = 64;
  if (desc.network.max_context > kMaxExtent) return true;
  for (const gearbox::format::ProfileDesc& p : desc.profiles) {
    for (const gearbox::InputProfileBounds& b : p.bounds) {
      for (const int64_t e : b.max.extents()) {
        if (e > kMaxExtent) return true;
      }
    }
  }
  for (const gearbox::format::TacticTable& t : desc.tactic_tables) {
    if (t.device == gearbox::DeviceKind::kCpu) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> engine = base_engine();
  const uint64_t metadata_bytes = u64_at(engine, 24);
  bool changed = false;
  for (size_t i = 0; i + 5 <= size; i += 5) {
    uint32_t at = 0;
    std::memcpy(&at, data + i, sizeof at);
    uint8_t& byte = engine[kHeaderBytes + at % metadata_bytes];
    changed = changed || byte != data[i + 4];
    byte = data[i + 4];
  }
  if (!changed) return 0;  // the unedited engine: loading it again teaches nothing
  repair_checksums(engine);
  const gearbox::Result<gearbox::format::ParsedEngine> parsed = gearbox::format::parse_engine(engine);
  if (!parsed.ok() || too_slow_to_run(parsed->desc)) return 0;
  gearbox::EngineOptions options;
  options.device = gearbox::DeviceKind::kCpu;
  options.tactic_cache = std::string();  // never read or write a cache file
  gearbox::Result<gearbox::Engine> loaded = gearbox::Engine::load_buffer(engine, options);
  if (loaded.ok()) run_each_profile(*loaded);
  return 0;
}
