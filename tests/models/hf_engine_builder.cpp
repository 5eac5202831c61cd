// Builds an f32 CPU engine from a Hugging Face checkpoint of any family models/ reads
// (read_hf_config + build_decoder), with the profiles and metadata `gearbox build --hf`
// gives one: decode 1:1:1 and prefill 1:min(128, N):N, the description (models::describe),
// the vocabulary and the bos / eos ids. The parity tests build every family's checkpoint
// with it; on an error it prints the message, exits 1 and writes nothing.
//
//   hf_engine_builder CHECKPOINT_DIR ENGINE_FILE MAX_SEQ
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "builder/builder.h"
#include "format/engine_file.h"
#include "models/decoder.h"
#include "models/hf_config.h"
#include "models/hf_weights.h"
#include "models/safetensors.h"

namespace gearbox {
namespace {

std::string join(const std::vector<int64_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i > 0 ? "," : "") + std::to_string(ids[i]);
  return s;
}

Status build(const std::string& dir, const std::string& out, int64_t max_seq) {
  Result<models::HfDecoderConfig> config = models::read_hf_config(dir);
  if (!config.ok()) return config.status();
  models::DecoderDescription description = config->description;
  description.max_context = max_seq;
  description.dtype = DataType::kF32;
  Result<models::SafetensorsCheckpoint> checkpoint = models::SafetensorsCheckpoint::open(dir);
  if (!checkpoint.ok()) return checkpoint.status();
  Result<std::string> prefix = models::detect_weight_prefix(*checkpoint);
  if (!prefix.ok()) return prefix.status();
  models::CheckpointWeights weights(*checkpoint, *prefix);
  Result<models::BuiltModel> model = models::build_decoder(description, weights);
  if (!model.ok()) return model.status();

  const InputProfileBounds decode{Dims{1, 1}, Dims{1, 1}, Dims{1, 1}};
  const InputProfileBounds prefill{Dims{1, 1}, Dims{1, std::min<int64_t>(128, max_seq)}, Dims{1, max_seq}};
  const size_t inputs = model->network.inputs.size();
  std::vector<format::ProfileDesc> profiles = {{"decode", std::vector<InputProfileBounds>(inputs, decode)},
                                               {"prefill", std::vector<InputProfileBounds>(inputs, prefill)}};
  internal::BuildOptions options;
  options.device = DeviceKind::kCpu;
  options.metadata = models::describe(description);
  options.metadata.insert(options.metadata.end(), {{"model.source", dir},
                                                   {"tokenizer.bos", std::to_string(config->bos_token_id)},
                                                   {"tokenizer.eos", join(config->eos_token_ids)},
                                                   {"model.vocab", std::to_string(description.vocab)}});
  Result<format::EngineDesc> desc = internal::build_engine(model->network, profiles, model->payload, options);
  if (!desc.ok()) return desc.status();
  return format::write_engine_file(out, *desc, model->payload);
}

}  // namespace
}  // namespace gearbox

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: hf_engine_builder CHECKPOINT_DIR ENGINE_FILE MAX_SEQ\n");
    return 2;
  }
  const long long max_seq = std::atoll(argv[3]);
  if (max_seq < 1) {
    std::fprintf(stderr, "hf_engine_builder: MAX_SEQ must be a whole number >= 1\n");
    return 2;
  }
  const gearbox::Status s = gearbox::build(argv[1], argv[2], max_seq);
  if (!s.ok()) {
    std::fprintf(stderr, "hf_engine_builder: %s\n", s.to_string().c_str());
    return 1;
  }
  std::fprintf(stderr, "wrote %s\n", argv[2]);
  return 0;
}
