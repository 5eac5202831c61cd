// core/output_file.h: outputs checked before the work, written through a temporary and a
// rename, the temporary removed on failure and on SIGTERM, an existing file's mode kept.
#include "core/output_file.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/input_file.h"

namespace gearbox {
namespace {

namespace fs = std::filesystem;

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Kept until the next run, as in input_file_test.cpp (no inode reuse within a run).
    dir_ = fs::path(testing::TempDir()) /
           ("output_file_test." + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  size_t entries() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }
  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  fs::path dir_;
};

TEST_F(OutputFileTest, WritesAndKeepsAnExistingFilesMode) {
  std::ofstream(path("out")) << "old";
  ASSERT_EQ(::chmod(path("out").c_str(), 0640), 0);
  ASSERT_TRUE(check_output_path(path("out"), {}, "engine").ok());
  ASSERT_TRUE(write_output_file(path("out"), std::string_view("new"), "engine").ok());
  EXPECT_EQ(read(path("out")), "new");
  struct stat st {};
  ASSERT_EQ(::stat(path("out").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(entries(), 1u) << "no temporary left";
}

TEST_F(OutputFileTest, RefusesLinksNodesInputsAndMissingDirectories) {
  std::ofstream(path("target")) << "keep";
  fs::create_symlink(path("target"), path("link"));
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  fs::create_directories(path("dir"));
  std::ofstream(path("input")) << "in";
  std::ofstream(path("read")) << "read";
  ASSERT_TRUE(read_input_file(path("read"), InputKind::kNetwork).ok());
  struct Case {
    std::string path;
    std::vector<std::string> inputs;
    StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {path("link"), {}, StatusCode::kFailedPrecondition, "is a symbolic link"},
      {path("fifo"), {}, StatusCode::kFailedPrecondition, "is a FIFO (named pipe), not a file gearbox may replace"},
      {path("dir"), {}, StatusCode::kFailedPrecondition, "is a directory"},
      {path("input"), {path("input")}, StatusCode::kInvalidArgument, "is the input"},
      {path("read"), {}, StatusCode::kInvalidArgument, "is a file this command reads"},
      {path("no/such/x"), {}, StatusCode::kNotFound, "does not exist"},
      {path("target/x"), {}, StatusCode::kFailedPrecondition, "Not a directory"},
      {"/proc/gearbox_output_file_test", {}, StatusCode::kFailedPrecondition, "cannot create a file in '/proc'"},
  };
  for (const Case& c : cases) {
    const Status checked = check_output_path(c.path, c.inputs, "engine");
    EXPECT_EQ(checked.code(), c.code) << c.path << ": " << checked.to_string();
    EXPECT_NE(checked.message().find(c.message), std::string::npos) << checked.message();
  }
  EXPECT_FALSE(write_output_file(path("link"), std::string_view("x"), "engine").ok());
  EXPECT_EQ(read(path("target")), "keep");
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_EQ(read(path("read")), "read");
  EXPECT_EQ(entries(), 6u) << "no temporary or probe left";
}

TEST_F(OutputFileTest, SigtermMidWriteRemovesTheTemporary) {
  const std::string out = path("big");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::vector<uint8_t> bytes(size_t{1} << 29, 7);
    (void)write_output_file(out, bytes, "engine");
    ::_exit(0);
  }
  // Wait for the temporary to appear, then stop the writer.
  bool seen = false;
  for (int i = 0; i < 20000 && !seen; ++i) {
    for (const auto& e : fs::directory_iterator(dir_))
      seen = seen || e.path().string().find(".tmp.") != std::string::npos;
    if (!seen) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::kill(child, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  if (!seen) GTEST_SKIP() << "the write finished before the temporary was seen";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "the signal is re-raised";
  EXPECT_EQ(entries(), 0u) << "the temporary is removed and no output was written";
}

}  // namespace
}  // namespace gearbox
