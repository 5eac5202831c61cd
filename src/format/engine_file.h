// The engine file: what a built engine is on disk and inside an ExecuTorch delegate blob.
//
// Layout (all integers little-endian; docs/FORMAT.md is the normative description):
//   [fixed header]  magic "GBXENGN\0", format version, header length, then offsets, sizes
//                   and checksums of the two sections below. Fields are appended, never
//                   reordered; a reader uses header_bytes to skip fields it does not know.
//   [metadata]      the EngineDesc below, in a bounds-checked binary encoding.
//   [payload]       the weights, 64-byte aligned (so it can be memory-mapped and used in
//                   place); each weight's offset within it is 64-byte aligned too.
// Checksums (XXH3-64) cover the metadata and the payload; from version 4 the payload's in
// chunks, which a reader verifies on several threads.
//
// The reader validates every offset, size, count, enum value and checksum against the
// bytes it was given before using them, returns a distinct kDataLoss message per kind of
// damage, and never allocates more than a small multiple of the input size.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gearbox/device.h"
#include "gearbox/profile_selection.h"
#include "gearbox/status.h"
#include "ir/network.h"

namespace gearbox::format {

inline constexpr char kMagic[8] = {'G', 'B', 'X', 'E', 'N', 'G', 'N', '\0'};
/// The newest format version; a reader takes 1 up to this one (docs/COMPATIBILITY.md).
/// Version 2 adds the generic op kinds and appends their attrs (code, axis, flags, alpha,
/// beta, ints) to every node. Version 3 appends the KV-cache slot count of a batched
/// network. Version 4 appends a section of the payload's chunk digests (payload_xxh3 is
/// then their XXH3-64) and lets a network of one sequence write slots 0. The writer writes
/// the oldest version that holds the engine (1 for one that needs none of that; 4 for a
/// payload of more than one chunk), so such engines stay readable by older gearbox.
inline constexpr uint32_t kFormatVersion = 4;
/// The op kinds a version-1 file may hold (kEmbedding..kTakeLast).
inline constexpr uint32_t kMaxOpKindV1 = 9;
inline constexpr uint64_t kPayloadAlignment = 64;
/// Bytes of the fixed header in format version 1 (later versions may append fields).
inline constexpr uint32_t kHeaderBytesV1 = 64;
/// The chunk the writer digests a payload by: a payload larger than one chunk is written as
/// version 4, so that a reader verifies its chunks on several threads.
inline constexpr uint64_t kPayloadChunkBytes = uint64_t{32} << 20;
/// Metadata sections, in the order they are written (docs/FORMAT.md); kPayloadDigests only
/// in version 4.
enum class Section : uint32_t {
  kNetwork = 1,
  kProfiles = 2,
  kTacticTables = 3,
  kMetadata = 4,
  kProducer = 5,
  kPayloadDigests = 6
};

/// The tactics chosen for one profile on one device: tactic id per node (index = node id),
/// the measured median time of each choice, and the activation bytes the profile needs.
struct ProfileTactics {
  std::vector<uint32_t> tactic_per_node;
  std::vector<float> time_us_per_node;
  uint64_t arena_bytes = 0;
};

/// Tactics tuned for one device (kind + name) with the library versions they were timed
/// against (e.g. "cublasLt 13.0.2"); a runtime uses them only on a matching device.
struct TacticTable {
  DeviceKind device = DeviceKind::kCpu;
  std::string device_name;
  std::string library_versions;
  std::vector<ProfileTactics> profiles;  ///< one per engine profile, same order
};

/// One optimization profile: its name and, per network input, its bounds.
struct ProfileDesc {
  std::string name;
  std::vector<InputProfileBounds> bounds;  ///< one per network input
};

/// Everything in an engine file but the weight bytes.
struct EngineDesc {
  ir::Network network;
  std::vector<ProfileDesc> profiles;
  std::vector<TacticTable> tactic_tables;
  /// Free-form key/value facts about the model (e.g. "model.family" = "gemma3",
  /// "tokenizer.bos" = "2"); keys are unique.
  std::vector<std::pair<std::string, std::string>> metadata;
  /// The gearbox version that wrote the file.
  std::string producer;
};

/// What the payload's checksum is: XXH3-64 of the whole payload (versions 1 to 3), or one
/// XXH3-64 per `chunk_bytes` chunk (version 4).
struct PayloadDigests {
  uint64_t whole = 0;            ///< versions 1 to 3: the header's payload_xxh3
  uint64_t chunk_bytes = 0;      ///< version 4: the chunk size (0 before)
  std::vector<uint64_t> chunks;  ///< version 4: each chunk's XXH3-64
};

/// The value of `desc`'s metadata key `key`; empty where it has none (keys are unique).
inline std::string metadata_value(const EngineDesc& desc, std::string_view key) {
  for (const auto& [k, v] : desc.metadata) {
    if (k == key) return v;
  }
  return {};
}

/// A parsed engine: the description plus a view of the payload inside the parsed bytes
/// (valid as long as those bytes are).
struct ParsedEngine {
  EngineDesc desc;
  std::span<const uint8_t> payload;
  PayloadDigests payload_digests;  ///< what check_payload checks the payload against
  uint32_t version = 0;            ///< the file's format version
};

/// Serializes `desc` and `payload` (the weight bytes; each WeightInfo's offset and bytes
/// must lie inside it) into one buffer. Errors: kInvalidArgument when the description does
/// not validate (ir::validate_network) or a weight lies outside the payload.
Result<std::vector<uint8_t>> serialize_engine(const EngineDesc& desc, std::span<const uint8_t> payload);

/// Writes serialize_engine's bytes to `path` (through a temporary file and a rename, so a
/// crash never leaves a half-written engine behind).
Status write_engine_file(const std::string& path, const EngineDesc& desc, std::span<const uint8_t> payload);

/// Whether parse_engine checks the payload's checksum. kDeferred leaves it to the caller
/// (check_payload), which may run it while it uploads the weights: both read the whole
/// payload, the check reading it anyway. The caller must not use the engine unless it passes.
enum class PayloadCheck { kVerify, kDeferred };

/// Parses and validates an engine image. Errors: kDataLoss with a message naming what is
/// wrong (bad magic, unsupported version, truncated header/metadata/payload, checksum
/// mismatch, a count or offset past the end, an invalid enum, an invalid network...).
Result<ParsedEngine> parse_engine(std::span<const uint8_t> bytes, PayloadCheck check = PayloadCheck::kVerify);

/// The payload checksum check that parse_engine skips with PayloadCheck::kDeferred: kDataLoss
/// (the same message as parse_engine's) when the payload does not match its checksum. A
/// version-4 payload's chunks are checked on several threads, and the message names the
/// bytes of the first chunk that does not match.
Status check_payload(std::span<const uint8_t> payload, const PayloadDigests& digests);

}  // namespace gearbox::format
