// gearbox generate and gearbox score.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <future>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>

#include <CLI/CLI.hpp>

#include "cli_args.h"
#include "commands.h"
#include "format/engine_file.h"
#include "format/mapped_file.h"
#include "generate_batch.h"
#include "json_line.h"
#include "runner.h"
#include "tokenizer.h"

namespace gearbox::cli {
namespace {

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

Status check_ids(const std::vector<int64_t>& ids, int64_t vocab) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return invalid_argument("token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  return {};
}

struct GenerateArgs {
  std::string file;
  std::string prompt;
  std::vector<int64_t> prompt_ids;
  std::string prompts_file;
  std::string prompt_ids_file;
  std::string device = "auto";
  int64_t max_new = 32;
  int64_t top_k = 0;
  int64_t seed = 0;
  double temperature = 0;
  double top_p = 1;
  bool json = false;
  bool no_bos = false;
  bool ignore_eos = false;
};

// The lines of `path` that hold more than white space.
Result<std::vector<std::string>> read_lines(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) return not_found(std::string(flag) + ": cannot open " + path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  }
  if (lines.empty()) return invalid_argument(std::string(flag) + ": " + path + " holds no prompt");
  return lines;
}

/// The tokenizer of the engine file at `path`, from its metadata alone (the weights are
/// neither uploaded nor checked): the SentencePiece model when the engine has one, else the
/// checkpoint's tokenizer.json. `generate` reads it on a thread of its own while the engine
/// loads and its session warms up, since a tokenizer.json of a 128k vocabulary takes about
/// as long to read (docs/decisions/0038).
std::future<Result<Tokenizer>> start_reading_tokenizer(const std::string& path) {
  return std::async(std::launch::async, [path]() -> Result<Tokenizer> {
    Result<format::MappedFile> mapped = format::MappedFile::open(path);
    if (!mapped.ok()) return mapped.status();
    Result<format::ParsedEngine> parsed = format::parse_engine(mapped->bytes(), format::PayloadCheck::kDeferred);
    if (!parsed.ok()) return parsed.status().with_context(path);
    const std::string sentencepiece = format::metadata_value(parsed->desc, "tokenizer.sentencepiece");
    return !sentencepiece.empty() ? Tokenizer::from_sentencepiece(sentencepiece)
                                  : Tokenizer::from_hf_json(format::metadata_value(parsed->desc, "tokenizer.hf_json"));
  });
}

// Several prompts, one a line, generated together over the session's KV-cache slots;
// `tokenizer` is set for --prompts-file.
int run_generate_many(const GenerateArgs& o, Runner& runner, std::vector<int64_t> eos,
                      const std::optional<Tokenizer>& tokenizer) {
  const bool text = !o.prompts_file.empty();
  const char* flag = text ? "--prompts-file" : "--prompt-ids-file";
  Result<std::vector<std::string>> lines = read_lines(text ? o.prompts_file : o.prompt_ids_file, flag);
  if (!lines.ok()) return fail("generate", lines.status());
  Result<int64_t> bos = parse_int(runner.engine().metadata("tokenizer.bos"), "tokenizer.bos");
  std::vector<std::vector<int64_t>> prompts;
  for (size_t i = 0; i < lines->size(); ++i) {
    const std::string where = std::string(flag) + " line " + std::to_string(i + 1);
    std::vector<int64_t> ids;
    if (text) {
      Result<std::vector<int64_t>> encoded = tokenizer->encode((*lines)[i]);
      if (!encoded.ok()) return fail("generate", encoded.status().with_context(where));
      if (!o.no_bos && bos.ok() && *bos >= 0) ids.push_back(*bos);
      ids.insert(ids.end(), encoded->begin(), encoded->end());
    } else {
      std::string line = (*lines)[i];
      line.erase(std::remove_if(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; }),
                 line.end());
      Result<std::vector<int64_t>> parsed = parse_int_list(line, where);
      if (!parsed.ok()) return fail("generate", parsed.status(), 2);
      ids = std::move(*parsed);
    }
    if (Status s = check_ids(ids, runner.vocab()); !s.ok()) return fail("generate", s.with_context(where));
    if (ids.empty() || o.max_new > runner.engine().max_context() - static_cast<int64_t>(ids.size())) {
      return fail("generate",
                  invalid_argument(where + ": prompt (" + std::to_string(ids.size()) + ") + --max-new-tokens (" +
                                   std::to_string(o.max_new) + ") exceed the engine's context of " +
                                   std::to_string(runner.engine().max_context())));
    }
    prompts.push_back(std::move(ids));
  }
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  BatchOptions options;
  options.max_new = o.max_new;
  options.eos = std::move(eos);
  options.greedy = o.temperature <= 0;
  options.next_token = [&](const float* x, int64_t vocab) {
    return sample(x, vocab, o.temperature, o.top_k, o.top_p, rng);
  };
  Result<BatchOutcome> out = generate_batch(runner, prompts, options);
  if (!out.ok()) return fail("generate", out.status());
  int64_t generated_total = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SequenceResult& seq = out->sequences[i];
    generated_total += static_cast<int64_t>(seq.generated.size());
    const size_t decode_steps = seq.generated.size() - 1;
    const double prefill_tok_s = static_cast<double>(prompts[i].size()) / (seq.prefill_ms / 1e3);
    const double decode_tok_s = decode_steps > 0 ? static_cast<double>(decode_steps) / (seq.decode_ms / 1e3) : 0.0;
    const double ttft_ms = seq.wait_ms + seq.prefill_ms;
    if (o.json) {
      const nlohmann::ordered_json doc = {{"prompt_ids", prompts[i]},
                                          {"generated_ids", seq.generated},
                                          {"ttft_ms", as_printed(ttft_ms, "%.3f")},
                                          {"prefill_tok_s", as_printed(prefill_tok_s, "%.1f")},
                                          {"decode_tok_s", as_printed(decode_tok_s, "%.1f")}};
      std::printf("%s\n", json_line(doc).c_str());
      continue;
    }
    if (tokenizer) {
      Result<std::string> decoded = tokenizer->decode(seq.generated);
      std::printf("%s\n", decoded.ok() ? decoded->c_str() : "");
    } else {
      std::printf("%s\n", json_line(nlohmann::ordered_json(seq.generated)).c_str());
    }
    std::fprintf(
        stderr,
        "sequence %zu: time to first token %.2f ms, prefill %.1f tok/s (%zu tokens), decode %.1f tok/s (%zu tokens)\n",
        i + 1, ttft_ms, prefill_tok_s, prompts[i].size(), decode_tok_s, decode_steps);
  }
  const double mean_rows =
      out->decode_calls > 0 ? static_cast<double>(out->decode_rows) / static_cast<double>(out->decode_calls) : 0.0;
  std::fprintf(stderr,
               "%zu sequences over %lld slots: %lld tokens in %.1f ms, %.1f tok/s together; %lld decode steps of %.2f "
               "sequences on average\n",
               prompts.size(), static_cast<long long>(out->slots), static_cast<long long>(generated_total),
               out->wall_ms, static_cast<double>(generated_total) / (out->wall_ms / 1e3),
               static_cast<long long>(out->decode_calls), mean_rows);
  return 0;
}

// `ids_given`: --prompt-ids was given.
int run_generate(const GenerateArgs& o, bool ids_given) {
  const int prompt_sources = static_cast<int>(!o.prompt.empty()) + static_cast<int>(ids_given) +
                             static_cast<int>(!o.prompts_file.empty()) + static_cast<int>(!o.prompt_ids_file.empty());
  if (prompt_sources != 1) {
    return fail("generate",
                invalid_argument("give exactly one of --prompt, --prompt-ids, --prompts-file and --prompt-ids-file"),
                2);
  }
  if (o.max_new < 1) return fail("generate", invalid_argument("--max-new-tokens must be >= 1"), 2);
  if (o.temperature < 0 || o.top_k < 0 || !(o.top_p > 0 && o.top_p <= 1)) {
    return fail("generate", invalid_argument("need --temperature >= 0, --top-k >= 0 and 0 < --top-p <= 1"), 2);
  }
  Result<DeviceKind> device = device_from_flag(o.device);
  if (!device.ok()) return fail("generate", device.status(), 2);
  std::future<Result<Tokenizer>> reading_tokenizer;
  if (!o.prompt.empty() || !o.prompts_file.empty()) reading_tokenizer = start_reading_tokenizer(o.file);
  Result<Runner> runner = Runner::open(o.file, *device);
  if (!runner.ok()) return fail("generate", runner.status());
  std::optional<Tokenizer> tokenizer;
  if (reading_tokenizer.valid()) {
    Result<Tokenizer> t = reading_tokenizer.get();
    if (!t.ok()) return fail("generate", t.status());
    tokenizer.emplace(std::move(*t));
  }
  if (!o.prompts_file.empty() || !o.prompt_ids_file.empty()) {
    std::vector<int64_t> eos;
    if (!o.ignore_eos) {
      Result<std::vector<int64_t>> e = parse_int_list(runner->engine().metadata("tokenizer.eos"), "tokenizer.eos");
      if (e.ok()) eos = *e;
    }
    return run_generate_many(o, *runner, std::move(eos), tokenizer);
  }

  std::vector<int64_t> ids;
  if (!o.prompt.empty()) {
    Result<std::vector<int64_t>> encoded = tokenizer->encode(o.prompt);
    if (!encoded.ok()) return fail("generate", encoded.status());
    Result<int64_t> bos = parse_int(runner->engine().metadata("tokenizer.bos"), "tokenizer.bos");
    if (!o.no_bos && bos.ok() && *bos >= 0) ids.push_back(*bos);
    ids.insert(ids.end(), encoded->begin(), encoded->end());
  } else {
    ids = o.prompt_ids;
  }
  if (Status s = check_ids(ids, runner->vocab()); !s.ok()) return fail("generate", s);
  if (o.max_new > runner->engine().max_context() - static_cast<int64_t>(ids.size())) {
    return fail("generate", invalid_argument("prompt (" + std::to_string(ids.size()) + ") + --max-new-tokens (" +
                                             std::to_string(o.max_new) + ") exceed the engine's context of " +
                                             std::to_string(runner->engine().max_context())));
  }
  std::vector<int64_t> eos;
  if (!o.ignore_eos) {
    Result<std::vector<int64_t>> e = parse_int_list(runner->engine().metadata("tokenizer.eos"), "tokenizer.eos");
    if (e.ok()) eos = *e;
  }
  const bool named = runner->profile_index("prefill") >= 0 && runner->profile_index("decode") >= 0;
  const ProfileRequest prefill_request = named ? ProfileRequest::named("prefill") : ProfileRequest::automatic();
  const ProfileRequest decode_request = named ? ProfileRequest::named("decode") : ProfileRequest::automatic();

  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  Tensor logits;
  double prefill_ms = 0, decode_ms = 0;
  if (Status s = runner->call(ids, 0, ids.size() == 1 ? decode_request : prefill_request, logits, &prefill_ms);
      !s.ok()) {
    return fail("generate", s);
  }
  const int64_t vocab = logits.dims[logits.dims.rank() - 1];
  std::vector<int64_t> generated;
  const float* last_row = logits.data<float>() + (logits.dims.volume() - vocab);
  if (Status s = check_finite_logits(last_row, vocab, static_cast<int64_t>(ids.size()) - 1); !s.ok()) {
    return fail("generate", s);
  }
  int64_t next = sample(last_row, vocab, o.temperature, o.top_k, o.top_p, rng);
  generated.push_back(next);
  // Each step's one row of logits lands in host memory the device writes by DMA.
  Result<HostMemory> step_memory = runner->engine().allocate_host(vocab * 4);
  if (!step_memory.ok()) return fail("generate", step_memory.status());
  TensorView step_logits{step_memory->data(), DataType::kF32, Dims{}, MemoryKind::kHost, vocab * 4};
  while (static_cast<int64_t>(generated.size()) < o.max_new && std::find(eos.begin(), eos.end(), next) == eos.end()) {
    double ms = 0;
    const int64_t pos = static_cast<int64_t>(ids.size() + generated.size()) - 1;
    if (Status s = runner->call({next}, pos, decode_request, step_logits, &ms); !s.ok()) return fail("generate", s);
    decode_ms += ms;
    if (Status s = check_finite_logits(static_cast<const float*>(step_logits.data), vocab, pos); !s.ok()) {
      return fail("generate", s);
    }
    next = sample(static_cast<const float*>(step_logits.data), vocab, o.temperature, o.top_k, o.top_p, rng);
    generated.push_back(next);
  }
  const double prefill_tok_s = static_cast<double>(ids.size()) / (prefill_ms / 1e3);
  const size_t decode_steps = generated.size() - 1;
  const double decode_tok_s = decode_steps > 0 ? static_cast<double>(decode_steps) / (decode_ms / 1e3) : 0.0;
  if (o.json) {
    const nlohmann::ordered_json doc = {{"prompt_ids", ids},
                                        {"generated_ids", generated},
                                        {"ttft_ms", as_printed(prefill_ms, "%.3f")},
                                        {"prefill_tok_s", as_printed(prefill_tok_s, "%.1f")},
                                        {"decode_tok_s", as_printed(decode_tok_s, "%.1f")}};
    std::printf("%s\n", json_line(doc).c_str());
    return 0;
  }
  if (tokenizer) {
    Result<std::string> text = tokenizer->decode(generated);
    std::printf("%s\n", text.ok() ? text->c_str() : "");
  } else {
    std::printf("%s\n", json_line(nlohmann::ordered_json(generated)).c_str());
  }
  // Out before the engine is torn down, also into a pipe: `gearbox bench` times a fresh
  // process to this line.
  std::fflush(stdout);
  std::fprintf(stderr, "time to first token %.2f ms, prefill %.1f tok/s (%zu tokens), decode %.1f tok/s (%zu tokens)\n",
               prefill_ms, prefill_tok_s, ids.size(), decode_tok_s, decode_steps);
  return 0;
}

struct ScoreArgs {
  std::string file;
  std::vector<int64_t> ids;
  std::string device = "auto";
  bool prefill = false;
  bool json = false;
};

int run_score(const ScoreArgs& o, bool ids_given) {
  if (!ids_given) return fail("score", invalid_argument("--prompt-ids is required"), 2);
  const std::vector<int64_t>& ids = o.ids;
  if (ids.size() < 2) return fail("score", invalid_argument("--prompt-ids needs at least 2 ids"), 2);
  Result<DeviceKind> device = device_from_flag(o.device);
  if (!device.ok()) return fail("score", device.status(), 2);
  Result<Runner> runner = Runner::open(o.file, *device);
  if (!runner.ok()) return fail("score", runner.status());
  if (Status s = check_ids(ids, runner->vocab()); !s.ok()) return fail("score", s);
  if (static_cast<int64_t>(ids.size()) > runner->engine().max_context()) {
    return fail("score", invalid_argument("more ids than the engine's context"));
  }
  // The logits after ids[0..i] score ids[i+1]: one token at a time (the KV cache holds the
  // rest), or with --prefill the whole prefix from position 0 in one call (rewriting the
  // cache rows it covers). Works with any engine (last-position or all-position logits).
  std::vector<double> logprobs;
  Tensor logits;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const std::vector<int64_t> call_ids =
        o.prefill ? std::vector<int64_t>(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(i) + 1)
                  : std::vector<int64_t>{ids[i]};
    const int64_t start = o.prefill ? 0 : static_cast<int64_t>(i);
    if (Status s = runner->call(call_ids, start, ProfileRequest::automatic(), logits); !s.ok()) {
      return fail("score", s);
    }
    const int64_t vocab = logits.dims[logits.dims.rank() - 1];
    const float* row = logits.data<float>() + (logits.dims[1] - 1) * vocab;
    if (Status s = check_finite_logits(row, vocab, static_cast<int64_t>(i)); !s.ok()) return fail("score", s);
    logprobs.push_back(log_prob(logits, logits.dims[1] - 1, ids[i + 1]));
  }
  if (o.json) {
    nlohmann::ordered_json values = nlohmann::ordered_json::array();
    for (double lp : logprobs) values.push_back(as_printed(lp, "%.9g"));
    std::printf("%s\n", json_line({{"token_logprobs", values}}).c_str());
  } else {
    double total = 0;
    for (double lp : logprobs) total += lp;
    std::printf("mean log-prob %.6f, perplexity %.4f over %zu tokens\n", total / static_cast<double>(logprobs.size()),
                std::exp(-total / static_cast<double>(logprobs.size())), logprobs.size());
  }
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& gearbox) {
  auto o = std::make_shared<GenerateArgs>();
  CLI::App* app = gearbox.add_subcommand(
      "generate",
      "generate text (or token ids) with an engine\n\n"
      "Generates tokens from --prompt TEXT or --prompt-ids 1,2,3: the prompt on the 'prefill' profile, each new "
      "token on 'decode' (when the engine has them; otherwise automatic selection). Greedy unless --temperature > 0.");
  app->add_option("FILE", o->file, "the engine file")->required();
  app->add_option("--prompt", o->prompt, "the prompt as text, tokenized with the engine's tokenizer")
      ->type_name("TEXT");
  const CLI::Option* ids = add_int_list_option(*app, "--prompt-ids", o->prompt_ids, "the prompt as token ids");
  app->add_option("--prompts-file", o->prompts_file,
                  "several prompts, one text prompt a line, generated together over the engine's KV-cache slots "
                  "(continuous batching: a waiting prompt starts as soon as a sequence ends)")
      ->type_name("FILE");
  app->add_option("--prompt-ids-file", o->prompt_ids_file,
                  "several prompts as token ids, one comma-separated list a line (as --prompts-file)")
      ->type_name("FILE");
  add_int_option(*app, "--max-new-tokens", o->max_new, "tokens to generate at most", 1,
                 std::numeric_limits<int64_t>::max())
      ->capture_default_str();
  add_number_option(*app, "--temperature", o->temperature, "sampling temperature; 0: greedy")
      ->type_name("T")
      ->capture_default_str();
  add_int_option(*app, "--top-k", o->top_k, "keep the K most likely tokens; 0: all")
      ->type_name("K")
      ->capture_default_str();
  add_number_option(*app, "--top-p", o->top_p, "keep the smallest set with probability >= P")
      ->type_name("P")
      ->capture_default_str();
  add_int_option(*app, "--seed", o->seed, "sampling seed")->type_name("S")->capture_default_str();
  app->add_flag("--no-bos", o->no_bos, "do not prepend the BOS token to a text prompt");
  app->add_flag("--ignore-eos", o->ignore_eos, "do not stop at the engine's end-of-sequence tokens");
  app->add_flag("--json", o->json,
                "print {\"prompt_ids\", \"generated_ids\", \"ttft_ms\", \"prefill_tok_s\", \"decode_tok_s\"}, one "
                "line per prompt in input order");
  app->add_option("--device", o->device, "cpu, cuda or auto")->type_name("D")->capture_default_str();
  return {app, [o, ids] { return run_generate(*o, ids->count() > 0); }};
}

Command add_score_command(CLI::App& gearbox) {
  auto o = std::make_shared<ScoreArgs>();
  CLI::App* app = gearbox.add_subcommand(
      "score",
      "teacher-forced log-probabilities of a sequence\n\n"
      "For each i >= 1, log p(id_i | ids before i). By default one token per call (the "
      "decode path); with --prefill each log-prob comes from one call over the whole prefix ids[0..i-1] (the path a "
      "prompt takes, on the profile that fits it).");
  app->add_option("FILE", o->file, "the engine file")->required();
  const CLI::Option* ids = add_int_list_option(*app, "--prompt-ids", o->ids, "the sequence, at least 2 ids");
  app->add_flag("--prefill", o->prefill, "score each prefix in one call");
  app->add_flag("--json", o->json, "print {\"token_logprobs\"}");
  app->add_option("--device", o->device, "cpu, cuda or auto")->type_name("D")->capture_default_str();
  return {app, [o, ids] { return run_score(*o, ids->count() > 0); }};
}

}  // namespace gearbox::cli
