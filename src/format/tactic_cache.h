// The tactic cache: tactics tuned at load, kept beside an engine file so that the next
// load on the same device does not tune again (docs/FORMAT.md, "Tactic cache").
//
//   [48-byte header] magic "GBXTACT\0", u32 version (1), u32 0, the engine's
//                    metadata_xxh3 and payload_xxh3 (which engine it belongs to), u64
//                    body length, u64 XXH3 of the body
//   [body]           tactic tables as in section 3 of an engine file
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "format/engine_file.h"
#include "gearbox/status.h"

namespace gearbox::format {

/// Which engine a cache belongs to: the two checksums of the engine file's header.
struct EngineIdentity {
  uint64_t metadata_xxh3 = 0;
  uint64_t payload_xxh3 = 0;
  bool operator==(const EngineIdentity&) const = default;
};

/// The identity of an engine image (its header fields; the image must have parsed).
EngineIdentity engine_identity(std::span<const uint8_t> engine_bytes);

std::vector<uint8_t> encode_tactic_cache(const EngineIdentity& engine, const std::vector<TacticTable>& tables);

/// The cache's tables, checked against `desc` (the engine they are for). Errors:
/// kDataLoss for a damaged or truncated cache, kFailedPrecondition for a cache of
/// another engine or format version.
Result<std::vector<TacticTable>> decode_tactic_cache(std::span<const uint8_t> bytes, const EngineIdentity& engine,
                                                     const EngineDesc& desc);

}  // namespace gearbox::format
