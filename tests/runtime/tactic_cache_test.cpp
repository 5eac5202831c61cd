// The tactic cache beside an engine file: an engine without tactics for the device tunes at
// its first load and writes FILE.<device>.tactics; the next load reads it instead of tuning.
// A damaged, truncated or foreign cache is never used (the load tunes and rewrites it), and
// an empty tactic_cache option turns the cache off.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "format/engine_file.h"
#include "format/tactic_cache.h"
#include "runtime/engine_core.h"
#include "test_engine.h"

namespace gearbox::testing {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// An engine file holding no tactic table (as if built for another device).
std::vector<uint8_t> without_tactics(const std::vector<uint8_t>& engine) {
  Result<format::ParsedEngine> parsed = format::parse_engine(engine);
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
  format::EngineDesc desc = parsed->desc;
  desc.tactic_tables.clear();
  Result<std::vector<uint8_t>> bytes = format::serialize_engine(desc, parsed->payload);
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  return *bytes;
}

class TacticCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gearbox_tactic_cache_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    engine_ = dir_ / "tiny.gbx";
    write_bytes(engine_, without_tactics(make_engine(tiny_config(), decode_prefill_profiles(32)).bytes));
    cache_ = engine_.string() + ".cpu.tactics";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Loads the engine on the CPU; returns whether that load tuned.
  bool load_tunes(std::vector<std::vector<uint32_t>>* tactics = nullptr, EngineOptions options = {}) {
    Result<Engine> e = Engine::load_file(engine_.string(), options);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    if (!e.ok()) return false;
    if (tactics != nullptr) {
      tactics->clear();
      for (int32_t p = 0; p < e->profiles().size(); ++p) {
        const std::span<const uint32_t> t = e->core()->tactics(p);
        tactics->emplace_back(t.begin(), t.end());
      }
    }
    return e->core()->tuned_at_load();
  }

  fs::path dir_, engine_;
  std::string cache_;
};

TEST_F(TacticCache, TheFirstLoadTunesAndTheNextReadsTheCache) {
  std::vector<std::vector<uint32_t>> first, second;
  EXPECT_TRUE(load_tunes(&first));
  ASSERT_TRUE(fs::exists(cache_)) << "the tuned tactics were written beside the file";
  EXPECT_FALSE(load_tunes(&second)) << "the second load read the cache";
  EXPECT_EQ(first, second);
}

TEST_F(TacticCache, DamagedTruncatedOrForeignCachesAreNeverUsed) {
  ASSERT_TRUE(load_tunes());
  const std::vector<uint8_t> good = read_bytes(cache_);
  ASSERT_GT(good.size(), 48u);

  std::vector<uint8_t> flipped = good;
  flipped[flipped.size() / 2] ^= 0x40;
  write_bytes(cache_, flipped);
  EXPECT_TRUE(load_tunes()) << "a checksum mismatch means tuning again";
  EXPECT_NE(read_bytes(cache_), flipped) << "and the cache is rewritten (with this load's timings)";
  EXPECT_FALSE(load_tunes());

  // A cache written for another engine (another seed: other weights, other checksums).
  const fs::path other = dir_ / "other.gbx";
  write_bytes(other, without_tactics(make_engine(tiny_config(), decode_prefill_profiles(32), /*seed=*/99).bytes));
  Result<Engine> o = Engine::load_file(other.string());
  ASSERT_TRUE(o.ok());
  fs::copy_file(other.string() + ".cpu.tactics", cache_, fs::copy_options::overwrite_existing);
  EXPECT_TRUE(load_tunes()) << "a cache of another engine is not used";

  // Every truncation fails to decode, none crashes.
  Result<format::ParsedEngine> parsed = format::parse_engine(read_bytes(engine_));
  ASSERT_TRUE(parsed.ok());
  const format::EngineIdentity id = format::engine_identity(read_bytes(engine_));
  ASSERT_TRUE(format::decode_tactic_cache(read_bytes(cache_), id, parsed->desc).ok());
  const std::vector<uint8_t> bytes = read_bytes(cache_);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(format::decode_tactic_cache(std::span(bytes.data(), n), id, parsed->desc).ok()) << n << " bytes";
  }
}

TEST_F(TacticCache, AnEmptyOptionTurnsTheCacheOffAndAnExplicitPathIsUsed) {
  EngineOptions off;
  off.tactic_cache = "";
  EXPECT_TRUE(load_tunes(nullptr, off));
  EXPECT_FALSE(fs::exists(cache_));
  EXPECT_TRUE(load_tunes(nullptr, off)) << "no cache: every load tunes";

  EngineOptions elsewhere;
  elsewhere.tactic_cache = (dir_ / "elsewhere.tactics").string();
  EXPECT_TRUE(load_tunes(nullptr, elsewhere));
  EXPECT_TRUE(fs::exists(dir_ / "elsewhere.tactics"));
  EXPECT_FALSE(load_tunes(nullptr, elsewhere));

  EngineOptions unwritable;
  unwritable.tactic_cache = (dir_ / "no_such_dir" / "x.tactics").string();
  EXPECT_TRUE(load_tunes(nullptr, unwritable)) << "a cache that cannot be written only costs the next load";
}

}  // namespace
}  // namespace gearbox::testing
