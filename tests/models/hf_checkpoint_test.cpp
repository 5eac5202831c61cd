// Hugging Face checkpoints: safetensors files written here (single and sharded) round-trip
// tensor by tensor; every kind of header or index damage gets its own error; config.json
// as transformers 4.x and 5.x write it (text-only and multimodal) becomes the right
// Gemma3Config; CheckpointWeights converts dtypes exactly and rejects wrong shapes; and a
// model built from a checkpoint carries the same payload as one built from the source.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/half.h"
#include "models/gemma3.h"
#include "models/hf_config.h"
#include "models/hf_weights.h"
#include "models/safetensors.h"
#include "safetensors_writer.h"

namespace gearbox::models {
namespace {

using Bytes = std::vector<uint8_t>;
using Json = nlohmann::json;
namespace fs = std::filesystem;

// ---- writing checkpoints ----------------------------------------------------------------------

void write_file(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void write_text(const fs::path& path, const std::string& text) { write_file(path, Bytes(text.begin(), text.end())); }

// A fresh directory per test, removed afterwards.
class HfCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("gearbox_hf_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir() const { return dir_.string(); }
  fs::path path(const std::string& name) const { return dir_ / name; }

  fs::path dir_;
};

std::vector<TensorSpec> three_tensors() {
  return {
      {"model.embed_tokens.weight", "F32", {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})},
      {"model.norm.weight", "BF16", {4}, u16_bytes({0x3f80, 0xc020, 0x0000, 0x7f80})},
      {"model.layers.0.self_attn.q_norm.weight", "F16", {2, 2}, u16_bytes({0x3c00, 0xc000, 0x3555, 0x0001})},
  };
}

void expect_tensor(const SafetensorsCheckpoint& ckpt, const TensorSpec& spec, DataType dtype, const std::string& file) {
  const SafetensorsTensor* t = ckpt.find(spec.name);
  ASSERT_NE(t, nullptr) << spec.name;
  EXPECT_EQ(t->name, spec.name);
  EXPECT_EQ(t->dtype, dtype);
  EXPECT_EQ(t->dtype_name, spec.dtype);
  EXPECT_TRUE(t->supported);
  EXPECT_EQ(t->dims, Dims(std::span<const int64_t>(spec.shape)));
  EXPECT_EQ(Bytes(t->bytes.begin(), t->bytes.end()), spec.data) << spec.name;
  EXPECT_EQ(t->file, file);
}

// ---- safetensors: round trips -----------------------------------------------------------------

TEST_F(HfCheckpoint, SingleFileRoundTrips) {
  const std::vector<TensorSpec> specs = three_tensors();
  write_file(path("model.safetensors"), safetensors_file(specs, {{"format", "pt"}}));
  Result<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->size(), 3u);
  EXPECT_EQ(ckpt->names(), (std::vector<std::string>{"model.embed_tokens.weight",
                                                     "model.layers.0.self_attn.q_norm.weight", "model.norm.weight"}));
  expect_tensor(*ckpt, specs[0], DataType::kF32, "model.safetensors");
  expect_tensor(*ckpt, specs[1], DataType::kBF16, "model.safetensors");
  expect_tensor(*ckpt, specs[2], DataType::kF16, "model.safetensors");
  EXPECT_EQ(ckpt->find("model.nope"), nullptr);
  Result<const SafetensorsTensor*> got = ckpt->get("model.norm.weight");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)->name, "model.norm.weight");
  Result<const SafetensorsTensor*> missing = ckpt->get("model.nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "checkpoint has no tensor 'model.nope'");
}

TEST_F(HfCheckpoint, OpensAFilePathAndSurvivesMoves) {
  const std::vector<TensorSpec> specs = three_tensors();
  write_file(path("weights.safetensors"), safetensors_file(specs));
  Result<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(path("weights.safetensors").string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  SafetensorsCheckpoint moved = std::move(*ckpt);
  SafetensorsCheckpoint assigned = std::move(moved);
  expect_tensor(assigned, specs[1], DataType::kBF16, "weights.safetensors");
}

TEST_F(HfCheckpoint, EmptyTensorsAndMetadataAreFine) {
  write_file(
      path("model.safetensors"),
      safetensors_file({{"empty", "F32", {0, 5}, {}}, {"scalar", "F32", {}, f32_bytes({7})}, {"e2", "BF16", {0}, {}}},
                       {{"format", "pt"}, {"note", "x"}}));
  Result<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->find("empty")->bytes.size(), 0u);
  EXPECT_EQ(ckpt->find("scalar")->dims.rank(), 0);
  EXPECT_EQ(ckpt->find("scalar")->bytes.size(), 4u);
}

void write_two_shards(const fs::path& dir) {
  const std::vector<TensorSpec> specs = three_tensors();
  write_file(dir / "model-00001-of-00002.safetensors", safetensors_file({specs[0], specs[2]}));
  write_file(dir / "model-00002-of-00002.safetensors", safetensors_file({specs[1]}));
  const Json index = {{"metadata", {{"total_size", 40}}},
                      {"weight_map",
                       {{specs[0].name, "model-00001-of-00002.safetensors"},
                        {specs[2].name, "model-00001-of-00002.safetensors"},
                        {specs[1].name, "model-00002-of-00002.safetensors"}}}};
  write_text(dir / "model.safetensors.index.json", index.dump(2));
}

TEST_F(HfCheckpoint, ShardedRoundTrips) {
  write_two_shards(dir_);
  Result<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  const std::vector<TensorSpec> specs = three_tensors();
  EXPECT_EQ(ckpt->size(), 3u);
  expect_tensor(*ckpt, specs[0], DataType::kF32, "model-00001-of-00002.safetensors");
  expect_tensor(*ckpt, specs[1], DataType::kBF16, "model-00002-of-00002.safetensors");
  expect_tensor(*ckpt, specs[2], DataType::kF16, "model-00001-of-00002.safetensors");
}

TEST_F(HfCheckpoint, PrefersTheSingleFileOverTheIndex) {
  write_text(path("model.safetensors.index.json"), "not json");  // would fail if read
  write_file(path("model.safetensors"), safetensors_file(three_tensors()));
  Result<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->size(), 3u);
}

TEST_F(HfCheckpoint, UnsupportedDtypesFailOnlyWhenAskedFor) {
  write_file(path("model.safetensors"), safetensors_file({{"model.f64", "F64", {2}, pattern_bytes(16, 1)},
                                                          {"model.i8", "I8", {3}, pattern_bytes(3, 2)},
                                                          {"model.q7", "Q7", {3}, pattern_bytes(5, 3)},
                                                          {"model.ok", "F32", {1}, f32_bytes({1})}}));
  Result<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_TRUE(ckpt->get("model.ok").ok());
  ASSERT_NE(ckpt->find("model.f64"), nullptr);
  EXPECT_FALSE(ckpt->find("model.f64")->supported);

  Result<const SafetensorsTensor*> f64 = ckpt->get("model.f64");
  ASSERT_FALSE(f64.ok());
  EXPECT_EQ(f64.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(f64.status().message(),
            "model.safetensors: tensor 'model.f64' has dtype F64; gearbox reads F32, BF16 and F16");
  EXPECT_EQ(ckpt->get("model.i8").status().code(), StatusCode::kUnimplemented);
  Result<const SafetensorsTensor*> q7 = ckpt->get("model.q7");
  ASSERT_FALSE(q7.ok());
  EXPECT_EQ(q7.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(q7.status().message().find("unknown dtype 'Q7'"), std::string::npos);
}

// ---- safetensors: damage ----------------------------------------------------------------------

struct Damage {
  const char* what;
  Bytes file;
  const char* message;  // a substring of the error
};

std::string entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

std::vector<Damage> damage_cases() {
  const Bytes d16 = pattern_bytes(16, 5);
  Bytes huge_length(8, 0);
  huge_length[3] = 0x10;  // 256 MiB
  Bytes past_eof = raw_file("{}");
  past_eof[0] = 200;
  return {
      {"empty file", {}, "model.safetensors: file is 0 bytes, too short for the 8-byte header length"},
      {"truncated header length", {1, 0, 0}, "file is 3 bytes, too short for the 8-byte header length"},
      {"header length past EOF", past_eof, "header length 200 runs past the end of the file (10 bytes)"},
      {"header length over the limit", huge_length, "header length 268435456 exceeds the 100 MiB limit"},
      {"bad JSON", raw_file(R"({"w": {"dtype": )"), "model.safetensors: header is not valid JSON"},
      {"empty header", raw_file(""), "header is not valid JSON"},
      {"non-object header", raw_file("[1, 2]"), "model.safetensors: header is not a JSON object"},
      {"entry not an object", raw_file(R"({"w": 3})"), "tensor 'w' is not a JSON object"},
      {"missing dtype", raw_file(R"({"w": {"shape": [4], "data_offsets": [0, 16]}})", d16), "tensor 'w' has no dtype"},
      {"dtype not a string", raw_file(R"({"w":)" + entry("7", "[4]", "[0, 16]") + "}", d16),
       "tensor 'w' has a dtype that is not a string"},
      {"missing shape", raw_file(R"({"w": {"dtype": "F32", "data_offsets": [0, 16]}})", d16),
       "tensor 'w' has no shape"},
      {"shape not a list", raw_file(R"({"w":)" + entry(R"("F32")", "4", "[0, 16]") + "}", d16),
       "tensor 'w' has a shape that is not a list"},
      {"negative extent", raw_file(R"({"w":)" + entry(R"("F32")", "[-4]", "[0, 16]") + "}", d16),
       "tensor 'w' has shape entry 0 that is not a non-negative integer"},
      {"fractional extent", raw_file(R"({"w":)" + entry(R"("F32")", "[2, 2.5]", "[0, 16]") + "}", d16),
       "tensor 'w' has shape entry 1 that is not a non-negative integer"},
      {"rank 9", raw_file(R"({"w":)" + entry(R"("F32")", "[1,1,1,1,1,1,1,1,4]", "[0, 16]") + "}", d16),
       "tensor 'w' has rank 9; gearbox reads up to 8"},
      {"missing data_offsets", raw_file(R"({"w": {"dtype": "F32", "shape": [4]}})", d16),
       "tensor 'w' has no data_offsets"},
      {"one offset", raw_file(R"({"w":)" + entry(R"("F32")", "[4]", "[16]") + "}", d16),
       "tensor 'w' has data_offsets that are not [begin, end] of non-negative integers"},
      {"negative offset", raw_file(R"({"w":)" + entry(R"("F32")", "[4]", "[-1, 15]") + "}", d16),
       "tensor 'w' has data_offsets that are not [begin, end]"},
      {"reversed", raw_file(R"({"w":)" + entry(R"("F32")", "[0]", "[8, 4]") + "}", d16),
       "model.safetensors: tensor 'w' data [8, 4) is reversed"},
      {"past the data", raw_file(R"({"w":)" + entry(R"("F32")", "[4]", "[4, 20]") + "}", d16),
       "tensor 'w' data [4, 20) ends past the data section (16 bytes)"},
      {"size mismatch", raw_file(R"({"w":)" + entry(R"("F32")", "[2, 2]", "[0, 12]") + "}", d16),
       "tensor 'w' data [0, 12) holds 12 bytes, but F32 [2, 2] needs 16"},
      {"unsupported dtype, wrong size", raw_file(R"({"w":)" + entry(R"("F64")", "[4]", "[0, 16]") + "}", d16),
       "tensor 'w' data [0, 16) holds 16 bytes, but F64 [4] needs 32"},
      {"volume overflow",
       raw_file(R"({"w":)" + entry(R"("F32")", "[4611686018427387904, 4611686018427387904]", "[0, 16]") + "}", d16),
       "tensor 'w' shape [4611686018427387904, 4611686018427387904] is too large"},
      {"byte overflow", raw_file(R"({"w":)" + entry(R"("F32")", "[4611686018427387904]", "[0, 16]") + "}", d16),
       "tensor 'w' shape [4611686018427387904] is too large"},
      {"odd F4 count", raw_file(R"({"w":)" + entry(R"("F4")", "[3]", "[0, 2]") + "}", d16),
       "tensor 'w' F4 [3] is not a whole number of bytes"},
      {"overlap",
       raw_file(
           R"({"a":)" + entry(R"("F32")", "[2]", "[0, 8]") + R"(,"b":)" + entry(R"("F32")", "[2]", "[4, 12]") + "}",
           d16),
       "model.safetensors: tensors 'a' [0, 8) and 'b' [4, 12) overlap"},
      {"overlap inside a larger tensor",
       raw_file(R"({"a":)" + entry(R"("F32")", "[4]", "[0, 16]") + R"(,"b":)" + entry(R"("F32")", "[1]", "[8, 12]") +
                    R"(,"c":)" + entry(R"("F32")", "[0]", "[4, 4]") + "}",
                d16),
       "tensors 'a' [0, 16) and 'b' [8, 12) overlap"},
      {"duplicate name",
       raw_file(
           R"({"w":)" + entry(R"("F32")", "[2]", "[0, 8]") + R"(,"w":)" + entry(R"("F32")", "[2]", "[8, 16]") + "}",
           d16),
       "model.safetensors: tensor 'w' appears twice in the header"},
      {"metadata not strings", raw_file(R"({"__metadata__": {"format": 1}})"),
       "model.safetensors: __metadata__ must map strings to strings"},
      {"metadata not an object", raw_file(R"({"__metadata__": "pt"})"), "__metadata__ must map strings to strings"},
  };
}

TEST_F(HfCheckpoint, EveryKindOfHeaderDamageHasItsOwnMessage) {
  for (const Damage& d : damage_cases()) {
    SCOPED_TRACE(d.what);
    write_file(path("model.safetensors"), d.file);
    Result<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(dir());
    ASSERT_FALSE(ckpt.ok());
    EXPECT_EQ(ckpt.status().code(), StatusCode::kDataLoss) << ckpt.status().to_string();
    EXPECT_NE(ckpt.status().message().find(d.message), std::string::npos) << ckpt.status().message();
    // The in-memory parser says the same.
    Result<std::vector<SafetensorsTensor>> parsed = internal::parse_safetensors(d.file, "model.safetensors");
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().message(), ckpt.status().message());
  }
}

TEST_F(HfCheckpoint, EveryTruncationFailsCleanly) {
  const Bytes full = safetensors_file(three_tensors(), {{"format", "pt"}});
  for (size_t n = 0; n < full.size(); ++n) {
    const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    Result<std::vector<SafetensorsTensor>> parsed = internal::parse_safetensors(cut, "model.safetensors");
    ASSERT_FALSE(parsed.ok()) << n;
    EXPECT_EQ(parsed.status().code(), StatusCode::kDataLoss) << n;
  }
  EXPECT_TRUE(internal::parse_safetensors(full, "model.safetensors").ok());
}

TEST_F(HfCheckpoint, MissingPathsAreNotFound) {
  Result<SafetensorsCheckpoint> none = SafetensorsCheckpoint::open(path("nope").string());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  Result<SafetensorsCheckpoint> empty = SafetensorsCheckpoint::open(dir());
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kNotFound);
  EXPECT_NE(empty.status().message().find("holds neither model.safetensors nor model.safetensors.index.json"),
            std::string::npos);
}

// ---- safetensors: shard damage ----------------------------------------------------------------

Status open_status(const std::string& dir) {
  Result<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(dir);
  return ckpt.ok() ? Status() : ckpt.status();
}

void expect_error(const Status& s, StatusCode code, const std::string& substring) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(substring), std::string::npos) << s.message();
}

TEST_F(HfCheckpoint, DamageInAShardNamesTheShard) {
  write_two_shards(dir_);
  write_file(path("model-00002-of-00002.safetensors"),
             raw_file(R"({"model.norm.weight":)" + entry(R"("BF16")", "[0]", "[100, 99]") + "}"));
  expect_error(open_status(dir()), StatusCode::kDataLoss,
               "model-00002-of-00002.safetensors: tensor 'model.norm.weight' data [100, 99) is reversed");
}

TEST_F(HfCheckpoint, IndexNamingATensorItsShardLacks) {
  write_two_shards(dir_);
  write_file(path("model-00002-of-00002.safetensors"), safetensors_file({{"model.other", "F32", {1}, f32_bytes({1})}}));
  expect_error(open_status(dir()), StatusCode::kDataLoss,
               "model.safetensors.index.json maps tensor 'model.norm.weight' to model-00002-of-00002.safetensors, "
               "which has no such tensor");
}

TEST_F(HfCheckpoint, TensorInTwoShards) {
  write_two_shards(dir_);
  write_file(path("model-00002-of-00002.safetensors"),
             safetensors_file({three_tensors()[1], {"model.embed_tokens.weight", "F32", {1}, f32_bytes({1})}}));
  expect_error(open_status(dir()), StatusCode::kDataLoss,
               "tensor 'model.embed_tokens.weight' is in both model-00001-of-00002.safetensors and "
               "model-00002-of-00002.safetensors");
}

TEST_F(HfCheckpoint, IndexNamingAMissingShard) {
  write_two_shards(dir_);
  fs::remove(path("model-00002-of-00002.safetensors"));
  expect_error(open_status(dir()), StatusCode::kNotFound,
               "model.safetensors.index.json names model-00002-of-00002.safetensors, which is missing");
}

TEST_F(HfCheckpoint, IndexMappingATensorToTheWrongShard) {
  write_two_shards(dir_);
  Json index = {{"weight_map",
                 {{"model.embed_tokens.weight", "model-00002-of-00002.safetensors"},
                  {"model.norm.weight", "model-00002-of-00002.safetensors"},
                  {"model.layers.0.self_attn.q_norm.weight", "model-00001-of-00002.safetensors"}}}};
  write_text(path("model.safetensors.index.json"), index.dump());
  expect_error(open_status(dir()), StatusCode::kDataLoss,
               "maps tensor 'model.embed_tokens.weight' to model-00002-of-00002.safetensors, but it is in "
               "model-00001-of-00002.safetensors");
}

TEST_F(HfCheckpoint, DamagedIndex) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "model.safetensors.index.json is not valid JSON"},
      {"[]", "model.safetensors.index.json is not a JSON object"},
      {R"({"metadata": {}})", "model.safetensors.index.json has no weight_map"},
      {R"({"weight_map": []})", "weight_map is not a JSON object"},
      {R"({"weight_map": {}})", "weight_map lists no tensors"},
      {R"({"weight_map": {"a": 3}})", "maps tensor 'a' to something other than a file name"},
      {R"({"weight_map": {"a": "../model.safetensors"}})", "which is not a file name in the checkpoint directory"},
      {R"({"weight_map": {"a": ".."}})", "which is not a file name in the checkpoint directory"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    write_text(path("model.safetensors.index.json"), text);
    expect_error(open_status(dir()), StatusCode::kDataLoss, message);
  }
}

// ---- config.json -------------------------------------------------------------------------------

// google/gemma-3-1b-it as transformers 4.50 wrote it.
Json gemma3_1b_config() {
  return Json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid",
    "eos_token_id": [1, 106], "final_logit_softcapping": null, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
    "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
    "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
    "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144})");
}

// A small text model as transformers 5.x writes it: layer_types and per-type rope_parameters.
Json v5_config() {
  return Json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "dtype": "float16",
    "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "rms_norm_eps": 1e-05,
    "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 32, "sliding_window": 16,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "rope_parameters": {
      "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 500000.0},
      "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}},
    "tie_word_embeddings": false, "bos_token_id": 2, "eos_token_id": 1,
    "final_logit_softcapping": null, "attn_logit_softcapping": null, "transformers_version": "5.0.0"})");
}

// google/gemma-3-4b-it's shape: text_config holds only what differs from Gemma3TextConfig.
Json multimodal_config() {
  return Json::parse(R"({
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
    "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
    "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
    "text_config": {
      "hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
      "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
      "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}})");
}

Result<HfModelInfo> parse(const Json& config) { return parse_gemma3_config(config.dump()); }

TEST(HfConfig, Gemma3OneBillionFromTransformers4) {
  Result<HfModelInfo> info = parse(gemma3_1b_config());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  const Gemma3Config& c = info->config;
  EXPECT_EQ(c.vocab, 262144);
  EXPECT_EQ(c.hidden, 1152);
  EXPECT_EQ(c.intermediate, 6912);
  EXPECT_EQ(c.layers, 26);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kv_heads, 1);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_theta_global, 1e6f);
  EXPECT_EQ(c.rope_theta_local, 1e4f);
  EXPECT_EQ(c.rope_linear_factor_global, 1.0f);
  EXPECT_EQ(c.sliding_window, 512);
  ASSERT_EQ(c.layer_is_sliding.size(), 26u);
  for (size_t i = 0; i < 26; ++i) EXPECT_EQ(c.layer_is_sliding[i], (i + 1) % 6 != 0) << i;
  EXPECT_EQ(c.query_pre_attn_scalar, 256.0f);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.max_context, 8192);
  EXPECT_EQ(c.dtype, DataType::kBF16);
  EXPECT_EQ(info->checkpoint_dtype, DataType::kBF16);
  EXPECT_EQ(info->bos_token_id, 2);
  EXPECT_EQ(info->eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_EQ(info->weight_prefix, "");
}

TEST(HfConfig, TextModelFromTransformers5) {
  Result<HfModelInfo> info = parse(v5_config());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  const Gemma3Config& c = info->config;
  EXPECT_EQ(c.vocab, 512);
  EXPECT_EQ(c.layers, 4);
  EXPECT_EQ(c.layer_is_sliding, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(c.rope_theta_global, 500000.0f);
  EXPECT_EQ(c.rope_theta_local, 5000.0f);
  EXPECT_EQ(c.rope_linear_factor_global, 4.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.query_pre_attn_scalar, 32.0f);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.max_context, 2048);  // no max_position_embeddings
  EXPECT_EQ(info->checkpoint_dtype, DataType::kF16);
  EXPECT_EQ(info->eos_token_ids, (std::vector<int64_t>{1}));
}

TEST(HfConfig, MultimodalTakesTextDefaultsForWhatItOmits) {
  Result<HfModelInfo> info = parse(multimodal_config());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  const Gemma3Config& c = info->config;
  EXPECT_EQ(c.vocab, 262208);
  EXPECT_EQ(c.hidden, 2560);
  EXPECT_EQ(c.intermediate, 10240);
  EXPECT_EQ(c.layers, 34);
  EXPECT_EQ(c.heads, 8);
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.sliding_window, 1024);
  EXPECT_EQ(c.rope_linear_factor_global, 8.0f);
  EXPECT_EQ(c.rope_theta_global, 1e6f);
  EXPECT_EQ(c.rope_theta_local, 1e4f);
  EXPECT_EQ(c.query_pre_attn_scalar, 256.0f);
  ASSERT_EQ(c.layer_is_sliding.size(), 34u);
  EXPECT_FALSE(c.layer_is_sliding[5]);
  EXPECT_TRUE(c.layer_is_sliding[6]);
  EXPECT_FALSE(c.layer_is_sliding[29]);
  EXPECT_EQ(c.max_context, 8192);
  EXPECT_EQ(info->checkpoint_dtype, DataType::kBF16);
  EXPECT_EQ(info->bos_token_id, 2);
  EXPECT_EQ(info->eos_token_ids, (std::vector<int64_t>{1, 106}));
}

TEST(HfConfig, RopeVariants) {
  Json flat = gemma3_1b_config();  // one rope_parameters dict for the global layers
  flat.erase("rope_theta");
  flat["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2}, {"rope_theta", 20000.0}};
  Result<HfModelInfo> a = parse(flat);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->config.rope_theta_global, 20000.0f);
  EXPECT_EQ(a->config.rope_theta_local, 1e4f);
  EXPECT_EQ(a->config.rope_linear_factor_global, 2.0f);

  Json old_key = gemma3_1b_config();  // rope_scaling with the old "type" key
  old_key["rope_scaling"] = {{"type", "linear"}, {"factor", 8.0}};
  Result<HfModelInfo> b = parse(old_key);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->config.rope_linear_factor_global, 8.0f);
  EXPECT_EQ(b->config.rope_theta_global, 1e6f);

  Json theta_outside = v5_config();  // per-type entries without thetas take the fields
  theta_outside["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}},
                                      {"sliding_attention", {{"rope_type", "default"}}}};
  theta_outside["rope_theta"] = 123.0;
  theta_outside["rope_local_base_freq"] = 45.0;
  Result<HfModelInfo> c = parse(theta_outside);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->config.rope_theta_global, 123.0f);
  EXPECT_EQ(c->config.rope_theta_local, 45.0f);
  EXPECT_EQ(c->config.rope_linear_factor_global, 1.0f);
}

struct ConfigError {
  const char* what;
  Json config;
  StatusCode code;
  const char* message;
};

template <typename Edit>
Json edited(Json config, Edit edit) {
  edit(config);
  return config;
}

std::vector<ConfigError> config_errors() {
  const Json base = gemma3_1b_config();
  using C = StatusCode;
  return {
      {"missing hidden_size", edited(base, [](Json& j) { j.erase("hidden_size"); }), C::kDataLoss,
       "hidden_size is missing"},
      {"null head_dim", edited(base, [](Json& j) { j["head_dim"] = nullptr; }), C::kDataLoss, "head_dim is missing"},
      {"string size", edited(base, [](Json& j) { j["vocab_size"] = "262144"; }), C::kDataLoss,
       "vocab_size must be an integer, got '262144'"},
      {"fractional size", edited(base, [](Json& j) { j["num_hidden_layers"] = 26.5; }), C::kDataLoss,
       "num_hidden_layers must be an integer, got 26.5"},
      {"zero size", edited(base, [](Json& j) { j["num_attention_heads"] = 0; }), C::kDataLoss,
       "num_attention_heads is 0, outside [1, 2147483647]"},
      {"missing rms_norm_eps", edited(base, [](Json& j) { j.erase("rms_norm_eps"); }), C::kDataLoss,
       "rms_norm_eps is missing"},
      {"negative eps", edited(base, [](Json& j) { j["rms_norm_eps"] = -1; }), C::kDataLoss,
       "rms_norm_eps must be a positive number, got -1"},
      {"final softcapping", edited(base, [](Json& j) { j["final_logit_softcapping"] = 30.0; }), C::kUnimplemented,
       "final_logit_softcapping 30.0 is not supported"},
      {"attention softcapping", edited(base, [](Json& j) { j["attn_logit_softcapping"] = 50.0; }), C::kUnimplemented,
       "attn_logit_softcapping 50.0 is not supported"},
      {"unknown rope type",
       edited(base,
              [](Json& j) {
                j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
              }),
       C::kUnimplemented,
       "rope_scaling.rope_type 'yarn' is not supported; gearbox supports default, linear and llama3"},
      {"unknown 5.x rope type",
       edited(v5_config(), [](Json& j) { j["rope_parameters"]["full_attention"]["rope_type"] = "dynamic"; }),
       C::kUnimplemented, "rope_parameters.full_attention.rope_type 'dynamic' is not supported"},
      {"llama3 RoPE, which Gemma3Config cannot hold",
       edited(v5_config(),
              [](Json& j) {
                j["rope_parameters"]["full_attention"] = {{"rope_type", "llama3"},
                                                          {"factor", 8},
                                                          {"low_freq_factor", 1},
                                                          {"high_freq_factor", 4},
                                                          {"original_max_position_embeddings", 64},
                                                          {"rope_theta", 5e5}};
              }),
       C::kUnimplemented, "a Gemma3Config cannot hold llama3 RoPE scaling"},
      {"linear without factor",
       edited(base,
              [](Json& j) {
                j["rope_scaling"] = {{"rope_type", "linear"}};
              }),
       C::kDataLoss, "rope_scaling.factor is missing for linear RoPE"},
      {"scaled sliding layers",
       edited(
           v5_config(),
           [](Json& j) {
             j["rope_parameters"]["sliding_attention"] = {{"rope_type", "linear"}, {"factor", 2}, {"rope_theta", 1e4}};
           }),
       C::kUnimplemented, "a Gemma3Config cannot hold RoPE scaling on sliding layers"},
      {"missing rope_theta", edited(base, [](Json& j) { j.erase("rope_theta"); }), C::kDataLoss,
       "rope_theta is missing"},
      {"layer_types length",
       edited(base,
              [](Json& j) {
                j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
              }),
       C::kDataLoss, "layer_types has 3 entries for 26 layers (num_hidden_layers)"},
      {"unknown layer type", edited(v5_config(), [](Json& j) { j["layer_types"][2] = "chunked_attention"; }),
       C::kUnimplemented, "layer_types[2] 'chunked_attention' is not supported"},
      {"no layer kinds", edited(base, [](Json& j) { j.erase("sliding_window_pattern"); }), C::kDataLoss,
       "layer_types and sliding_window_pattern are both missing"},
      {"bad activation", edited(base, [](Json& j) { j["hidden_activation"] = "gelu"; }), C::kUnimplemented,
       "hidden_activation 'gelu' is not supported; gearbox supports silu and gelu_pytorch_tanh"},
      {"bad hidden_act",
       edited(base,
              [](Json& j) {
                j.erase("hidden_activation");
                j["hidden_act"] = "relu";
              }),
       C::kUnimplemented, "hidden_act 'relu' is not supported"},
      {"bidirectional attention", edited(base, [](Json& j) { j["use_bidirectional_attention"] = true; }),
       C::kUnimplemented, "use_bidirectional_attention true is not supported (causal attention only)"},
      {"attention bias", edited(base, [](Json& j) { j["attention_bias"] = true; }), C::kUnimplemented,
       "attention_bias true is not supported for gemma3 (no projection biases)"},
      {"bad dtype", edited(base, [](Json& j) { j["torch_dtype"] = "float64"; }), C::kUnimplemented,
       "torch_dtype 'float64' is not supported; use float32, bfloat16 or float16"},
      {"bad eos",
       edited(base,
              [](Json& j) {
                j["eos_token_id"] = {1, "x"};
              }),
       C::kDataLoss, "eos_token_id must be a token id or a list of token ids, got a list"},
      {"bad tie", edited(base, [](Json& j) { j["tie_word_embeddings"] = "yes"; }), C::kDataLoss,
       "tie_word_embeddings must be true or false, got 'yes'"},
      {"other model", edited(base, [](Json& j) { j["model_type"] = "llama"; }), C::kUnimplemented,
       "model_type 'llama' is not a Gemma-3 config (gemma3_text or gemma3)"},
      {"no model_type", edited(base, [](Json& j) { j.erase("model_type"); }), C::kDataLoss, "model_type is missing"},
      {"multimodal without text_config", edited(multimodal_config(), [](Json& j) { j.erase("text_config"); }),
       C::kDataLoss, "text_config is missing from a gemma3 config"},
      {"multimodal bad field", edited(multimodal_config(), [](Json& j) { j["text_config"]["head_dim"] = -2; }),
       C::kDataLoss, "text_config.head_dim is -2, outside"},
      {"not an object", Json::array({1, 2}), C::kDataLoss, "config is not a JSON object"},
      {"heads not a multiple of kv heads", edited(base, [](Json& j) { j["num_key_value_heads"] = 3; }),
       C::kInvalidArgument, "must be a multiple of num_key_value_heads"},
  };
}

TEST(HfConfig, ErrorsNameTheField) {
  for (const ConfigError& e : config_errors()) {
    SCOPED_TRACE(e.what);
    Result<HfModelInfo> info = parse(e.config);
    ASSERT_FALSE(info.ok());
    expect_error(info.status(), e.code, e.message);
  }
  Result<HfModelInfo> not_json = parse_gemma3_config("{\"model_type\": ");
  ASSERT_FALSE(not_json.ok());
  expect_error(not_json.status(), StatusCode::kDataLoss, "config is not valid JSON");
}

TEST_F(HfCheckpoint, ReadsConfigAndGenerationConfig) {
  Json config = gemma3_1b_config();
  config["eos_token_id"] = 1;
  config["bos_token_id"] = 7;
  write_text(path("config.json"), config.dump());
  write_text(path("generation_config.json"), R"({"bos_token_id": 2, "eos_token_id": [1, 106], "do_sample": true})");
  Result<HfModelInfo> info = read_gemma3_config(dir());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->bos_token_id, 2);
  EXPECT_EQ(info->eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_EQ(info->config.hidden, 1152);

  write_text(path("generation_config.json"), R"({"eos_token_id": "end"})");
  Result<HfModelInfo> bad = read_gemma3_config(dir());
  ASSERT_FALSE(bad.ok());
  expect_error(bad.status(), StatusCode::kDataLoss, "generation_config.json: eos_token_id must be a token id");

  fs::remove(path("generation_config.json"));
  config.erase("hidden_size");
  write_text(path("config.json"), config.dump());
  Result<HfModelInfo> broken = read_gemma3_config(dir());
  ASSERT_FALSE(broken.ok());
  expect_error(broken.status(), StatusCode::kDataLoss, "config.json: hidden_size is missing");

  fs::remove(path("config.json"));
  EXPECT_EQ(read_gemma3_config(dir()).status().code(), StatusCode::kNotFound);
}

// ---- weights ----------------------------------------------------------------------------------

Result<SafetensorsCheckpoint> write_and_open(const fs::path& dir, const std::vector<TensorSpec>& specs) {
  write_file(dir / "model.safetensors", safetensors_file(specs));
  return SafetensorsCheckpoint::open(dir.string());
}

template <typename T>
std::vector<T> fill_as(CheckpointWeights& weights, const std::string& name, const Dims& dims, DataType dtype,
                       Status* status) {
  std::vector<T> out(static_cast<size_t>(dims.volume()));
  *status = weights.fill(name, dims, dtype,
                         std::span<uint8_t>(reinterpret_cast<uint8_t*>(out.data()), out.size() * sizeof(T)));
  return out;
}

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST_F(HfCheckpoint, Bf16ToF32IsExact) {
  const std::vector<uint16_t> bf16 = {0x3f80, 0xc020, 0x3f81, 0x0001, 0x8000, 0x7f80, 0xff80, 0x4049};
  Result<SafetensorsCheckpoint> ckpt = write_and_open(dir_, {{"model.norm.weight", "BF16", {8}, u16_bytes(bf16)}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  CheckpointWeights weights(*ckpt, "model.");
  weights.allow_non_finite(true);  // infinities among the patterns
  Status s;
  const std::vector<float> got = fill_as<float>(weights, "model.norm.weight", Dims{8}, DataType::kF32, &s);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < bf16.size(); ++i) EXPECT_EQ(f32_bits(got[i]), static_cast<uint32_t>(bf16[i]) << 16) << i;
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], -2.5f);
  EXPECT_EQ(got[2], 1.0078125f);
}

TEST_F(HfCheckpoint, F32ToBf16RoundsToNearestEven) {
  const std::vector<uint32_t> bits = {
      0x3f800000,  // 1.0 -> 0x3f80
      0x3f808000,  // halfway, even below -> 0x3f80
      0x3f818000,  // halfway, even above -> 0x3f82
      0x3f808001,  // just above halfway -> 0x3f81
      0x3f807fff,  // just below halfway -> 0x3f80
      0xc0200000,  // -2.5 -> 0xc020
      0x7f7fffff,  // FLT_MAX rounds to +inf
      0x7fc00001,  // NaN stays NaN
  };
  const std::vector<uint16_t> want = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0x3f80, 0xc020, 0x7f80};
  std::vector<float> values;
  values.reserve(bits.size());
  for (uint32_t b : bits) values.push_back(bits_f32(b));
  Result<SafetensorsCheckpoint> ckpt = write_and_open(dir_, {{"model.w", "F32", {2, 4}, f32_bytes(values)}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  CheckpointWeights weights(*ckpt, "model.");
  weights.allow_non_finite(true);  // an overflow to infinity and a NaN among the patterns
  Status s;
  const std::vector<uint16_t> got = fill_as<uint16_t>(weights, "model.w", Dims{2, 4}, DataType::kBF16, &s);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
  EXPECT_EQ(got[7] & 0x7f80, 0x7f80);
  EXPECT_NE(got[7] & 0x007f, 0);
}

TEST_F(HfCheckpoint, NonFiniteWeightsAreAnErrorNamingTheTensor) {
  const std::vector<float> nan_at_2 = {1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN(), 4.0f};
  const std::vector<float> big = {1.0f, 1e10f, 3.0f, 4.0f};  // finite in f32, infinite in f16
  Result<SafetensorsCheckpoint> ckpt =
      write_and_open(dir_, {{"model.a", "F32", {4}, f32_bytes(nan_at_2)}, {"model.b", "F32", {4}, f32_bytes(big)}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  CheckpointWeights weights(*ckpt, "model.");
  Status s;
  (void)fill_as<float>(weights, "model.a", Dims{4}, DataType::kF32, &s);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("tensor 'model.a' holds a non-finite value (NaN or infinity) at element 2"),
            std::string::npos)
      << s.message();
  (void)fill_as<uint16_t>(weights, "model.b", Dims{4}, DataType::kF16, &s);
  EXPECT_NE(s.message().find("at element 1 once rounded to f16"), std::string::npos) << s.message();
  (void)fill_as<float>(weights, "model.b", Dims{4}, DataType::kF32, &s);
  EXPECT_TRUE(s.ok()) << s.to_string();
  weights.allow_non_finite(true);
  (void)fill_as<float>(weights, "model.a", Dims{4}, DataType::kF32, &s);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST_F(HfCheckpoint, F16AndSameDtypeConversions) {
  const std::vector<uint16_t> f16 = {0x3c00, 0xc100, 0x0001, 0x7bff};  // 1, -2.5, smallest subnormal, 65504
  Result<SafetensorsCheckpoint> ckpt = write_and_open(dir_, {{"model.h", "F16", {4}, u16_bytes(f16)}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  CheckpointWeights weights(*ckpt, "model.");
  Status s;
  const std::vector<float> as_f32 = fill_as<float>(weights, "model.h", Dims{4}, DataType::kF32, &s);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(as_f32, (std::vector<float>{1.0f, -2.5f, 5.9604644775390625e-8f, 65504.0f}));
  const std::vector<uint16_t> same = fill_as<uint16_t>(weights, "model.h", Dims{4}, DataType::kF16, &s);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(same, f16);
  const std::vector<uint16_t> as_bf16 = fill_as<uint16_t>(weights, "model.h", Dims{4}, DataType::kBF16, &s);
  ASSERT_TRUE(s.ok());
  for (size_t i = 0; i < f16.size(); ++i) EXPECT_EQ(as_bf16[i], internal::f32_to_bf16(as_f32[i])) << i;
}

TEST_F(HfCheckpoint, WeightErrors) {
  Result<SafetensorsCheckpoint> ckpt = write_and_open(dir_, {{"model.norm.weight", "F32", {4}, f32_bytes({1, 2, 3, 4})},
                                                             {"model.f64", "F64", {1}, pattern_bytes(8, 1)}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  CheckpointWeights weights(*ckpt, "model.");
  Status s;
  fill_as<float>(weights, "model.norm.weight", Dims{8}, DataType::kF32, &s);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "model.safetensors: tensor 'model.norm.weight' has shape [4], but the config needs [8]");
  fill_as<float>(weights, "model.norm.weight", Dims{2, 2}, DataType::kF32, &s);
  expect_error(s, StatusCode::kDataLoss, "has shape [4], but the config needs [2, 2]");
  fill_as<float>(weights, "model.layers.3.mlp.up_proj.weight", Dims{4}, DataType::kF32, &s);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "checkpoint has no tensor 'model.layers.3.mlp.up_proj.weight'");
  fill_as<float>(weights, "model.f64", Dims{1}, DataType::kF32, &s);
  expect_error(s, StatusCode::kUnimplemented, "has dtype F64");
  fill_as<float>(weights, "vision_tower.x", Dims{1}, DataType::kF32, &s);
  expect_error(s, StatusCode::kInvalidArgument, "is neither model.* nor lm_head.weight");
  fill_as<int32_t>(weights, "model.norm.weight", Dims{4}, DataType::kI32, &s);
  expect_error(s, StatusCode::kInvalidArgument, "cannot be written as i32");
  std::vector<uint8_t> small(3);
  s = weights.fill("model.norm.weight", Dims{4}, DataType::kF32, small);
  expect_error(s, StatusCode::kInvalidArgument, "the buffer holds 3 bytes");
}

TEST_F(HfCheckpoint, PrefixesAreDetectedAndApplied) {
  struct Case {
    std::string prefix;
    std::string lm_head;
  };
  for (const Case& c :
       {Case{"model.", "lm_head.weight"}, Case{"language_model.model.", "language_model.lm_head.weight"},
        Case{"model.language_model.", "lm_head.weight"}}) {
    SCOPED_TRACE(c.prefix);
    Result<SafetensorsCheckpoint> ckpt = write_and_open(
        dir_, {{c.prefix + "embed_tokens.weight", "F32", {1, 2}, f32_bytes({1, 2})},
               {c.prefix + "layers.0.mlp.up_proj.weight", "F32", {1}, f32_bytes({3})},
               {c.lm_head, "F32", {1}, f32_bytes({4})},
               {"vision_tower.vision_model.embeddings.patch_embedding.weight", "F32", {1}, f32_bytes({5})}});
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    Result<std::string> prefix = detect_weight_prefix(*ckpt);
    ASSERT_TRUE(prefix.ok()) << prefix.status().to_string();
    EXPECT_EQ(*prefix, c.prefix);
    CheckpointWeights weights(*ckpt, *prefix);
    EXPECT_EQ(weights.checkpoint_name("model.layers.0.mlp.up_proj.weight"), c.prefix + "layers.0.mlp.up_proj.weight");
    EXPECT_EQ(weights.checkpoint_name("lm_head.weight"), c.lm_head);
    Status s;
    EXPECT_EQ(fill_as<float>(weights, "model.layers.0.mlp.up_proj.weight", Dims{1}, DataType::kF32, &s),
              std::vector<float>{3});
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(fill_as<float>(weights, "lm_head.weight", Dims{1}, DataType::kF32, &s), std::vector<float>{4});
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  Result<SafetensorsCheckpoint> none = write_and_open(dir_, {{"embed_tokens.weight", "F32", {1}, f32_bytes({1})}});
  ASSERT_TRUE(none.ok());
  expect_error(detect_weight_prefix(*none).status(), StatusCode::kNotFound, "checkpoint has no embed_tokens.weight");
}

// Records what build_gemma3 asks for, answering from RandomWeights.
class RecordingWeights final : public WeightSource {
 public:
  Status fill(const std::string& name, const Dims& dims, DataType dtype, std::span<uint8_t> out) override {
    GEARBOX_RETURN_IF_ERROR(random_.fill(name, dims, dtype, out));
    specs.push_back({name,
                     dtype == DataType::kBF16  ? "BF16"
                     : dtype == DataType::kF16 ? "F16"
                                               : "F32",
                     std::vector<int64_t>(dims.extents().begin(), dims.extents().end()),
                     Bytes(out.begin(), out.end())});
    return {};
  }
  std::vector<TensorSpec> specs;

 private:
  RandomWeights random_{7};
};

TEST_F(HfCheckpoint, ModelFromCheckpointMatchesItsSource) {
  Json tiny = v5_config();
  tiny["dtype"] = "bfloat16";
  tiny["tie_word_embeddings"] = false;
  Result<HfModelInfo> info = parse(tiny);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  RecordingWeights recorder;
  Result<BuiltModel> direct = build_gemma3(info->config, recorder);
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  ASSERT_GT(recorder.specs.size(), 10u);

  // Shard the weights the way transformers 5.x names a multimodal model.
  std::vector<TensorSpec> first;
  std::vector<TensorSpec> second;
  Json weight_map = Json::object();
  for (size_t i = 0; i < recorder.specs.size(); ++i) {
    TensorSpec spec = recorder.specs[i];
    if (spec.name.starts_with("model.")) spec.name = "model.language_model." + spec.name.substr(6);
    const bool in_first = i % 2 == 0;
    weight_map[spec.name] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    (in_first ? first : second).push_back(std::move(spec));
  }
  write_file(path("model-00001-of-00002.safetensors"), safetensors_file(first));
  write_file(path("model-00002-of-00002.safetensors"), safetensors_file(second));
  write_text(path("model.safetensors.index.json"), Json{{"weight_map", weight_map}}.dump());

  Result<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  Result<std::string> prefix = detect_weight_prefix(*ckpt);
  ASSERT_TRUE(prefix.ok()) << prefix.status().to_string();
  EXPECT_EQ(*prefix, "model.language_model.");
  CheckpointWeights weights(*ckpt, *prefix);
  Result<BuiltModel> loaded = build_gemma3(info->config, weights);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->payload, direct->payload);

  // The same checkpoint read as f32: every weight widens exactly.
  Gemma3Config f32_config = info->config;
  f32_config.dtype = DataType::kF32;
  Result<BuiltModel> widened = build_gemma3(f32_config, weights);
  ASSERT_TRUE(widened.ok()) << widened.status().to_string();
  EXPECT_GT(widened->payload.size(), direct->payload.size());
}

}  // namespace
}  // namespace gearbox::models
