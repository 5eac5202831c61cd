// gearbox/executorch/blob.h: what a gearbox delegate blob is.
//
// The blob ExecuTorch stores for a gearbox-delegated method is a gearbox engine file,
// byte for byte (docs/FORMAT.md): `gearbox inspect` reads it after extraction, and a
// standalone engine file can be wrapped into a .pte unchanged. The fixed header below
// identifies it; the delegate keys its engine cache on the header's checksums, so methods
// whose blobs hold the same engine share one loaded engine.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gearbox::executorch {

/// The first 8 bytes of every blob: "GBXENGN\0".
inline constexpr char kBlobMagic[8] = {'G', 'B', 'X', 'E', 'N', 'G', 'N', '\0'};

/// The fixed header of format version 1 (64 bytes, little-endian). Later versions append
/// fields and grow header_bytes; these keep their offsets.
struct BlobHeader {
  char magic[8];             ///< kBlobMagic
  uint32_t format_version;   ///< the engine format version (1 to 4, docs/FORMAT.md)
  uint32_t header_bytes;     ///< the header's length, >= 64
  uint64_t metadata_offset;  ///< where the metadata starts
  uint64_t metadata_bytes;   ///< its length
  uint64_t payload_offset;   ///< where the weights start (64-byte aligned)
  uint64_t payload_bytes;    ///< their length
  uint64_t metadata_xxh3;    ///< XXH3-64 of the metadata
  uint64_t payload_xxh3;     ///< XXH3-64 of the weights (format 4: of their 32 MiB chunks' digests)
};
static_assert(sizeof(BlobHeader) == 64);

/// Reads the fixed header of `size` bytes at `data`. Returns false when there are fewer
/// than 64 bytes or the magic is wrong. Checks nothing else: loading the engine validates
/// every field and checksum.
inline bool read_blob_header(const void* data, size_t size, BlobHeader* out) noexcept {
  static_assert(std::endian::native == std::endian::little, "blob headers are little-endian");
  if (data == nullptr || out == nullptr || size < sizeof(BlobHeader)) return false;
  std::memcpy(out, data, sizeof(BlobHeader));
  return std::memcmp(out->magic, kBlobMagic, sizeof(kBlobMagic)) == 0;
}

}  // namespace gearbox::executorch
