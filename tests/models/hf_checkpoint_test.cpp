// Hugging Face checkpoints as safetensors files: files written here (single and sharded)
// round-trip tensor by tensor, and every kind of header or index damage gets its own error.
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
#include "hf_checkpoint_fixture.h"
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

}  // namespace
}  // namespace gearbox::models
