#pragma once
// What the ExecuTorch delegate tests share to load their programs: the directory the
// export scripts write .pte files and eager references to, the JSON references, and the
// device choice made before any program loads.
//
//   Module m(gearbox::testing::program_path("mini.pte"));
//   const auto& want = gearbox::testing::reference("reference.json")["mini"];

#include <nlohmann/json.hpp>
#include <string>

namespace gearbox::testing {

/// The path of `name` in the programs' directory: $GEARBOX_TEST_PROGRAMS when set, else the
/// directory the build's export tests write to (GEARBOX_TEST_PROGRAMS_DIR).
std::string program_path(const std::string& name);

/// The JSON file `name` of the programs' directory, parsed on first use and kept for the
/// process. Not thread-safe on the first call of each name; tests read it before starting
/// threads.
const nlohmann::json& reference(const std::string& name);

/// Whether GEARBOX_DEVICE is set: to the CPU device at start-up unless the environment names
/// one (the references are eager PyTorch on the CPU in f32).
bool device_chosen();

}  // namespace gearbox::testing
