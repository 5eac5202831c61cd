// cuBLASLt through dlopen (cublaslt_library.h): one load a process, begun on a thread of its
// own or by the first caller, its outcome kept for every later caller.

#include "devices/cuda/cublaslt_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>

namespace gearbox::cuda {
namespace {

#define GEARBOX_STRINGIFY_(x) #x
#define GEARBOX_STRINGIFY(x) GEARBOX_STRINGIFY_(x)
constexpr char kLibraryName[] = "libcublasLt.so." GEARBOX_STRINGIFY(CUBLAS_VER_MAJOR);
#undef GEARBOX_STRINGIFY
#undef GEARBOX_STRINGIFY_

struct Loaded {
  CublasLtLibrary library;
  Status status;
};

/// Points `entry` at the library's symbol `name`; false where the library has none.
template <typename F>
bool resolve(void* handle, const char* name, F*& entry) {
  entry = reinterpret_cast<F*>(dlsym(handle, name));
  return entry != nullptr;
}

Loaded load() {
  Loaded out;
  void* handle = dlopen(kLibraryName, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    out.status = device_error(std::string("cannot load cuBLASLt (") + kLibraryName +
                              "), which the CUDA device's GEMMs need: " + (why != nullptr ? why : "unknown error") +
                              "; install the CUDA toolkit's cuBLAS and add its lib directory to LD_LIBRARY_PATH");
    return out;
  }
  CublasLtLibrary& l = out.library;
  const char* missing = nullptr;
  const auto need = [&](const char* name, auto& entry) {
    if (missing == nullptr && !resolve(handle, name, entry)) missing = name;
  };
  need("cublasLtCreate", l.cublasLtCreate);
  need("cublasLtDestroy", l.cublasLtDestroy);
  need("cublasLtGetVersion", l.cublasLtGetVersion);
  need("cublasLtGetStatusName", l.cublasLtGetStatusName);
  need("cublasLtGetStatusString", l.cublasLtGetStatusString);
  need("cublasLtMatmul", l.cublasLtMatmul);
  need("cublasLtMatmulAlgoCheck", l.cublasLtMatmulAlgoCheck);
  need("cublasLtMatmulAlgoConfigGetAttribute", l.cublasLtMatmulAlgoConfigGetAttribute);
  need("cublasLtMatmulAlgoGetHeuristic", l.cublasLtMatmulAlgoGetHeuristic);
  need("cublasLtMatmulDescCreate", l.cublasLtMatmulDescCreate);
  need("cublasLtMatmulDescDestroy", l.cublasLtMatmulDescDestroy);
  need("cublasLtMatmulDescSetAttribute", l.cublasLtMatmulDescSetAttribute);
  need("cublasLtMatmulPreferenceCreate", l.cublasLtMatmulPreferenceCreate);
  need("cublasLtMatmulPreferenceDestroy", l.cublasLtMatmulPreferenceDestroy);
  need("cublasLtMatmulPreferenceSetAttribute", l.cublasLtMatmulPreferenceSetAttribute);
  need("cublasLtMatrixLayoutCreate", l.cublasLtMatrixLayoutCreate);
  need("cublasLtMatrixLayoutDestroy", l.cublasLtMatrixLayoutDestroy);
  if (missing != nullptr) {
    out.status = device_error(std::string(kLibraryName) + " has no entry point " + missing +
                              ": it is older than the cuBLAS gearbox was built against");
  }
  // Never closed: handles and algorithms from it may be in use until the process exits.
  return out;
}

struct Loader {
  std::mutex mutex;
  std::shared_future<Loaded> loaded;  // valid once a load has begun
  std::shared_future<void> done;      // the loading thread's end, its `then` included
};

Loader& loader() {
  static Loader* l = new Loader();  // never destroyed: a load may still run at exit
  return *l;
}

}  // namespace

const char* cublaslt_library_name() { return kLibraryName; }

void start_loading_cublaslt(void (*then)()) {
  Loader& l = loader();
  const std::lock_guard<std::mutex> lock(l.mutex);
  if (l.loaded.valid()) return;
  auto loaded = std::make_shared<std::promise<Loaded>>();
  auto done = std::make_shared<std::promise<void>>();
  try {
    std::thread([loaded, done, then] {
      Loaded out = load();
      const bool ok = out.status.ok();
      loaded->set_value(std::move(out));
      if (ok && then != nullptr) then();
      done->set_value();
    }).detach();
  } catch (const std::system_error&) {
    return;  // no thread: cublaslt() loads on its caller's
  }
  l.loaded = loaded->get_future().share();
  l.done = done->get_future().share();
  // Where a program exits without finish_cublaslt_loading(), exit still waits for the thread
  // before the CUDA runtime's teardown, which was registered earlier and so runs later; not
  // before cuBLASLt's own, which the thread registers after this.
  std::atexit(finish_cublaslt_loading);
}

void finish_cublaslt_loading() {
  std::shared_future<void> end;
  {
    const std::lock_guard<std::mutex> held(loader().mutex);
    end = loader().done;
  }
  if (end.valid()) end.wait();
}

Result<const CublasLtLibrary*> cublaslt() {
  Loader& l = loader();
  std::shared_future<Loaded> loaded;
  {
    const std::lock_guard<std::mutex> lock(l.mutex);
    if (!l.loaded.valid()) {
      std::promise<Loaded> now;
      now.set_value(load());
      l.loaded = now.get_future().share();
    }
    loaded = l.loaded;
  }
  const Loaded& result = loaded.get();
  if (!result.status.ok()) return result.status;
  return &result.library;
}

}  // namespace gearbox::cuda
