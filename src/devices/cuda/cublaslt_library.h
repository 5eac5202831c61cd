// cuBLASLt, loaded when the CUDA device first needs it rather than when the process starts.
// Linked as a dependency, libcublasLt's own initialization runs before main in every process
// that links gearbox, whatever device it uses: about a tenth of a second and 200 MB of
// memory. Loaded with dlopen instead, it costs nothing on the CPU device, and on the CUDA
// device its load runs on a thread of its own beside the device's initialization
// (cuda_backend starts it), off the path to an engine's first token; the same thread then
// does cuBLASLt's own first-use work (CublasLtGemm::prime) beside the engine's load.
#pragma once

#include <cublasLt.h>

#include "gearbox/status.h"

namespace gearbox::cuda {

/// The cuBLASLt entry points gearbox calls, resolved from the loaded library; named as the C
/// API names them.
struct CublasLtLibrary {
  decltype(&::cublasLtCreate) cublasLtCreate = nullptr;
  decltype(&::cublasLtDestroy) cublasLtDestroy = nullptr;
  decltype(&::cublasLtGetVersion) cublasLtGetVersion = nullptr;
  decltype(&::cublasLtGetStatusName) cublasLtGetStatusName = nullptr;
  decltype(&::cublasLtGetStatusString) cublasLtGetStatusString = nullptr;
  decltype(&::cublasLtMatmul) cublasLtMatmul = nullptr;
  decltype(&::cublasLtMatmulAlgoCheck) cublasLtMatmulAlgoCheck = nullptr;
  decltype(&::cublasLtMatmulAlgoConfigGetAttribute) cublasLtMatmulAlgoConfigGetAttribute = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) cublasLtMatmulAlgoGetHeuristic = nullptr;
  decltype(&::cublasLtMatmulDescCreate) cublasLtMatmulDescCreate = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) cublasLtMatmulDescDestroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) cublasLtMatmulDescSetAttribute = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) cublasLtMatmulPreferenceCreate = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) cublasLtMatmulPreferenceDestroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) cublasLtMatmulPreferenceSetAttribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) cublasLtMatrixLayoutCreate = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) cublasLtMatrixLayoutDestroy = nullptr;
};

/// The file name dlopen looks for: libcublasLt.so.<major> of the cuBLAS gearbox was built
/// against (found through LD_LIBRARY_PATH, the binary's run path or the loader's cache).
const char* cublaslt_library_name();

/// Starts loading the library on a thread of its own, once per process; a later call, or one
/// after cublaslt() has loaded it, does nothing. Where no thread can be started, cublaslt()
/// loads it on its caller's thread. `then` (nullable) runs on that thread once the library
/// is loaded, after cublaslt() has its result: work that warms cuBLASLt up beside the
/// caller's own (CublasLtGemm::prime). A program must not exit while that thread is inside
/// cuBLASLt: the library's own exit-time teardown, set up on that thread, runs before any exit
/// handler gearbox could have registered, and the thread would crash the process inside it.
/// finish_cublaslt_loading() waits for it.
void start_loading_cublaslt(void (*then)() = nullptr);

/// Waits until the thread start_loading_cublaslt() began has ended, `then` included; returns
/// at once where none began. Called as an engine goes (~EngineCore) and before the CLI exits.
void finish_cublaslt_loading();

/// The loaded library: waits for a load start_loading_cublaslt() began, or loads it now. A
/// library that cannot be opened, or lacks an entry point, is an error naming the file and
/// the loader's message; it is kept, and every later call returns it. Thread-safe; the library
/// stays loaded until the process exits.
Result<const CublasLtLibrary*> cublaslt();

}  // namespace gearbox::cuda
