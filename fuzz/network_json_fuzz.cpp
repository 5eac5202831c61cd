// Feeds arbitrary text to read_network_description (the --network reader) with a fixed
// checkpoint of three tensors: embed [8, 4] f32, norm [4] f32 and wide [2] F64. It must
// never read out of bounds, hit undefined behaviour, recurse without bound (JSON nesting
// is bounded) or let an exception escape; every failure is a Status.
//
// Seeds: network descriptions such as tests/models/network_json_test.cpp's valid().
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "models/network_json.h"
#include "models/safetensors.h"

namespace {

// The checkpoint, written once per process to a temporary file and removed at exit.
struct Checkpoint {
  std::string path = "/tmp/gearbox_fuzz_network_" + std::to_string(::getpid()) + ".safetensors";
  std::optional<gearbox::models::SafetensorsCheckpoint> ckpt;
  Checkpoint() {
    const std::string header = R"({"embed":{"dtype":"F32","shape":[8,4],"data_offsets":[0,128]},)"
                               R"("norm":{"dtype":"F32","shape":[4],"data_offsets":[128,144]},)"
                               R"("wide":{"dtype":"F64","shape":[2],"data_offsets":[144,160]}})";
    std::vector<uint8_t> file(8 + header.size() + 160, 0);
    const uint64_t n = header.size();
    std::memcpy(file.data(), &n, 8);
    std::memcpy(file.data() + 8, header.data(), header.size());
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(file.data(), 1, file.size(), f) != file.size() || std::fclose(f) != 0) std::abort();
    gearbox::Result<gearbox::models::SafetensorsCheckpoint> opened = gearbox::models::SafetensorsCheckpoint::open(path);
    if (!opened.ok()) std::abort();
    ckpt.emplace(std::move(*opened));
  }
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;
  ~Checkpoint() { std::remove(path.c_str()); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Checkpoint checkpoint;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const gearbox::Result<gearbox::models::DescribedModel> model =
        gearbox::models::read_network_description(text, *checkpoint.ckpt);
    if (model.ok() && model->model.network.nodes.empty()) std::abort();  // accepted, yet nothing to run
  } catch (...) {
    std::abort();  // an exception escaped the reader
  }
  return 0;
}
