// The gearbox subcommands. Each takes its own arguments (after the subcommand name) and
// returns the process exit code: 0 on success, 1 when the work failed, 2 on a usage error.
#pragma once

#include <span>
#include <string_view>

namespace gearbox::cli {

int run_policy(std::span<const std::string_view> args);
int run_devices(std::span<const std::string_view> args);
int run_build(std::span<const std::string_view> args);
int run_run(std::span<const std::string_view> args);
int run_generate(std::span<const std::string_view> args);
int run_score(std::span<const std::string_view> args);
int run_inspect(std::span<const std::string_view> args);
int run_bench(std::span<const std::string_view> args);

}  // namespace gearbox::cli
