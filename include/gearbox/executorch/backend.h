// gearbox/executorch/backend.h: gearbox as an ExecuTorch delegate.
//
// A .pte exported with gearbox's partitioner (python/gearbox) holds, per delegated method,
// a blob (the bytes of a gearbox engine file, see blob.h) and compile specs (below). Link
// libgearbox_executorch and ExecuTorch runs those methods on gearbox:
//
//   gearbox::executorch::register_backend();          // also done when the library loads
//   executorch::extension::Module module("mini.pte");
//   {
//     auto pick = gearbox::OptimizationProfileGuard::named("decode");
//     auto logits = module.execute("forward", {tokens, positions});
//   }
//
// Every method and delegate instance of a program that names the same engine shares one
// loaded engine (one weight upload); each delegate handle gets its own execution context
// unless its compile specs put it in a shared context (kSpecContext). The guard of
// gearbox/profile_guard.h picks the profile per call, exactly as with gearbox::Session;
// without a guard the method's default request (kSpecDefaultProfile) applies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gearbox/export.h"
#include "gearbox/status.h"

namespace gearbox::executorch {

/// The backend id: what the partitioner writes into the .pte and what this library
/// registers with ExecuTorch. python/gearbox/backend_id.py holds the same string.
inline constexpr const char* kBackendId = "GearboxBackend";

/// Compile spec: the request a call of this method runs under when no guard is active.
/// Values: "automatic", "index:N", "name:NAME". Absent: profile 0 (the TensorRT rule).
inline constexpr const char* kSpecDefaultProfile = "gearbox.default_profile";

/// Compile spec: the device, "cpu", "cuda" or "auto" (CUDA when present; the default).
/// The environment variable GEARBOX_DEVICE, when set, overrides it for every method.
/// A blob holds tactics for the device it was exported on; on another device the engine
/// tunes at init, and with GEARBOX_TACTIC_CACHE_DIR set keeps the result there (one file
/// per engine and device) so that the next process does not tune again.
inline constexpr const char* kSpecDevice = "gearbox.device";

/// Compile spec: a context key. Delegate handles of one engine with the same key in one
/// program instance share one execution context, i.e. one KV cache and one active profile
/// (a `prefill` and a `decode` method that continue each other's sequence). A program
/// instance is what shares ExecuTorch's runtime allocator: every method of one
/// executorch::extension::Module. Absent: a context per handle.
inline constexpr const char* kSpecContext = "gearbox.context";

/// Compile specs whose key starts with this prefix are read by the export only (the
/// profiles and the tuning device, "gearbox.build.profiles", "gearbox.build.device"); the
/// runtime skips them. Any other unknown key fails init.
inline constexpr const char* kSpecBuildPrefix = "gearbox.build.";

/// Registers GearboxBackend with ExecuTorch's backend registry. Idempotent; loading the
/// shared library registers it too, so calling this only makes the dependency explicit
/// (and keeps a linker from dropping the library). Errors: kInternal when ExecuTorch
/// refuses the registration (another backend already has the id).
GEARBOX_API Status register_backend();

/// One delegated call as the engine ran it.
struct ProfileRecord {
  std::string method;   ///< the ExecuTorch method
  int32_t engine = 0;   ///< which gearbox engine of the method (0, 1, ... in init order)
  int32_t profile = 0;  ///< the profile index it ran
  std::string name;     ///< that profile's name
};

/// The calls this thread made through the delegate since the last take (at most the last
/// 256), oldest first; clears them. Module::execute() does not say which profile ran:
/// this does (for runners, benchmarks and tests).
GEARBOX_API std::vector<ProfileRecord> take_profile_records();

/// Engines currently loaded by the delegate (shared between methods and instances).
GEARBOX_API int64_t loaded_engine_count() noexcept;

}  // namespace gearbox::executorch
