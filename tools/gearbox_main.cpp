// gearbox: build, run, generate with and benchmark shape-regime-specialized engines.
#include <cstdio>
#include <string_view>
#include <vector>

#include "commands.h"

namespace {

constexpr const char* kUsage = R"(usage: gearbox <command> [options]

commands:
  build       build an engine from a Hugging Face checkpoint or the built-in mini model
  run         run the multi-profile scenario on an engine, or single calls
  generate    generate text (or token ids) with an engine
  score       teacher-forced log-probabilities of a sequence
  inspect     what an engine file holds: profiles, tactics, memory, versions
  bench       decode per profile, prefill, switch cost, rounds with and without switching
  devices     list the devices this build can use (--probe runs a check on each)
  policy      show which optimization profile each call would run under
  help        this text

gearbox COMMAND --help describes each command.

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
  if (command == "build") return gearbox::cli::run_build(rest);
  if (command == "run") return gearbox::cli::run_run(rest);
  if (command == "generate") return gearbox::cli::run_generate(rest);
  if (command == "score") return gearbox::cli::run_score(rest);
  if (command == "inspect") return gearbox::cli::run_inspect(rest);
  if (command == "bench") return gearbox::cli::run_bench(rest);
  std::fprintf(stderr, "gearbox: unknown command '%.*s' (try gearbox --help)\n", static_cast<int>(command.size()),
               command.data());
  return 2;
}
