// Reading a tokenizer.json of the size Llama 3 and Qwen2 checkpoints ship, as `gearbox
// generate --prompt` does before a prompt's first token. The file is the Llama 3 layout of
// tests/data/tokenizer/llama3.json (regex Split and ByteLevel pre-tokenizers, ByteLevel
// decoder) with a byte-level BPE model of 128k or 280k merges written here, one token per
// merge, merges in the list form `tokenizers` writes. Google Benchmark; the numbers go to
// docs/PERFORMANCE.md and docs/decisions/0038.
//
//   build/release/bench/tokenizer_load_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer.h"
#include "tokenizer_json_internal.h"  // bytes_to_byte_level: the ByteLevel characters

namespace {

using Json = nlohmann::json;

/// The fixture's layout with `merges` merges over the 256 ByteLevel characters: each merge
/// joins an earlier token (short ones more often) and a character into a new token of at
/// most 16 bytes. Deterministic (xorshift64).
std::string tokenizer_json(int64_t merges) {
  std::ifstream in(std::string(GEARBOX_TEST_DATA) + "/tokenizer/llama3.json", std::ios::binary);
  Json doc = Json::parse(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  doc.erase("added_tokens");
  doc.erase("post_processor");
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b)
    tokens.push_back(gearbox::cli::hf_json::bytes_to_byte_level(std::string(1, static_cast<char>(b))));
  std::unordered_set<std::string> known(tokens.begin(), tokens.end());
  Json pairs = Json::array();
  uint64_t x = 0x9E3779B97F4A7C15ull;
  const auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  while (static_cast<int64_t>(pairs.size()) < merges) {
    const double u = static_cast<double>(next() % 1000000) / 1e6;
    const std::string& a = tokens[static_cast<size_t>(u * u * static_cast<double>(tokens.size()))];
    const std::string& b = tokens[next() % 256];
    std::string joined = a + b;
    if (joined.size() > 16 || !known.insert(joined).second) continue;
    pairs.push_back(Json::array({a, b}));
    tokens.push_back(std::move(joined));
  }
  Json vocab = Json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  doc["model"]["vocab"] = std::move(vocab);
  doc["model"]["merges"] = std::move(pairs);
  return doc.dump();
}

// Arg: merges (and tokens beyond the 256 characters).
void BM_TokenizerLoad(benchmark::State& state) {
  const std::string text = tokenizer_json(state.range(0));
  for (auto _ : state) {
    gearbox::Result<gearbox::cli::Tokenizer> t = gearbox::cli::Tokenizer::from_hf_json(text);
    if (!t.ok()) {
      state.SkipWithError(t.status().to_string().c_str());
      break;
    }
    benchmark::DoNotOptimize(t);
  }
  state.counters["MB"] = static_cast<double>(text.size()) / 1e6;
}
BENCHMARK(BM_TokenizerLoad)->Arg(128000)->Arg(280000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
