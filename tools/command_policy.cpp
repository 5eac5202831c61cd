// gearbox policy: replays a sequence of calls through the profile-selection policy and the
// bounds check, exactly as an execution context would, and prints what each call runs.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_args.h"
#include "commands.h"
#include "gearbox/profile_selection.h"

namespace gearbox::cli {
namespace {

struct PolicyArgs {
  std::vector<SeqProfile> profiles;
  std::vector<int64_t> seqs = {1, 128, 1, 512, 1};
  int64_t pin = 0;
  std::string name;
};

int run_policy(std::vector<SeqProfile> profiles, const std::vector<int64_t>& seqs, const ProfileRequest& request) {
  if (profiles.empty()) profiles = {{"decode", 1, 1, 1}, {"prefill", 1, 128, 2048}};

  ProfileTable table;
  for (const SeqProfile& p : profiles) {
    table.bounds.push_back(
        {InputProfileBounds{Dims{p.min_batch, p.min}, Dims{p.opt_batch, p.opt}, Dims{p.max_batch, p.max}}});
    table.names.push_back(p.name);
  }
  std::printf("profiles:");
  for (int32_t p = 0; p < table.size(); ++p) {
    const InputProfileBounds& b = table.bounds[static_cast<size_t>(p)][0];
    std::printf(" %d '%s' %s..%s", p, table.names[static_cast<size_t>(p)].c_str(), b.min.to_string().c_str(),
                b.max.to_string().c_str());
  }
  std::printf("\nrequest: %s\n", request.to_string().c_str());

  int rejected = 0;
  for (size_t call = 0; call < seqs.size(); ++call) {
    const Dims input{1, seqs[call]};
    const ProfileSelection sel = select_profile(table, request, std::span(&input, 1));
    std::printf("call %zu  tokens %-12s ", call, input.to_string().c_str());
    if (sel.status != ProfileSelection::Status::kOk &&
        sel.status != ProfileSelection::Status::kPinIgnoredSingleProfile) {
      std::printf("rejected: %s\n", selection_status_name(sel.status));
      ++rejected;
      continue;
    }
    if (!profile_fits(table, sel.profile, std::span(&input, 1))) {
      const InputProfileBounds& b = table.bounds[static_cast<size_t>(sel.profile)][0];
      std::printf("rejected: sequence %lld is outside [%lld, %lld] of profile %d '%s'\n",
                  static_cast<long long>(seqs[call]), static_cast<long long>(b.min[1]),
                  static_cast<long long>(b.max[1]), sel.profile, table.names[static_cast<size_t>(sel.profile)].c_str());
      ++rejected;
      continue;
    }
    const bool switched = sel.profile != table.active;
    std::printf("profile %d '%s'%s%s\n", sel.profile, table.names[static_cast<size_t>(sel.profile)].c_str(),
                switched ? "  (switch)" : "",
                sel.status == ProfileSelection::Status::kPinIgnoredSingleProfile ? "  (pin ignored: one profile)" : "");
    table.active = sel.profile;
  }
  return rejected == 0 ? 0 : 1;
}

}  // namespace

Command add_policy_command(CLI::App& gearbox) {
  auto o = std::make_shared<PolicyArgs>();
  CLI::App* app = gearbox.add_subcommand(
      "policy",
      "show which optimization profile each call would run under\n\n"
      "Replays calls with token inputs of shape [1, L] through the selection policy and the bounds check, "
      "starting on profile 0 like a fresh execution context.");
  app->footer("Exits 0 when every call ran, 1 when any call was rejected, 2 on a usage error.");
  add_profile_option(*app, o->profiles,
                     "a profile over the sequence length, repeatable, in index order (default: decode:1:1:1 "
                     "prefill:1:128:2048)");
  add_int_list_option(*app, "--seq", o->seqs, "the calls' sequence lengths")->type_name("L1,L2,...");
  const CLI::Option* automatic =
      app->add_flag("--auto")->description("automatic selection, sticky first-fit (the default)");
  const CLI::Option* pin = add_int_option(*app, "--pin", o->pin, "pin profile index N");
  const CLI::Option* name = app->add_option("--name", o->name, "pin the profile called NAME")->type_name("NAME");
  const CLI::Option* unset = app->add_flag("--unset")->description("no request: every call runs profile 0");
  return {app, [o, app, automatic, pin, name, unset] {
            // The last of --auto, --pin, --name and --unset on the command line decides.
            ProfileRequest request = ProfileRequest::automatic();
            for (const CLI::Option* given : app->parse_order()) {
              if (given == automatic) request = ProfileRequest::automatic();
              if (given == pin) request = ProfileRequest::pinned(o->pin);
              if (given == name) request = ProfileRequest::named(o->name);
              if (given == unset) request = ProfileRequest::unset();
            }
            return run_policy(o->profiles, o->seqs, request);
          }};
}

}  // namespace gearbox::cli
