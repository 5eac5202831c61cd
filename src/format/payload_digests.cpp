#include "format/payload_digests.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>

#include "format/binary_io.h"

namespace gearbox::format {

std::vector<uint64_t> chunk_digests(std::span<const uint8_t> payload, uint64_t chunk_bytes) {
  const uint64_t chunks = chunk_count(payload.size(), chunk_bytes);
  std::vector<uint64_t> digests(chunks);
  // Chunks are handed out one at a time, so a slow thread holds back at most one chunk.
  std::atomic<uint64_t> next{0};
  const auto work = [&] {
    for (uint64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
      const uint64_t first = c * chunk_bytes;
      const uint64_t bytes = std::min<uint64_t>(chunk_bytes, payload.size() - first);
      digests[c] = XXH3_64bits(payload.data() + first, bytes);
    }
  };
  const uint64_t threads = std::min<uint64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::jthread> helpers;
  for (uint64_t t = 1; t < threads; ++t) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // the threads started so far and this one share the chunks
    }
  }
  work();
  helpers.clear();  // joins them: every digest is written
  return digests;
}

uint64_t digest_of_digests(std::span<const uint64_t> digests) {
  ByteWriter w;
  for (uint64_t d : digests) w.u64(d);
  return XXH3_64bits(w.bytes().data(), w.bytes().size());
}

}  // namespace gearbox::format
