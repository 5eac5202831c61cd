// core/input_file.h and core/bounded_json.h: regular files only, checked before any read
// (a FIFO never blocks), a size bound per kind, errors naming the path; JSON nesting bounded.
#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/bounded_json.h"

namespace gearbox {
namespace {

namespace fs = std::filesystem;

class InputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory per test, kept until the next run: a removed file's inode could be
    // reused by a later test's file, which the process-wide record of inputs would match.
    dir_ = fs::path(testing::TempDir()) /
           ("input_file_test." + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(InputFileTest, ReadsARegularFile) {
  std::ofstream(path("a.json")) << "{\"a\": 1}";
  Result<std::string> text = read_input_file(path("a.json"), InputKind::kHfConfig);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(*text, "{\"a\": 1}");
}

TEST_F(InputFileTest, RefusesWhatIsNotARegularFile) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  fs::create_directories(path("dir"));
  fs::create_symlink(path("loop"), path("loop"));
  struct Case {
    std::string path;
    StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {path("fifo"), StatusCode::kFailedPrecondition, "is a FIFO (named pipe), not a regular network description"},
      {path("dir"), StatusCode::kFailedPrecondition, "is a directory"},
      {"/dev/zero", StatusCode::kFailedPrecondition, "is a character device"},
      {path("loop"), StatusCode::kFailedPrecondition, "symbolic links"},
      {path("missing"), StatusCode::kNotFound, "no such file"},
  };
  for (const Case& c : cases) {
    Result<std::string> text = read_input_file(c.path, InputKind::kNetwork);  // never blocks on the FIFO
    ASSERT_FALSE(text.ok()) << c.path;
    EXPECT_EQ(text.status().code(), c.code) << text.status().to_string();
    EXPECT_NE(text.status().message().find(c.message), std::string::npos) << text.status().message();
    EXPECT_NE(text.status().message().find(c.path), std::string::npos) << text.status().message();
  }
}

TEST_F(InputFileTest, RefusesAFileLargerThanItsKindsBound) {
  { std::ofstream f(path("big")); }
  fs::resize_file(path("big"), max_input_bytes(InputKind::kTokenizerModel) + 1);
  Result<std::string> text = read_input_file(path("big"), InputKind::kTokenizerModel);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(text.status().message().find("a tokenizer.model file is at most 16 MiB"), std::string::npos)
      << text.status().message();
  // The same bytes are a fine engine (mapped, bounded only by the file system).
  EXPECT_TRUE(InputFile::open(path("big"), InputKind::kEngine).ok());
}

TEST_F(InputFileTest, RemembersWhatItOpened) {
  std::ofstream(path("a")) << "x";
  struct stat st {};
  ASSERT_EQ(::stat(path("a").c_str(), &st), 0);
  ASSERT_TRUE(read_input_file(path("a"), InputKind::kHfConfig).ok());
  EXPECT_TRUE(opened_as_input(st.st_dev, st.st_ino));
}

TEST(BoundedJson, RefusesNestingDeeperThanTheBound) {
  const auto nested = [](int depth) {
    return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']');
  };
  bool too_deep = true;
  EXPECT_FALSE(parse_json_bounded(nested(kMaxJsonDepth), too_deep).is_discarded());
  EXPECT_FALSE(too_deep);
  EXPECT_TRUE(parse_json_bounded(nested(kMaxJsonDepth + 1), too_deep).is_discarded());
  EXPECT_TRUE(too_deep);
  EXPECT_TRUE(parse_json_bounded(nested(200000), too_deep).is_discarded());
  EXPECT_TRUE(too_deep);
  EXPECT_TRUE(parse_json_bounded("{\"a\": ", too_deep).is_discarded());
  EXPECT_FALSE(too_deep) << "a syntax error is not a depth error";
}

}  // namespace
}  // namespace gearbox
