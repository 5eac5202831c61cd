// gearbox generate and gearbox score.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <random>

#include "cli_args.h"
#include "commands.h"
#include "flags.h"
#include "runner.h"
#include "tokenizer.h"

namespace gearbox::cli {
namespace {

constexpr const char* kGenerateUsage = R"(usage: gearbox generate FILE (--prompt TEXT | --prompt-ids 1,2,3) [options]

Generates tokens: the prompt on the 'prefill' profile, each new token on 'decode' (when
the engine has them; otherwise automatic selection). Greedy unless --temperature > 0.

  --max-new-tokens N   (default 32)
  --temperature T      sampling temperature (default 0: greedy)
  --top-k K            keep the K most likely tokens (default 0: all)
  --top-p P            keep the smallest set with probability >= P (default 1)
  --seed S             sampling seed (default 0)
  --no-bos             do not prepend the BOS token to a text prompt
  --ignore-eos         do not stop at the engine's end-of-sequence tokens
  --json               print {"prompt_ids", "generated_ids", "ttft_ms", "prefill_tok_s", "decode_tok_s"}
  --device D           cpu, cuda or auto (default auto)
)";

constexpr const char* kScoreUsage = R"(usage: gearbox score FILE --prompt-ids IDS [--prefill] [--json] [--device D]

Teacher-forced log-probabilities: log p(id_i | ids before i) for i >= 1. By default one
token per call (the decode path); with --prefill each log-prob comes from one call over
the whole prefix ids[0..i-1] (the path a prompt takes, on the profile that fits it).
)";

/// The next id from one row of `vocab` logits at x.
int64_t sample(const float* x, int64_t vocab, double temperature, int64_t top_k, double top_p, std::mt19937_64& rng) {
  if (temperature <= 0) return std::max_element(x, x + vocab) - x;
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [x](int64_t a, int64_t b) { return x[a] > x[b]; });
  if (top_k > 0 && top_k < vocab) order.resize(static_cast<size_t>(top_k));
  std::vector<double> p(order.size());
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) sum += (p[i] = std::exp((x[order[i]] - x[order[0]]) / temperature));
  double kept = 0;
  size_t n = 0;
  while (n < p.size() && (n == 0 || kept < top_p * sum)) kept += p[n++];
  std::discrete_distribution<size_t> pick(p.begin(), p.begin() + static_cast<ptrdiff_t>(n));
  return order[pick(rng)];
}

std::string json_ids(const std::vector<int64_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

Status check_ids(const std::vector<int64_t>& ids, int64_t vocab) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return invalid_argument("token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  return {};
}

}  // namespace

int run_generate(std::span<const std::string_view> args) {
  std::string file, prompt, prompt_ids_flag, device_flag = "auto";
  int64_t max_new = 32, top_k = 0, seed = 0;
  double temperature = 0, top_p = 1;
  bool json = false, no_bos = false, ignore_eos = false;
  Flags flags(kGenerateUsage);
  flags.positional("FILE", &file, true);
  flags.flag("--prompt", &prompt);
  flags.flag("--prompt-ids", &prompt_ids_flag);
  flags.flag("--max-new-tokens", &max_new);
  flags.flag("--temperature", &temperature);
  flags.flag("--top-k", &top_k);
  flags.flag("--top-p", &top_p);
  flags.flag("--seed", &seed);
  flags.flag("--json", &json);
  flags.flag("--no-bos", &no_bos);
  flags.flag("--ignore-eos", &ignore_eos);
  flags.flag("--device", &device_flag);
  if (Status s = flags.parse(args); !s.ok()) return fail("generate", s, 2);
  if (flags.help_requested()) return std::fputs(kGenerateUsage, stdout) >= 0 ? 0 : 1;
  if (prompt.empty() == prompt_ids_flag.empty()) {
    return fail("generate", invalid_argument("give exactly one of --prompt and --prompt-ids"), 2);
  }
  if (max_new < 1) return fail("generate", invalid_argument("--max-new-tokens must be >= 1"), 2);
  if (temperature < 0 || top_k < 0 || !(top_p > 0 && top_p <= 1)) {
    return fail("generate", invalid_argument("need --temperature >= 0, --top-k >= 0 and 0 < --top-p <= 1"), 2);
  }
  Result<DeviceKind> device = device_from_flag(device_flag);
  if (!device.ok()) return fail("generate", device.status(), 2);
  Result<Runner> runner = Runner::open(file, *device);
  if (!runner.ok()) return fail("generate", runner.status());

  std::vector<int64_t> ids;
  std::optional<Tokenizer> tokenizer;
  if (!prompt.empty()) {
    // The SentencePiece model when the engine has one, else the checkpoint's tokenizer.json.
    const std::string sentencepiece = runner->engine().metadata("tokenizer.sentencepiece");
    Result<Tokenizer> t = !sentencepiece.empty()
                              ? Tokenizer::from_sentencepiece(sentencepiece)
                              : Tokenizer::from_hf_json(runner->engine().metadata("tokenizer.hf_json"));
    if (!t.ok()) return fail("generate", t.status());
    tokenizer.emplace(std::move(*t));
    Result<std::vector<int64_t>> encoded = tokenizer->encode(prompt);
    if (!encoded.ok()) return fail("generate", encoded.status());
    Result<int64_t> bos = parse_int(runner->engine().metadata("tokenizer.bos"), "tokenizer.bos");
    if (!no_bos && bos.ok() && *bos >= 0) ids.push_back(*bos);
    ids.insert(ids.end(), encoded->begin(), encoded->end());
  } else {
    Result<std::vector<int64_t>> parsed = parse_int_list(prompt_ids_flag, "--prompt-ids");
    if (!parsed.ok()) return fail("generate", parsed.status(), 2);
    ids = *parsed;
  }
  if (Status s = check_ids(ids, runner->vocab()); !s.ok()) return fail("generate", s);
  if (static_cast<int64_t>(ids.size()) + max_new > runner->engine().max_context()) {
    return fail("generate", invalid_argument("prompt (" + std::to_string(ids.size()) + ") + --max-new-tokens (" +
                                             std::to_string(max_new) + ") exceed the engine's context of " +
                                             std::to_string(runner->engine().max_context())));
  }
  std::vector<int64_t> eos;
  if (!ignore_eos) {
    Result<std::vector<int64_t>> e = parse_int_list(runner->engine().metadata("tokenizer.eos"), "tokenizer.eos");
    if (e.ok()) eos = *e;
  }
  const bool named = runner->profile_index("prefill") >= 0 && runner->profile_index("decode") >= 0;
  const ProfileRequest prefill_request = named ? ProfileRequest::named("prefill") : ProfileRequest::automatic();
  const ProfileRequest decode_request = named ? ProfileRequest::named("decode") : ProfileRequest::automatic();

  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  Tensor logits;
  double prefill_ms = 0, decode_ms = 0;
  if (Status s = runner->call(ids, 0, ids.size() == 1 ? decode_request : prefill_request, logits, &prefill_ms);
      !s.ok()) {
    return fail("generate", s);
  }
  const int64_t vocab = logits.dims[logits.dims.rank() - 1];
  std::vector<int64_t> generated;
  int64_t next = sample(logits.data<float>() + (logits.dims.volume() - vocab), vocab, temperature, top_k, top_p, rng);
  generated.push_back(next);
  // Each step's one row of logits lands in host memory the device writes by DMA.
  Result<HostMemory> step_memory = runner->engine().allocate_host(vocab * 4);
  if (!step_memory.ok()) return fail("generate", step_memory.status());
  TensorView step_logits{step_memory->data(), DataType::kF32, Dims{}, MemoryKind::kHost, vocab * 4};
  while (static_cast<int64_t>(generated.size()) < max_new && std::find(eos.begin(), eos.end(), next) == eos.end()) {
    double ms = 0;
    const int64_t pos = static_cast<int64_t>(ids.size() + generated.size()) - 1;
    if (Status s = runner->call({next}, pos, decode_request, step_logits, &ms); !s.ok()) return fail("generate", s);
    decode_ms += ms;
    next = sample(static_cast<const float*>(step_logits.data), vocab, temperature, top_k, top_p, rng);
    generated.push_back(next);
  }
  const double prefill_tok_s = static_cast<double>(ids.size()) / (prefill_ms / 1e3);
  const size_t decode_steps = generated.size() - 1;
  const double decode_tok_s = decode_steps > 0 ? static_cast<double>(decode_steps) / (decode_ms / 1e3) : 0.0;
  if (json) {
    std::printf(
        "{\"prompt_ids\": %s, \"generated_ids\": %s, \"ttft_ms\": %.3f, \"prefill_tok_s\": %.1f, "
        "\"decode_tok_s\": %.1f}\n",
        json_ids(ids).c_str(), json_ids(generated).c_str(), prefill_ms, prefill_tok_s, decode_tok_s);
    return 0;
  }
  if (tokenizer) {
    Result<std::string> text = tokenizer->decode(generated);
    std::printf("%s\n", text.ok() ? text->c_str() : "");
  } else {
    std::printf("%s\n", json_ids(generated).c_str());
  }
  std::fprintf(stderr, "time to first token %.2f ms, prefill %.1f tok/s (%zu tokens), decode %.1f tok/s (%zu tokens)\n",
               prefill_ms, prefill_tok_s, ids.size(), decode_tok_s, decode_steps);
  return 0;
}

int run_score(std::span<const std::string_view> args) {
  std::string file, ids_flag, device_flag = "auto";
  bool json = false;
  bool prefill = false;
  Flags flags(kScoreUsage);
  flags.positional("FILE", &file, true);
  flags.flag("--prompt-ids", &ids_flag);
  flags.flag("--prefill", &prefill);
  flags.flag("--json", &json);
  flags.flag("--device", &device_flag);
  if (Status s = flags.parse(args); !s.ok()) return fail("score", s, 2);
  if (flags.help_requested()) return std::fputs(kScoreUsage, stdout) >= 0 ? 0 : 1;
  if (ids_flag.empty()) return fail("score", invalid_argument("--prompt-ids is required"), 2);
  Result<std::vector<int64_t>> ids = parse_int_list(ids_flag, "--prompt-ids");
  if (!ids.ok()) return fail("score", ids.status(), 2);
  if (ids->size() < 2) return fail("score", invalid_argument("--prompt-ids needs at least 2 ids"), 2);
  Result<DeviceKind> device = device_from_flag(device_flag);
  if (!device.ok()) return fail("score", device.status(), 2);
  Result<Runner> runner = Runner::open(file, *device);
  if (!runner.ok()) return fail("score", runner.status());
  if (Status s = check_ids(*ids, runner->vocab()); !s.ok()) return fail("score", s);
  if (static_cast<int64_t>(ids->size()) > runner->engine().max_context()) {
    return fail("score", invalid_argument("more ids than the engine's context"));
  }
  // The logits after ids[0..i] score ids[i+1]: one token at a time (the KV cache holds the
  // rest), or with --prefill the whole prefix from position 0 in one call (rewriting the
  // cache rows it covers). Works with any engine (last-position or all-position logits).
  std::vector<double> logprobs;
  Tensor logits;
  for (size_t i = 0; i + 1 < ids->size(); ++i) {
    const std::vector<int64_t> call_ids =
        prefill ? std::vector<int64_t>(ids->begin(), ids->begin() + static_cast<ptrdiff_t>(i) + 1)
                : std::vector<int64_t>{(*ids)[i]};
    const int64_t start = prefill ? 0 : static_cast<int64_t>(i);
    if (Status s = runner->call(call_ids, start, ProfileRequest::automatic(), logits); !s.ok()) {
      return fail("score", s);
    }
    logprobs.push_back(log_prob(logits, logits.dims[1] - 1, (*ids)[i + 1]));
  }
  if (json) {
    std::string s = "{\"token_logprobs\": [";
    for (size_t i = 0; i < logprobs.size(); ++i) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%s%.9g", i > 0 ? ", " : "", logprobs[i]);
      s += buf;
    }
    std::printf("%s]}\n", s.c_str());
  } else {
    double total = 0;
    for (double lp : logprobs) total += lp;
    std::printf("mean log-prob %.6f, perplexity %.4f over %zu tokens\n", total / static_cast<double>(logprobs.size()),
                std::exp(-total / static_cast<double>(logprobs.size())), logprobs.size());
  }
  return 0;
}

}  // namespace gearbox::cli
