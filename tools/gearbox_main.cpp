// gearbox: build, run, generate with and benchmark shape-regime-specialized engines.
#include <cstdio>
#include <string_view>
#include <vector>

#include "commands.h"

namespace {

constexpr const char* kUsage = R"(usage: gearbox <command> [options]

commands:
  devices [--probe]   list the devices this build can use (--probe runs a check on each)
  policy [options]    show which optimization profile each call would run under
                      (gearbox policy --help for its options)
  help                this text

Every command exits 0 on success, 1 when its work failed and 2 on a usage error.
)";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string_view command = args[0];
  const std::span<const std::string_view> rest(args.data() + 1, args.size() - 1);
  if (command == "policy") return gearbox::cli::run_policy(rest);
  if (command == "devices") return gearbox::cli::run_devices(rest);
  std::fprintf(stderr, "gearbox: unknown command '%.*s' (try gearbox --help)\n", static_cast<int>(command.size()),
               command.data());
  return 2;
}
