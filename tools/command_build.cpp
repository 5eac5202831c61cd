// gearbox build: a Gemma-3 engine from a Hugging Face checkpoint or the built-in mini
// config, tuned per profile on the chosen device.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>

#include "builder/builder.h"
#include "cli_args.h"
#include "commands.h"
#include "flags.h"
#include "format/engine_file.h"
#include "models/hf_config.h"
#include "models/hf_weights.h"
#include "models/network_json.h"
#include "models/safetensors.h"
#include "runner.h"
#include "tokenizer.h"

namespace gearbox::cli {
namespace {

constexpr const char* kUsage =
    R"(usage: gearbox build (--mini | --hf DIR | --network FILE --weights FILE) -o FILE [options]

Builds an engine: the network, its weights, and per optimization profile the kernels
that were fastest at the profile's opt shape on the device.

  --mini                 the built-in mini Gemma-3 (vocab 2048, hidden 320, 3 layers)
                         with seeded random weights; no download
  --hf DIR               a Hugging Face Gemma-3 checkpoint (config.json, *.safetensors)
  --network FILE         a network description (JSON, docs/FORMAT.md), e.g. written by
                         gearbox's ExecuTorch export; its weights come from --weights
  --weights FILE         the safetensors file (or checkpoint directory) --network names
  -o FILE                the engine file to write
  --dtype f32|bf16|f16   weight dtype (default: the checkpoint's; f32 for --mini)
  --max-seq N            maximum context, the KV cache length (default 2048; a
                         --network description states its own)
  --profile NAME:MIN:OPT:MAX   a profile over the sequence length, repeatable, in index
                         order (default: decode:1:1:1 prefill:1:min(128,N):N)
  --device cpu|cuda|auto the device to tune for (default auto: cuda when present)
  --seed N               seed of the mini model's weights (default 1)
  --all-logits           output logits for every position, not just the last
)";

Result<DataType> parse_dtype(const std::string& s) {
  if (s == "f32") return DataType::kF32;
  if (s == "bf16") return DataType::kBF16;
  if (s == "f16") return DataType::kF16;
  return invalid_argument("--dtype: '" + s + "' is not f32, bf16 or f16");
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i > 0 ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

int run_build(std::span<const std::string_view> args) {
  bool mini = false, all_logits = false;
  std::string hf, network, weights_path, out, dtype_flag, device_flag = "auto";
  int64_t max_seq = 2048, seed = 1;
  std::vector<std::string> profile_flags;
  Flags flags(kUsage);
  flags.flag("--mini", &mini);
  flags.flag("--hf", &hf);
  flags.flag("--network", &network);
  flags.flag("--weights", &weights_path);
  flags.flag("-o", &out);
  flags.flag("--dtype", &dtype_flag);
  flags.flag("--max-seq", &max_seq);
  flags.flag("--profile", &profile_flags);
  flags.flag("--device", &device_flag);
  flags.flag("--seed", &seed);
  flags.flag("--all-logits", &all_logits);
  if (Status s = flags.parse(args); !s.ok()) return fail("build", s, 2);
  if (flags.help_requested()) return std::fputs(kUsage, stdout) >= 0 ? 0 : 1;
  if (static_cast<int>(mini) + static_cast<int>(!hf.empty()) + static_cast<int>(!network.empty()) != 1) {
    return fail("build", invalid_argument("give exactly one of --mini, --hf DIR and --network FILE"), 2);
  }
  if (network.empty() != weights_path.empty()) {
    return fail("build", invalid_argument("--network FILE and --weights FILE go together"), 2);
  }
  if (!network.empty()) {
    if (flags.given("--max-seq") || flags.given("--dtype") || flags.given("--all-logits") || flags.given("--seed")) {
      return fail("build",
                  invalid_argument("--max-seq, --dtype, --all-logits and --seed do not apply to --network "
                                   "(the description fixes them)"),
                  2);
    }
  }
  if (out.empty()) return fail("build", invalid_argument("-o FILE is required"), 2);
  if (max_seq < 1) return fail("build", invalid_argument("--max-seq must be >= 1"), 2);
  Result<DeviceKind> device = device_from_flag(device_flag);
  if (!device.ok()) return fail("build", device.status(), 2);

  std::vector<format::ProfileDesc> profiles;
  for (const std::string& p : profile_flags) {
    Result<SeqProfile> sp = parse_seq_profile(p);
    if (!sp.ok()) return fail("build", sp.status(), 2);
    const InputProfileBounds b{Dims{1, sp->min}, Dims{1, sp->opt}, Dims{1, sp->max}};
    profiles.push_back({sp->name, {b, b}});
  }
  // A network description states its own maximum context; its weights are read first.
  std::optional<models::SafetensorsCheckpoint> network_weights;
  std::string network_text;
  std::optional<models::DescribedModel> described;
  if (!network.empty()) {
    std::ifstream in(network, std::ios::binary);
    if (!in) return fail("build", not_found("cannot open the network description '" + network + "'"));
    network_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    Result<models::SafetensorsCheckpoint> ckpt = models::SafetensorsCheckpoint::open(weights_path);
    if (!ckpt.ok()) return fail("build", ckpt.status());
    network_weights.emplace(std::move(*ckpt));
    Result<models::DescribedModel> d = models::read_network_description(network_text, *network_weights);
    if (!d.ok()) return fail("build", d.status().with_context(network));
    described.emplace(std::move(*d));
    max_seq = described->model.network.max_context;
  }
  if (profiles.empty()) {
    const InputProfileBounds decode{Dims{1, 1}, Dims{1, 1}, Dims{1, 1}};
    const InputProfileBounds prefill{Dims{1, 1}, Dims{1, std::min<int64_t>(128, max_seq)}, Dims{1, max_seq}};
    profiles = {{"decode", {decode, decode}}, {"prefill", {prefill, prefill}}};
  }

  internal::BuildOptions options;
  options.device = *device;
  options.progress = [](std::string_view line) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  };
  models::Gemma3Config config;
  Result<models::BuiltModel> model = internal_error("unreachable");
  const auto start = std::chrono::steady_clock::now();
  if (!network.empty()) {
    std::fprintf(stderr, "read %s: %zu nodes, %zu weights\n", network.c_str(), described->model.network.nodes.size(),
                 described->model.network.weights.size());
    options.metadata = std::move(described->metadata);
    model = std::move(described->model);
    config.vocab = -1;
  } else if (mini) {
    config = models::gemma3_mini_config();
    config.max_context = max_seq;
    config.all_logits = all_logits;
    if (!dtype_flag.empty()) {
      Result<DataType> dt = parse_dtype(dtype_flag);
      if (!dt.ok()) return fail("build", dt.status(), 2);
      config.dtype = *dt;
    }
    models::RandomWeights weights(static_cast<uint64_t>(seed));
    std::fprintf(stderr, "building the mini Gemma-3 (seed %lld)\n", static_cast<long long>(seed));
    model = models::build_gemma3(config, weights);
    options.metadata = {
        {"model.family", "gemma3"}, {"model.source", "mini"}, {"tokenizer.bos", "2"}, {"tokenizer.eos", "1,106"}};
  } else {
    Result<models::HfModelInfo> info = models::read_gemma3_config(hf);
    if (!info.ok()) return fail("build", info.status());
    config = info->config;
    config.max_context = max_seq;
    config.all_logits = all_logits;
    config.dtype = info->checkpoint_dtype;
    if (!dtype_flag.empty()) {
      Result<DataType> dt = parse_dtype(dtype_flag);
      if (!dt.ok()) return fail("build", dt.status(), 2);
      config.dtype = *dt;
    }
    Result<models::SafetensorsCheckpoint> ckpt = models::SafetensorsCheckpoint::open(hf);
    if (!ckpt.ok()) return fail("build", ckpt.status());
    Result<std::string> prefix = models::detect_weight_prefix(*ckpt);
    if (!prefix.ok()) return fail("build", prefix.status());
    models::CheckpointWeights weights(*ckpt, *prefix);
    std::fprintf(stderr, "reading %s (%lld layers, hidden %lld, vocab %lld, %s)\n", hf.c_str(),
                 static_cast<long long>(config.layers), static_cast<long long>(config.hidden),
                 static_cast<long long>(config.vocab), data_type_name(config.dtype));
    model = models::build_gemma3(config, weights);
    options.metadata = {{"model.family", "gemma3"},
                        {"model.source", hf},
                        {"tokenizer.bos", std::to_string(info->bos_token_id)},
                        {"tokenizer.eos", join(info->eos_token_ids)}};
    std::ifstream sp(hf + "/tokenizer.model", std::ios::binary);
    if (sp) {
      options.metadata.emplace_back("tokenizer.sentencepiece",
                                    std::string(std::istreambuf_iterator<char>(sp), std::istreambuf_iterator<char>()));
    }
    // tokenizer.json too (checkpoints without tokenizer.model have only it), minified. One
    // gearbox cannot use is kept (generate then names what it lacks) but warned about.
    std::ifstream hf_json(hf + "/tokenizer.json", std::ios::binary);
    if (hf_json) {
      Result<std::string> compact =
          compact_hf_json(std::string(std::istreambuf_iterator<char>(hf_json), std::istreambuf_iterator<char>()));
      if (!compact.ok()) {
        std::fprintf(stderr, "warning: %s/tokenizer.json is not stored in the engine: %s\n", hf.c_str(),
                     compact.status().message().c_str());
      } else {
        if (Result<Tokenizer> t = Tokenizer::from_hf_json(*compact); !t.ok()) {
          std::fprintf(stderr, "warning: gearbox cannot tokenize with %s/tokenizer.json, which the engine keeps: %s\n",
                       hf.c_str(), t.status().message().c_str());
        }
        options.metadata.emplace_back("tokenizer.hf_json", std::move(*compact));
      }
    }
  }
  if (!model.ok()) return fail("build", model.status());
  if (config.vocab > 0) options.metadata.emplace_back("model.vocab", std::to_string(config.vocab));

  // --profile bounds the sequence of every input (tokens, positions, ...).
  for (format::ProfileDesc& p : profiles) p.bounds.assign(model->network.inputs.size(), p.bounds[0]);
  Result<format::EngineDesc> desc = internal::build_engine(model->network, profiles, model->payload, options);
  if (!desc.ok()) return fail("build", desc.status());
  if (Status s = format::write_engine_file(out, *desc, model->payload); !s.ok()) return fail("build", s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "wrote %s: %zu profiles, %zu nodes, %.1f MB of weights, device %s, %.1f s\n", out.c_str(),
               profiles.size(), model->network.nodes.size(), static_cast<double>(model->payload.size()) / 1e6,
               device_kind_name(*device), seconds);
  return 0;
}

}  // namespace gearbox::cli
