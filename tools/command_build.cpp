// gearbox build: an engine from a Hugging Face checkpoint (Gemma-3, Llama, Mistral, Qwen2,
// Qwen3) or the built-in mini Gemma-3 config, tuned per profile on the chosen device.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>

#include <CLI/CLI.hpp>

#include "builder/builder.h"
#include "cli_args.h"
#include "commands.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "format/engine_file.h"
#include "gearbox/binding_names.h"
#include "models/decoder.h"
#include "models/hf_config.h"
#include "models/hf_weights.h"
#include "models/network_json.h"
#include "models/safetensors.h"
#include "runner.h"
#include "tokenizer.h"

namespace gearbox::cli {
namespace {

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

// One input's bounds under a --profile: its dynamic extents (-1) take the profile's
// sequence bounds (the second extent of `seq`'s [batch, seq] dims), except that in a batched
// network a dynamic dim named "batch" takes the batch bounds (the first extent); its static
// extents stay.
InputProfileBounds input_bounds(const ir::InputSpec& in, bool batched, const InputProfileBounds& seq) {
  const Dims& spec = in.dims;
  const auto at = [&](const Dims& bound) {
    std::array<int64_t, kMaxDims> extents{};
    for (int32_t d = 0; d < spec.rank(); ++d) {
      const bool batch = batched && static_cast<size_t>(d) < in.dim_names.size() && in.dim_names[d] == kBatchDim;
      extents[static_cast<size_t>(d)] = spec[d] != -1 ? spec[d] : batch ? bound[0] : bound[1];
    }
    return Dims(std::span<const int64_t>(extents.data(), static_cast<size_t>(spec.rank())));
  };
  return {at(seq.min), at(seq.opt), at(seq.max)};
}

// The file at `path` when there is one (std::nullopt when there is none); any other
// problem (a directory, a FIFO, too large, unreadable) is an error naming it.
Result<std::optional<std::string>> read_optional_input(const std::string& path, InputKind kind) {
  Result<std::string> text = read_input_file(path, kind);
  if (text.ok()) return std::optional<std::string>(std::move(*text));
  if (text.status().code() == StatusCode::kNotFound) return std::optional<std::string>();
  return text.status();
}

// The first weight of `model` holding NaN or an infinity, as an error naming it.
Status check_finite_weights(const models::BuiltModel& model, const std::string& source) {
  for (const ir::WeightInfo& w : model.network.weights) {
    const std::span<const uint8_t> bytes(model.payload.data() + w.offset, w.bytes);
    if (const int64_t at = models::first_non_finite(bytes, w.dtype); at >= 0) {
      return data_loss(source + ": weight '" + w.name + "' holds a non-finite value (NaN or infinity) at element " +
                       std::to_string(at) + "; gearbox build --allow-non-finite builds it anyway");
    }
  }
  return {};
}

struct BuildArgs {
  bool mini = false;
  bool all_logits = false;
  bool allow_non_finite = false;
  std::string hf;
  std::string network;
  std::string weights;
  std::string out;
  std::string dtype;
  std::string device = "auto";
  int64_t max_seq = 2048;
  int64_t seed = 1;
  std::vector<SeqProfile> profiles;
};

// `fixed_by_network`: one of the flags a --network description fixes was given.
// `max_seq_given`: --max-seq was on the command line (not its default).
int run_build(const BuildArgs& o, bool fixed_by_network, bool max_seq_given) {
  if (static_cast<int>(o.mini) + static_cast<int>(!o.hf.empty()) + static_cast<int>(!o.network.empty()) != 1) {
    return fail("build", invalid_argument("give exactly one of --mini, --hf DIR and --network FILE"), 2);
  }
  if (o.network.empty() != o.weights.empty()) {
    return fail("build", invalid_argument("--network FILE and --weights FILE go together"), 2);
  }
  if (!o.network.empty() && fixed_by_network) {
    return fail("build",
                invalid_argument("--max-seq, --dtype, --all-logits and --seed do not apply to --network "
                                 "(the description fixes them)"),
                2);
  }
  if (o.out.empty()) return fail("build", invalid_argument("-o FILE is required"), 2);
  if (o.max_seq < 1) return fail("build", invalid_argument("--max-seq must be >= 1"), 2);
  Result<DeviceKind> device = device_from_flag(o.device);
  if (!device.ok()) return fail("build", device.status(), 2);
  // Before any work: the output is writable and is none of the inputs.
  std::vector<std::string> inputs = {o.network, o.weights};
  if (!o.hf.empty()) {
    for (const char* name : {"config.json", "generation_config.json", "model.safetensors",
                             "model.safetensors.index.json", "tokenizer.model", "tokenizer.json"}) {
      inputs.push_back(o.hf + "/" + name);
    }
  }
  if (Status s = check_output_path(o.out, inputs, "engine"); !s.ok()) return fail("build", s, 2);

  std::vector<format::ProfileDesc> profiles;
  int64_t max_batch = 1;  // above 1: a batched network with that many KV-cache slots
  for (const SeqProfile& sp : o.profiles) {
    const InputProfileBounds b{Dims{sp.min_batch, sp.min}, Dims{sp.opt_batch, sp.opt}, Dims{sp.max_batch, sp.max}};
    profiles.push_back({sp.name, {b, b}});
    max_batch = std::max(max_batch, sp.max_batch);
  }
  if (max_batch > 1 && !o.network.empty()) {
    return fail("build",
                invalid_argument("a --network description has no batch dimension: its profiles take a "
                                 "sequence length N, not BxS"),
                2);
  }
  if (max_batch > 1 && o.all_logits) {
    return fail("build", invalid_argument("--all-logits and batched profiles (BxS) do not go together"), 2);
  }
  // A network description states its own maximum context; its weights are read first.
  int64_t max_seq = o.max_seq;
  std::optional<models::SafetensorsCheckpoint> network_weights;
  std::string network_text;
  std::optional<models::DescribedModel> described;
  if (!o.network.empty()) {
    Result<std::string> text = read_input_file(o.network, InputKind::kNetwork);
    if (!text.ok()) return fail("build", text.status().with_context("the network description"));
    network_text = std::move(*text);
    Result<models::SafetensorsCheckpoint> ckpt = models::SafetensorsCheckpoint::open(o.weights);
    if (!ckpt.ok()) return fail("build", ckpt.status());
    network_weights.emplace(std::move(*ckpt));
    Result<models::DescribedModel> d = models::read_network_description(network_text, *network_weights);
    if (!d.ok()) return fail("build", d.status().with_context(o.network));
    described.emplace(std::move(*d));
    max_seq = described->model.network.max_context;
  }
  // A checkpoint's config states how many positions the model was trained for: a larger
  // context is refused when asked for, and the default is capped to it.
  std::optional<models::HfDecoderConfig> hf_config;
  if (!o.hf.empty()) {
    Result<models::HfDecoderConfig> info = models::read_hf_config(o.hf);
    if (!info.ok()) return fail("build", info.status());
    hf_config.emplace(std::move(*info));
    const int64_t positions = hf_config->max_position_embeddings;
    if (positions > 0 && max_seq > positions) {
      if (max_seq_given) {
        return fail("build",
                    invalid_argument("--max-seq " + std::to_string(max_seq) + " exceeds max_position_embeddings " +
                                     std::to_string(positions) + " of " + o.hf + "/config.json"),
                    2);
      }
      std::fprintf(stderr, "the context is %lld, max_position_embeddings of %s/config.json\n",
                   static_cast<long long>(positions), o.hf.c_str());
      max_seq = positions;
    }
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
  int64_t vocab = -1;
  Result<models::BuiltModel> model = internal_error("unreachable");
  const auto start = std::chrono::steady_clock::now();
  if (!o.network.empty()) {
    std::fprintf(stderr, "read %s: %zu nodes, %zu weights\n", o.network.c_str(), described->model.network.nodes.size(),
                 described->model.network.weights.size());
    options.metadata = std::move(described->metadata);
    model = std::move(described->model);
  } else if (o.mini) {
    models::Gemma3Config config = models::gemma3_mini_config();
    config.max_context = max_seq;
    config.all_logits = o.all_logits;
    if (!o.dtype.empty()) {
      Result<DataType> dt = parse_dtype(o.dtype);
      if (!dt.ok()) return fail("build", dt.status(), 2);
      config.dtype = *dt;
    }
    models::RandomWeights weights(static_cast<uint64_t>(o.seed));
    std::fprintf(stderr, "building the mini Gemma-3 (seed %lld)\n", static_cast<long long>(o.seed));
    if (max_batch > 1) {
      models::DecoderDescription description = models::gemma3_description(config);
      description.max_batch = max_batch;
      model = models::build_decoder(description, weights);
    } else {
      model = models::build_gemma3(config, weights);
    }
    options.metadata = models::describe(models::gemma3_description(config));
    options.metadata.insert(options.metadata.end(),
                            {{"model.source", "mini"}, {"tokenizer.bos", "2"}, {"tokenizer.eos", "1,106"}});
    vocab = config.vocab;
  } else {
    const models::HfDecoderConfig* info = &*hf_config;
    models::DecoderDescription description = info->description;
    description.max_context = max_seq;
    description.all_logits = o.all_logits;
    if (max_batch > 1) description.max_batch = max_batch;
    if (!o.dtype.empty()) {
      Result<DataType> dt = parse_dtype(o.dtype);
      if (!dt.ok()) return fail("build", dt.status(), 2);
      description.dtype = *dt;
    }
    Result<models::SafetensorsCheckpoint> ckpt = models::SafetensorsCheckpoint::open(o.hf);
    if (!ckpt.ok()) return fail("build", ckpt.status());
    Result<std::string> prefix = models::detect_weight_prefix(*ckpt);
    if (!prefix.ok()) return fail("build", prefix.status());
    models::CheckpointWeights weights(*ckpt, *prefix);
    weights.allow_non_finite(o.allow_non_finite);
    if (Status s = models::check_description_against_checkpoint(description, weights, *ckpt); !s.ok()) {
      return fail("build", s.with_context(o.hf));
    }
    // Every file of the checkpoint is open now (shards included): the output must be none
    // of them.
    if (Status s = check_output_path(o.out, {}, "engine"); !s.ok()) return fail("build", s, 2);
    std::fprintf(stderr, "reading %s (%s, %zu layers, hidden %lld, vocab %lld, %s)\n", o.hf.c_str(),
                 description.family.c_str(), description.layers.size(), static_cast<long long>(description.hidden),
                 static_cast<long long>(description.vocab), data_type_name(description.dtype));
    model = models::build_decoder(description, weights);
    options.metadata = models::describe(description);
    // tokenizer.json (checkpoints without tokenizer.model have only it), minified. One
    // gearbox cannot use is kept (generate then names what it lacks) but warned about.
    std::string hf_json;
    std::optional<Tokenizer> hf_tokenizer;
    Result<std::optional<std::string>> hf_text =
        read_optional_input(o.hf + "/tokenizer.json", InputKind::kTokenizerJson);
    if (!hf_text.ok()) return fail("build", hf_text.status());
    if (*hf_text) {
      Result<std::string> compact = compact_hf_json(**hf_text);
      if (!compact.ok()) {
        std::fprintf(stderr, "warning: %s/tokenizer.json is not stored in the engine: %s\n", o.hf.c_str(),
                     compact.status().message().c_str());
      } else {
        if (Result<Tokenizer> t = Tokenizer::from_hf_json(*compact); !t.ok()) {
          std::fprintf(stderr, "warning: gearbox cannot tokenize with %s/tokenizer.json, which the engine keeps: %s\n",
                       o.hf.c_str(), t.status().message().c_str());
        } else {
          hf_tokenizer.emplace(std::move(*t));
        }
        hf_json = std::move(*compact);
      }
    }
    // The BOS a text prompt starts with and the ids generation stops at (tokenizer.h).
    Result<std::optional<std::string>> tokenizer_config =
        read_optional_input(o.hf + "/tokenizer_config.json", InputKind::kHfConfig);
    if (!tokenizer_config.ok()) return fail("build", tokenizer_config.status());
    Result<PromptTokens> prompt =
        prompt_tokens(info->bos_token_id, info->eos_token_ids, hf_tokenizer ? hf_tokenizer->hf_json() : nullptr,
                      tokenizer_config->value_or(std::string()));
    if (!prompt.ok()) return fail("build", prompt.status().with_context(o.hf));
    options.metadata.insert(
        options.metadata.end(),
        {{"model.source", o.hf}, {"tokenizer.bos", std::to_string(prompt->bos)}, {"tokenizer.eos", join(prompt->eos)}});
    vocab = description.vocab;
    Result<std::optional<std::string>> sp = read_optional_input(o.hf + "/tokenizer.model", InputKind::kTokenizerModel);
    if (!sp.ok()) return fail("build", sp.status());
    if (*sp) options.metadata.emplace_back("tokenizer.sentencepiece", std::move(**sp));
    if (!hf_json.empty()) options.metadata.emplace_back("tokenizer.hf_json", std::move(hf_json));
  }
  if (!model.ok()) return fail("build", model.status());
  if (!o.network.empty() && !o.allow_non_finite) {
    if (Status s = check_finite_weights(*model, o.weights); !s.ok()) return fail("build", s);
  }
  if (vocab > 0) options.metadata.emplace_back("model.vocab", std::to_string(vocab));

  // --profile bounds the dynamic extent of every input (tokens, positions, ...).
  for (format::ProfileDesc& p : profiles) {
    const InputProfileBounds seq = p.bounds[0];
    p.bounds.clear();
    for (const ir::InputSpec& in : model->network.inputs) {
      p.bounds.push_back(input_bounds(in, model->network.slots > 0, seq));
    }
  }
  Result<format::EngineDesc> desc = internal::build_engine(model->network, profiles, model->payload, options);
  if (!desc.ok()) return fail("build", desc.status());
  if (Status s = format::write_engine_file(o.out, *desc, model->payload); !s.ok()) return fail("build", s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "wrote %s: %zu profiles, %zu nodes, %.1f MB of weights, device %s, %.1f s\n", o.out.c_str(),
               profiles.size(), model->network.nodes.size(), static_cast<double>(model->payload.size()) / 1e6,
               device_kind_name(*device), seconds);
  return 0;
}

}  // namespace

Command add_build_command(CLI::App& gearbox) {
  auto o = std::make_shared<BuildArgs>();
  CLI::App* app = gearbox.add_subcommand(
      "build",
      "build an engine from a Hugging Face checkpoint or the built-in mini model\n\n"
      "Builds an engine from exactly one of --mini, --hf DIR and --network FILE --weights FILE, into -o FILE: the "
      "network, its weights, and per optimization profile the kernels that were fastest at the profile's opt shape "
      "on the device.");
  app->add_flag("--mini", o->mini,
                "the built-in mini Gemma-3 (vocab 2048, hidden 320, 3 layers) with seeded random weights; no download");
  app->add_option("--hf", o->hf,
                  "a Hugging Face checkpoint (config.json, *.safetensors) of a Gemma-3, Llama, Mistral, Qwen2 or Qwen3 "
                  "model")
      ->type_name("DIR");
  app->add_option("--network", o->network,
                  "a network description (JSON, docs/FORMAT.md), e.g. written by gearbox's ExecuTorch export; its "
                  "weights come from --weights")
      ->type_name("FILE");
  app->add_option("--weights", o->weights, "the safetensors file (or checkpoint directory) --network names")
      ->type_name("FILE");
  app->add_option("-o", o->out, "the engine file to write")->type_name("FILE");
  const CLI::Option* dtype =
      app->add_option("--dtype", o->dtype, "weight dtype (default: the checkpoint's; f32 for --mini)")
          ->type_name("f32|bf16|f16");
  const CLI::Option* max_seq =
      add_int_option(*app, "--max-seq", o->max_seq,
                     "maximum context, the KV cache length; a --network description states its own")
          ->capture_default_str();
  add_profile_option(*app, o->profiles,
                     "a profile over the sequence length, repeatable, in index order (default: decode:1:1:1 "
                     "prefill:1:min(128,N):N with N from --max-seq); a bound BxS also bounds the batch (e.g. "
                     "decode8:1x1:8x1:8x1), and the engine then holds as many KV-cache slots as the largest batch");
  app->add_option("--device", o->device, "the device to tune for; auto: cuda when present")
      ->type_name("cpu|cuda|auto")
      ->capture_default_str();
  const CLI::Option* seed =
      add_int_option(*app, "--seed", o->seed, "seed of the mini model's weights")->capture_default_str();
  const CLI::Option* all_logits =
      app->add_flag("--all-logits", o->all_logits, "output logits for every position, not just the last");
  app->add_flag("--allow-non-finite", o->allow_non_finite,
                "build even when a weight holds NaN or an infinity (by default an error naming the weight)");
  return {app, [o, dtype, max_seq, seed, all_logits] {
            const bool fixed_by_network =
                max_seq->count() > 0 || dtype->count() > 0 || all_logits->count() > 0 || seed->count() > 0;
            return run_build(*o, fixed_by_network, max_seq->count() > 0);
          }};
}

}  // namespace gearbox::cli
