// gearbox policy: replays a sequence of calls through the profile-selection policy and the
// bounds check, exactly as an execution context would, and prints what each call runs.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "gearbox/profile_selection.h"

namespace gearbox::cli {
namespace {

constexpr const char* kPolicyUsage = R"(usage: gearbox policy [options]

Replays calls with token inputs of shape [1, L] through the selection policy and the
bounds check, starting on profile 0 like a fresh execution context.

options:
  --profile NAME:MIN:OPT:MAX  a profile over the sequence length (repeatable, in index
                              order; default: decode:1:1:1 prefill:1:128:2048)
  --seq L1,L2,...             the calls' sequence lengths (default: 1,128,1,512,1)
  --auto                      automatic selection, sticky first-fit (the default)
  --pin N                     pin profile index N
  --name NAME                 pin the profile called NAME
  --unset                     no request: every call runs profile 0

Exits 0 when every call ran, 1 when any call was rejected, 2 on a usage error.
)";

int usage_error(const Status& s) {
  std::fprintf(stderr, "gearbox policy: %s\n", s.message().c_str());
  return 2;
}

}  // namespace

int run_policy(std::span<const std::string_view> args) {
  std::vector<SeqProfile> profiles;
  std::vector<int64_t> seqs = {1, 128, 1, 512, 1};
  ProfileRequest request = ProfileRequest::automatic();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    auto value = [&]() -> std::optional<std::string_view> {
      if (i + 1 >= args.size()) return std::nullopt;
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kPolicyUsage, stdout);
      return 0;
    }
    if (a == "--auto") {
      request = ProfileRequest::automatic();
    } else if (a == "--unset") {
      request = ProfileRequest::unset();
    } else if (a == "--profile" || a == "--seq" || a == "--pin" || a == "--name") {
      const std::optional<std::string_view> v = value();
      if (!v) return usage_error(invalid_argument(std::string(a) + " needs a value"));
      if (a == "--profile") {
        Result<SeqProfile> p = parse_seq_profile(*v);
        if (!p.ok()) return usage_error(p.status());
        profiles.push_back(*p);
      } else if (a == "--seq") {
        Result<std::vector<int64_t>> s = parse_int_list(*v, "--seq");
        if (!s.ok()) return usage_error(s.status());
        seqs = *s;
      } else if (a == "--pin") {
        Result<int64_t> n = parse_int(*v, "--pin");
        if (!n.ok()) return usage_error(n.status());
        request = ProfileRequest::pinned(*n);
      } else {
        request = ProfileRequest::named(std::string(*v));
      }
    } else {
      return usage_error(invalid_argument("unknown flag '" + std::string(a) + "' (try gearbox policy --help)"));
    }
  }
  if (profiles.empty()) profiles = {{"decode", 1, 1, 1}, {"prefill", 1, 128, 2048}};

  ProfileTable table;
  for (const SeqProfile& p : profiles) {
    table.bounds.push_back({InputProfileBounds{Dims{1, p.min}, Dims{1, p.opt}, Dims{1, p.max}}});
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

}  // namespace gearbox::cli
