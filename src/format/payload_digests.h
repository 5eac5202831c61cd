// The payload's checksum in chunks (format version 4): one XXH3-64 per chunk, computed and
// verified on several threads, and the header's payload_xxh3 as the XXH3-64 of those
// digests. Versions 1 to 3 hash the whole payload at once, which one thread must do alone.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gearbox::format {

/// XXH3-64 (seed 0) of each `chunk_bytes` piece of `payload` (the last one may be shorter),
/// computed on up to std::thread::hardware_concurrency() threads (on the calling thread
/// alone where no thread can be started). `chunk_bytes` > 0.
std::vector<uint64_t> chunk_digests(std::span<const uint8_t> payload, uint64_t chunk_bytes);

/// XXH3-64 (seed 0) of `digests` written back to back as little-endian u64: the header's
/// payload_xxh3 in version 4.
uint64_t digest_of_digests(std::span<const uint64_t> digests);

/// How many chunks of `chunk_bytes` a payload of `payload_bytes` has (0 for an empty one).
inline uint64_t chunk_count(uint64_t payload_bytes, uint64_t chunk_bytes) {
  return payload_bytes / chunk_bytes + (payload_bytes % chunk_bytes != 0 ? 1 : 0);
}

}  // namespace gearbox::format
