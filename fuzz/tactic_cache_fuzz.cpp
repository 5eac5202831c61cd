// Feeds arbitrary bytes to decode_tactic_cache for a fixed engine (the mini Gemma-3's
// network with two profiles). It must never read out of bounds or hit undefined behaviour,
// must report every failure as kDataLoss or kFailedPrecondition, and what it accepts must
// encode back to the same bytes.
//
// The first byte picks the mode: even, the rest is a whole cache file; odd, the rest is a
// body that is given a valid header (this engine's identity, the body's length and
// checksum), so the fuzzer reaches the table decoder and the checks after it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "format/engine_file.h"
#include "format/tactic_cache.h"
#include "models/gemma3.h"

namespace {

const gearbox::format::EngineDesc& engine_desc() {
  static const gearbox::format::EngineDesc desc = [] {
    gearbox::models::Gemma3Config c = gearbox::models::gemma3_mini_config();
    c.layers = 1;
    c.layer_is_sliding = {true};
    c.max_context = 32;
    gearbox::models::RandomWeights weights(1);
    gearbox::Result<gearbox::models::BuiltModel> model = gearbox::models::build_gemma3(c, weights);
    if (!model.ok()) std::abort();
    gearbox::format::EngineDesc d;
    d.network = std::move(model->network);
    const gearbox::InputProfileBounds one{gearbox::Dims{1, 1}, gearbox::Dims{1, 1}, gearbox::Dims{1, 1}};
    const gearbox::InputProfileBounds many{gearbox::Dims{1, 1}, gearbox::Dims{1, 8}, gearbox::Dims{1, 32}};
    d.profiles = {{"decode", {one, one}}, {"prefill", {many, many}}};
    return d;
  }();
  return desc;
}

constexpr gearbox::format::EngineIdentity kIdentity{0x1234, 0x5678};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  std::vector<uint8_t> file;
  if ((data[0] & 1) == 0) {
    file.assign(rest.begin(), rest.end());
  } else {
    file = gearbox::format::encode_tactic_cache(kIdentity, {});  // a valid header, then the body
    file.resize(48);
    const uint64_t body_bytes = rest.size(), sum = XXH3_64bits(rest.data(), rest.size());
    std::memcpy(file.data() + 32, &body_bytes, 8);
    std::memcpy(file.data() + 40, &sum, 8);
    file.insert(file.end(), rest.begin(), rest.end());
  }
  const gearbox::Result<std::vector<gearbox::format::TacticTable>> tables =
      gearbox::format::decode_tactic_cache(file, kIdentity, engine_desc());
  if (!tables.ok()) {
    const gearbox::StatusCode code = tables.status().code();
    if (code != gearbox::StatusCode::kDataLoss && code != gearbox::StatusCode::kFailedPrecondition) std::abort();
    return 0;
  }
  if (gearbox::format::encode_tactic_cache(kIdentity, *tables) != file) std::abort();
  return 0;
}
