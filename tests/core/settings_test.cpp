// The settings registry (core/settings.h): the table is complete and each name is in it
// once, and parse_settings reads exactly the table's variables and parses each value. Every
// case reads a map of its own, never the process's environment.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "core/settings.h"

namespace gearbox::internal {
namespace {

/// An environment of `vars`; the names parse_settings asked for go to `asked`.
Settings parse(const std::map<std::string, std::string>& vars, std::set<std::string>* asked = nullptr) {
  return parse_settings([&](const char* name) -> const char* {
    if (asked != nullptr) asked->insert(name);
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(Settings, TheTableNamesEveryVariableParseSettingsReadsOnce) {
  std::set<std::string> names;
  for (const SettingInfo& s : setting_table()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name << " is in the table twice";
    EXPECT_EQ(std::string(s.name).rfind("GEARBOX_", 0), 0u) << s.name;
    EXPECT_NE(std::string(s.meaning), "") << s.name;
  }
  std::set<std::string> asked;
  (void)parse({}, &asked);
  EXPECT_EQ(asked, names) << "parse_settings reads a variable the table lacks, or the table has one it never reads";
}

TEST(Settings, UsersSetTheLogLevelTheDeviceAndTheTacticCacheOnly) {
  std::set<std::string> user;
  for (const SettingInfo& s : setting_table()) {
    if (s.audience == SettingAudience::kUser) user.insert(s.name);
  }
  EXPECT_EQ(user, (std::set<std::string>{"GEARBOX_LOG_LEVEL", "GEARBOX_DEVICE", "GEARBOX_TACTIC_CACHE_DIR"}));
  // Users' settings come first (the README lists them in this order).
  bool debug_seen = false;
  for (const SettingInfo& s : setting_table()) {
    EXPECT_FALSE(debug_seen && s.audience == SettingAudience::kUser) << s.name << " follows a debug setting";
    debug_seen = debug_seen || s.audience == SettingAudience::kDebug;
  }
}

TEST(Settings, EachDocumentedDefaultIsWhatAnUnsetVariableGives) {
  const Settings unset = parse({});
  for (const SettingInfo& s : setting_table()) {
    EXPECT_EQ(parse({{s.name, s.default_value}}), unset) << s.name << "=" << s.default_value;
  }
  EXPECT_EQ(unset, Settings());
}

TEST(Settings, ParsesTheLogLevel) {
  const struct {
    const char* value;
    LogLevel want;
  } cases[] = {
      {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo},    {"warning", LogLevel::kWarning},
      {"error", LogLevel::kError}, {"off", LogLevel::kOff},      {"", LogLevel::kInfo},
      {"DEBUG", LogLevel::kInfo},  {"verbose", LogLevel::kInfo}, {"warn", LogLevel::kInfo},
  };
  for (const auto& c : cases) EXPECT_EQ(parse({{"GEARBOX_LOG_LEVEL", c.value}}).log_level, c.want) << c.value;
}

TEST(Settings, StringsAreTakenAsGivenAndEmptyMeansUnset) {
  const Settings s = parse({{"GEARBOX_DEVICE", "cuda"}, {"GEARBOX_TACTIC_CACHE_DIR", "/tmp/gear box"}});
  EXPECT_EQ(s.device, "cuda");
  EXPECT_EQ(s.tactic_cache_dir, "/tmp/gear box");
  // Checked where it is used (the delegate names the variable in its error).
  EXPECT_EQ(parse({{"GEARBOX_DEVICE", "tpu"}}).device, "tpu");
  const Settings empty = parse({{"GEARBOX_DEVICE", ""}, {"GEARBOX_TACTIC_CACHE_DIR", ""}});
  EXPECT_EQ(empty.device, "");
  EXPECT_EQ(empty.tactic_cache_dir, "");
}

TEST(Settings, ASwitchIsOnUnlessZero) {
  const struct {
    const char* name;
    bool Settings::*field;
  } switches[] = {
      {"GEARBOX_CUDA_FUSION", &Settings::cuda_fusion},
      {"GEARBOX_CUDA_PDL", &Settings::cuda_pdl},
      {"GEARBOX_CUDA_SHAPE_GRAPHS", &Settings::cuda_shape_graphs},
  };
  for (const auto& sw : switches) {
    SCOPED_TRACE(sw.name);
    EXPECT_TRUE(parse({}).*sw.field);
    EXPECT_FALSE(parse({{sw.name, "0"}}).*sw.field);
    for (const char* on : {"1", "", "00", "off", "false"}) EXPECT_TRUE(parse({{sw.name, on}}).*sw.field) << on;
    // One switch leaves the others alone.
    Settings want;
    want.*sw.field = false;
    EXPECT_EQ(parse({{sw.name, "0"}}), want);
  }
}

TEST(Settings, TheProcessReadsOnceAndKeepsTheValues) {
  const Settings& first = settings();
  EXPECT_EQ(&settings(), &first);
}

}  // namespace
}  // namespace gearbox::internal
