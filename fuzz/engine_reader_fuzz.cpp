// Feeds arbitrary bytes to parse_engine. The reader must never read out of bounds (ASan),
// never hit undefined behaviour (UBSan), never allocate without bound, and whatever it
// accepts must serialize again.
//
// The first byte picks the mode; the rest is the input:
// - even: the rest is a whole engine file (the header, checksums and all);
// - odd: the rest is metadata of format version ((first byte >> 1) & 3) + 1. It is wrapped
//   in a valid header of that version with correct checksums (in version 4, the header's
//   payload checksum is that of the digests the metadata's section 6 holds) and a zero
//   payload of (first byte >> 3) * 64 bytes, so that the fuzzer gets past the checksums and
//   exercises the metadata decoder and the checks after it. An accepted metadata must
//   re-serialize, and where the writer picks the same version, to exactly the same bytes
//   (the encoding is canonical; the writer picks version 4 only for payloads far larger).
//
// Seeds: a file engine is "\x00" + its bytes; its metadata alone is "\x01" + bytes[64, 64 +
// metadata_bytes).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "format/engine_file.h"

namespace {

template <typename T>
void put(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

uint64_t u64_at(std::span<const uint8_t> b, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

// XXH3-64 of the digests in section 6 of `metadata` (after five sections), as a version-4
// header records them; of no bytes where the sections do not get that far.
uint64_t digests_xxh3(std::span<const uint8_t> metadata) {
  uint64_t at = 0;
  for (int section = 1; section < 6; ++section) {
    if (metadata.size() < 12 || at > metadata.size() - 12) return XXH3_64bits(nullptr, 0);
    const uint64_t length = u64_at(metadata, at + 4);
    if (length > metadata.size() - at - 12) return XXH3_64bits(nullptr, 0);
    at += 12 + length;
  }
  if (metadata.size() < 24 || at > metadata.size() - 24) return XXH3_64bits(nullptr, 0);
  uint32_t count = 0;
  std::memcpy(&count, metadata.data() + at + 20, sizeof count);
  const uint64_t bytes = std::min<uint64_t>(uint64_t{count} * 8, metadata.size() - at - 24);
  return XXH3_64bits(metadata.data() + at + 24, bytes);
}

std::vector<uint8_t> wrap_metadata(std::span<const uint8_t> metadata, uint32_t version, uint64_t payload_bytes) {
  constexpr uint64_t kHeader = 64;
  const uint64_t payload_offset = (kHeader + metadata.size() + 63) / 64 * 64;
  std::vector<uint8_t> file(payload_offset + payload_bytes, 0);
  std::memcpy(file.data(), gearbox::format::kMagic, sizeof gearbox::format::kMagic);
  put<uint32_t>(file, 8, version);
  put<uint32_t>(file, 12, kHeader);
  put<uint64_t>(file, 16, kHeader);
  put<uint64_t>(file, 24, metadata.size());
  put<uint64_t>(file, 32, payload_offset);
  put<uint64_t>(file, 40, payload_bytes);
  put<uint64_t>(file, 48, XXH3_64bits(metadata.data(), metadata.size()));
  put<uint64_t>(file, 56,
                version >= 4 ? digests_xxh3(metadata) : XXH3_64bits(file.data() + payload_offset, payload_bytes));
  if (!metadata.empty()) std::memcpy(file.data() + kHeader, metadata.data(), metadata.size());
  return file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::span<const uint8_t> rest(data + 1, size - 1);

  if ((mode & 1) == 0) {
    const gearbox::Result<gearbox::format::ParsedEngine> parsed = gearbox::format::parse_engine(rest);
    if (parsed.ok()) {
      const std::span<const uint8_t> payload = parsed->payload;
      if (payload.data() < rest.data() || payload.data() + payload.size() != rest.data() + rest.size()) std::abort();
      if (!gearbox::format::serialize_engine(parsed->desc, payload).ok()) std::abort();
    } else if (parsed.status().code() != gearbox::StatusCode::kDataLoss) {
      std::abort();
    }
    return 0;
  }

  const uint32_t version = ((mode >> 1) & 3u) + 1;
  const std::vector<uint8_t> file = wrap_metadata(rest, version, static_cast<uint64_t>(mode >> 3) * 64);
  const gearbox::Result<gearbox::format::ParsedEngine> parsed = gearbox::format::parse_engine(file);
  if (!parsed.ok()) {
    if (parsed.status().code() != gearbox::StatusCode::kDataLoss) std::abort();
    return 0;
  }
  const gearbox::Result<std::vector<uint8_t>> again = gearbox::format::serialize_engine(parsed->desc, parsed->payload);
  if (!again.ok()) std::abort();
  uint32_t written = 0;
  std::memcpy(&written, again->data() + 8, sizeof written);
  if (written == version && *again != file) std::abort();
  return 0;
}
