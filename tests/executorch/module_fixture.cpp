#include "module_fixture.h"

#include <cstdlib>
#include <fstream>
#include <map>

namespace gearbox::testing {
namespace {

// Set before main so that every Module the tests load sees it.
const bool kDeviceChosen = ::setenv("GEARBOX_DEVICE", "cpu", /*overwrite=*/0) == 0;

}  // namespace

std::string program_path(const std::string& name) {
  const char* dir = std::getenv("GEARBOX_TEST_PROGRAMS");
  return std::string(dir != nullptr ? dir : GEARBOX_TEST_PROGRAMS_DIR) + "/" + name;
}

const nlohmann::json& reference(const std::string& name) {
  static std::map<std::string, nlohmann::json> parsed;
  auto it = parsed.find(name);
  if (it == parsed.end()) {
    std::ifstream in(program_path(name));
    it = parsed.emplace(name, nlohmann::json::parse(in)).first;
  }
  return it->second;
}

bool device_chosen() { return kDeviceChosen; }

}  // namespace gearbox::testing
