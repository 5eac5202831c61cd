// cuBLASLt loaded on first use (devices/cuda/cublaslt_library.h), on the CPU: nothing needs a
// GPU to open the library and resolve its entry points. A process that links gearbox has no
// libcublasLt mapped until the CUDA device asks for it; then one load serves every caller.
#include <gtest/gtest.h>

#include <cublasLt.h>

#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "devices/cuda/cublaslt_library.h"

namespace gearbox::cuda {
namespace {

/// Whether a file whose name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

/// What the loading thread's follow-up work saw: its thread, and the library it was given.
struct AfterLoad {
  std::promise<void> ran;
  std::thread::id thread;
  bool library_ready = false;
  int calls = 0;
};

AfterLoad& after_load_seen() {
  static AfterLoad seen;
  return seen;
}

void after_load() {
  AfterLoad& seen = after_load_seen();
  seen.thread = std::this_thread::get_id();
  seen.library_ready = cublaslt().ok();  // answered, not waited for: the load is done
  if (++seen.calls == 1) seen.ran.set_value();
}

void never() { ADD_FAILURE() << "a second start ran its follow-up work"; }

TEST(CublasLtLibrary, LoadsOnFirstUseOnceForEveryThread) {
  ASSERT_FALSE(mapped("libcublasLt")) << "libcublasLt is mapped before anything asked for it";
  EXPECT_EQ(std::string(cublaslt_library_name()), "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));

  start_loading_cublaslt(&after_load);
  start_loading_cublaslt(&never);  // a second start does nothing, and never runs its own work
  std::vector<const CublasLtLibrary*> seen(4, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] {
      Result<const CublasLtLibrary*> library = cublaslt();
      if (library.ok()) seen[i] = *library;
    });
  }
  for (std::thread& t : threads) t.join();
  Result<const CublasLtLibrary*> library = cublaslt();
  ASSERT_TRUE(library.ok()) << library.status().to_string();
  for (const CublasLtLibrary* s : seen) EXPECT_EQ(s, *library) << "every caller gets the one load";
  EXPECT_TRUE(mapped("libcublasLt"));

  const CublasLtLibrary& l = **library;
  for (const void* entry :
       {reinterpret_cast<const void*>(l.cublasLtCreate), reinterpret_cast<const void*>(l.cublasLtDestroy),
        reinterpret_cast<const void*>(l.cublasLtGetVersion), reinterpret_cast<const void*>(l.cublasLtGetStatusName),
        reinterpret_cast<const void*>(l.cublasLtGetStatusString), reinterpret_cast<const void*>(l.cublasLtMatmul),
        reinterpret_cast<const void*>(l.cublasLtMatmulAlgoCheck),
        reinterpret_cast<const void*>(l.cublasLtMatmulAlgoConfigGetAttribute),
        reinterpret_cast<const void*>(l.cublasLtMatmulAlgoGetHeuristic),
        reinterpret_cast<const void*>(l.cublasLtMatmulDescCreate),
        reinterpret_cast<const void*>(l.cublasLtMatmulDescDestroy),
        reinterpret_cast<const void*>(l.cublasLtMatmulDescSetAttribute),
        reinterpret_cast<const void*>(l.cublasLtMatmulPreferenceCreate),
        reinterpret_cast<const void*>(l.cublasLtMatmulPreferenceDestroy),
        reinterpret_cast<const void*>(l.cublasLtMatmulPreferenceSetAttribute),
        reinterpret_cast<const void*>(l.cublasLtMatrixLayoutCreate),
        reinterpret_cast<const void*>(l.cublasLtMatrixLayoutDestroy)}) {
    EXPECT_NE(entry, nullptr);
  }
  // The library answers without a device: its version is the major gearbox was built against,
  // and a status has a name.
  EXPECT_EQ(l.cublasLtGetVersion() / 10000, static_cast<size_t>(CUBLAS_VER_MAJOR));
  EXPECT_STREQ(l.cublasLtGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");

  // The first start's follow-up work ran once, on the loading thread, with the library loaded.
  AfterLoad& after = after_load_seen();
  ASSERT_EQ(after.ran.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(after.calls, 1);
  EXPECT_NE(after.thread, std::this_thread::get_id());
  EXPECT_TRUE(after.library_ready);
}

}  // namespace
}  // namespace gearbox::cuda
