// The gearbox subcommands. Each add_*_command adds its subcommand, with its options, to the
// `gearbox` app and returns what runs it once the command line has parsed: a function that
// returns the process exit code, 0 on success, 1 when the work failed, 2 on a usage error
// that the options alone cannot express (e.g. two flags that exclude each other).
#pragma once

#include <functional>

namespace CLI {
class App;
}  // namespace CLI

namespace gearbox::cli {

struct Command {
  CLI::App* app = nullptr;   ///< the subcommand, owned by the `gearbox` app
  std::function<int()> run;  ///< runs it on the parsed options
};

Command add_build_command(CLI::App& gearbox);
Command add_run_command(CLI::App& gearbox);
Command add_generate_command(CLI::App& gearbox);
Command add_score_command(CLI::App& gearbox);
Command add_inspect_command(CLI::App& gearbox);
Command add_bench_command(CLI::App& gearbox);
Command add_devices_command(CLI::App& gearbox);
Command add_policy_command(CLI::App& gearbox);

}  // namespace gearbox::cli
