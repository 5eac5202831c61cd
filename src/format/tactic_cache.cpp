#include "format/tactic_cache.h"

#include <xxhash.h>

#include <cstring>

#include "core/check.h"
#include "format/binary_io.h"
#include "format/tactic_tables.h"

namespace gearbox::format {
namespace {

constexpr char kCacheMagic[8] = {'G', 'B', 'X', 'T', 'A', 'C', 'T', '\0'};
constexpr uint32_t kCacheVersion = 1;
constexpr size_t kCacheHeaderBytes = 48;

}  // namespace

EngineIdentity engine_identity(std::span<const uint8_t> engine_bytes) {
  EngineIdentity id;
  if (engine_bytes.size() >= 64) {
    std::memcpy(&id.metadata_xxh3, engine_bytes.data() + 48, 8);
    std::memcpy(&id.payload_xxh3, engine_bytes.data() + 56, 8);
  }
  return id;
}

std::vector<uint8_t> encode_tactic_cache(const EngineIdentity& engine, const std::vector<TacticTable>& tables) {
  ByteWriter body;
  write_tactic_tables(body, tables);
  ByteWriter out;
  for (char c : kCacheMagic) out.u8(static_cast<uint8_t>(c));
  out.u32(kCacheVersion);
  out.u32(0);
  out.u64(engine.metadata_xxh3);
  out.u64(engine.payload_xxh3);
  out.u64(body.size());
  out.u64(XXH3_64bits(body.bytes().data(), body.bytes().size()));
  std::vector<uint8_t> bytes = std::move(out).take();
  bytes.insert(bytes.end(), body.bytes().begin(), body.bytes().end());
  return bytes;
}

Result<std::vector<TacticTable>> decode_tactic_cache(std::span<const uint8_t> bytes, const EngineIdentity& engine,
                                                     const EngineDesc& desc) {
  if (bytes.size() < kCacheHeaderBytes || std::memcmp(bytes.data(), kCacheMagic, sizeof kCacheMagic) != 0) {
    return data_loss("not a gearbox tactic cache (" + std::to_string(bytes.size()) + " bytes, bad magic)");
  }
  ByteReader r(bytes.subspan(sizeof kCacheMagic), sizeof kCacheMagic);
  uint32_t version = 0, reserved = 0;
  EngineIdentity id;
  uint64_t body_bytes = 0, body_xxh3 = 0;
  if (!r.u32("version", version) || !r.u32("reserved", reserved) || !r.u64("metadata_xxh3", id.metadata_xxh3) ||
      !r.u64("payload_xxh3", id.payload_xxh3) || !r.u64("body bytes", body_bytes) || !r.u64("body_xxh3", body_xxh3)) {
    return r.status();
  }
  if (version != kCacheVersion) {
    return failed_precondition("tactic cache format version " + std::to_string(version) + " (this gearbox writes " +
                               std::to_string(kCacheVersion) + ")");
  }
  if (!(id == engine)) return failed_precondition("the tactic cache belongs to another engine (checksums differ)");
  if (body_bytes != bytes.size() - kCacheHeaderBytes) {
    return data_loss("tactic cache body is " + std::to_string(bytes.size() - kCacheHeaderBytes) +
                     " bytes, the header says " + std::to_string(body_bytes) + " (truncated or extended)");
  }
  const std::span<const uint8_t> body = bytes.subspan(kCacheHeaderBytes);
  if (XXH3_64bits(body.data(), body.size()) != body_xxh3) return data_loss("tactic cache checksum mismatch");
  EngineDesc check;
  check.network = desc.network;
  check.profiles = desc.profiles;
  ByteReader br(body, kCacheHeaderBytes);
  if (Status s = read_tactic_tables(br, check.tactic_tables); !s.ok()) return s;
  if (br.remaining() != 0)
    return data_loss("tactic cache: " + std::to_string(br.remaining()) + " bytes after the tables");
  GEARBOX_RETURN_IF_ERROR(check_tactic_tables(check));
  return std::move(check.tactic_tables);
}

}  // namespace gearbox::format
