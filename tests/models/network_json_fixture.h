// A fixture for network-description tests: a safetensors checkpoint written to a temporary
// file, read() of a description against it, and a table of schema breaks each checked for
// the error it names.
//
//   class MyTest : public NetworkJsonFixture {
//     void SetUp() override { write_checkpoint("my_test", {{"w", "F32", {2}, f32_bytes({1, 2})}}); }
//   };
//   expect_each_break_named(valid_doc, {{"no inputs", [](Json& j) { j["inputs"] = {}; }, "'inputs'"}});
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/network_json.h"
#include "models/safetensors.h"
#include "safetensors_writer.h"

namespace gearbox::models {

/// One way to break a valid description and a substring of the error it must give.
struct SchemaBreak {
  const char* what;
  std::function<void(nlohmann::json&)> apply;
  const char* message;
};

class NetworkJsonFixture : public ::testing::Test {
 protected:
  /// Writes `tensors` to a temporary file named after `stem` and opens it as the checkpoint
  /// that read() resolves weights against.
  void write_checkpoint(const std::string& stem, const std::vector<TensorSpec>& tensors) {
    path_ = std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(::getpid()) + ".safetensors");
    const Bytes bytes = safetensors_file(tensors);
    std::ofstream(path_, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    Result<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(path_.string());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    ckpt_.emplace(std::move(*ckpt));
  }
  void TearDown() override { std::filesystem::remove(path_); }

  Result<DescribedModel> read(const nlohmann::json& doc) const { return read_network_description(doc.dump(), *ckpt_); }

  /// Applies each break to a fresh copy of `valid` and expects read() to fail with its message.
  void expect_each_break_named(const nlohmann::json& valid, const std::vector<SchemaBreak>& cases) const {
    for (const SchemaBreak& c : cases) {
      nlohmann::json doc = valid;
      c.apply(doc);
      Result<DescribedModel> m = read(doc);
      ASSERT_FALSE(m.ok()) << c.what;
      EXPECT_NE(m.status().message().find(c.message), std::string::npos)
          << c.what << ": got '" << m.status().message() << "'";
    }
  }

  std::filesystem::path path_;
  std::optional<SafetensorsCheckpoint> ckpt_;
};

}  // namespace gearbox::models
