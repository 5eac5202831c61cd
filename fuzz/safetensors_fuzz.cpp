// Feeds arbitrary bytes to the Hugging Face checkpoint readers. They must never read out of
// bounds (ASan), never hit undefined behaviour (UBSan), never let an exception escape, and
// every tensor they accept must lie inside its file with the size its dtype and shape say.
//
// Each input is used four ways:
// - as a whole safetensors file, parsed from an exact-size heap copy (so ASan sees any
//   over-read) and opened through a temporary file (the mmap path, CheckpointWeights);
// - as a safetensors header: wrapped in a correct 8-byte length and followed by 64 data
//   bytes, so that the fuzzer reaches the entry checks without finding the length first;
// - as config.json text (parse_gemma3_config);
// - as model.safetensors.index.json text.
//
// Seeds: small safetensors files, bare header JSON ({"w": {"dtype": "F32", "shape": [4],
// "data_offsets": [0, 16]}}) and Gemma-3 config.json files.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/hf_config.h"
#include "models/hf_weights.h"
#include "models/safetensors.h"

namespace {

using gearbox::models::SafetensorsTensor;

// Touches every byte of each tensor and checks what the reader promised.
void check_tensors(std::span<const uint8_t> file, const std::vector<SafetensorsTensor>& tensors) {
  unsigned sum = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (!t.bytes.empty() &&
        (t.bytes.data() < file.data() || t.bytes.data() + t.bytes.size() > file.data() + file.size())) {
      std::abort();  // a view outside the file
    }
    if (t.supported && t.bytes.size() != static_cast<size_t>(t.dims.volume()) * gearbox::data_type_size(t.dtype)) {
      std::abort();  // a size the header check should have refused
    }
    for (const uint8_t b : t.bytes) sum += b;
  }
  volatile unsigned sink = sum;
  (void)sink;
}

// One file per process, removed at exit.
struct TempFile {
  std::string path = "/tmp/gearbox_fuzz_safetensors_" + std::to_string(::getpid()) + ".safetensors";
  TempFile() = default;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() { std::remove(path.c_str()); }
};

const std::string& temp_file() {
  static const TempFile file;
  return file.path;
}

void open_through_file(std::span<const uint8_t> bytes) {
  std::FILE* f = std::fopen(temp_file().c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);

  gearbox::Result<gearbox::models::SafetensorsCheckpoint> ckpt =
      gearbox::models::SafetensorsCheckpoint::open(temp_file());
  if (!ckpt.ok()) return;
  gearbox::models::CheckpointWeights weights(*ckpt, "model.");
  for (const std::string& name : ckpt->names()) {
    gearbox::Result<const SafetensorsTensor*> t = ckpt->get(name);
    if (!t.ok() || !name.starts_with("model.")) continue;
    const gearbox::Dims dims = (*t)->dims;
    if (dims.volume() > (1 << 20)) continue;
    std::vector<uint8_t> out(static_cast<size_t>(dims.volume()) * 4);
    if (!weights.fill(name, dims, gearbox::DataType::kF32, out).ok()) std::abort();  // a readable tensor converts
  }
}

void parse_in_memory(std::span<const uint8_t> file) {
  const std::vector<uint8_t> copy(file.begin(), file.end());  // exact size: over-reads hit the redzone
  gearbox::Result<std::vector<SafetensorsTensor>> tensors =
      gearbox::internal::parse_safetensors(copy, "model.safetensors");
  if (tensors.ok()) check_tensors(copy, *tensors);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  parse_in_memory(input);

  std::vector<uint8_t> wrapped(8);
  for (int i = 0; i < 8; ++i)
    wrapped[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<uint64_t>(size) >> (8 * i));
  wrapped.insert(wrapped.end(), input.begin(), input.end());
  for (int i = 0; i < 64; ++i) wrapped.push_back(static_cast<uint8_t>(i * 37));
  parse_in_memory(wrapped);
  open_through_file(wrapped);
  open_through_file(input);

  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)gearbox::models::parse_gemma3_config(text);
  (void)gearbox::internal::parse_safetensors_index(text, "model.safetensors.index.json");
  return 0;
}
