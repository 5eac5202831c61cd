// gearbox run: the multi-profile scenario (pins, automatic, named, an invalid pin), or
// single calls.
#include <cstdio>

#include "commands.h"
#include "flags.h"
#include "runner.h"

namespace gearbox::cli {
namespace {

constexpr const char* kUsage = R"(usage: gearbox run FILE [options]

Without --seq, runs the multi-profile scenario on an engine with profiles 'decode' and
'prefill': a pinned prefill, pinned decodes, a second prefill length, automatic selection
with seq 1 staying on the prefill profile (sticky), a call with no guard (profile 0), a
named pin, and an invalid pin that must be rejected. Prints each call's profile and
latency; exits 0 only if every call behaved as expected.

  --seq L          instead, run one call of L tokens from position 0
  --pin N          ... pinned to profile index N
  --profile NAME   ... pinned to the profile called NAME
  --auto           ... with automatic selection (default: no guard, profile 0)
  --repeat N       ... N times (default 1)
  --device D       cpu, cuda or auto (default auto)
)";

// Token ids made up for the scenario: spread over, and always inside, the vocabulary.
std::vector<int64_t> made_up_ids(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (salt + i * 7919) % vocab;
  return ids;
}

struct Step {
  const char* what;
  std::vector<int64_t> ids;
  int64_t start;
  ProfileRequest request;
  int32_t expect_profile;  // -1: the call must be rejected
};

int scenario(Runner& r) {
  const int32_t decode = r.profile_index("decode"), prefill = r.profile_index("prefill");
  if (decode < 0 || prefill < 0) {
    return fail("run",
                invalid_argument("the scenario needs profiles named 'decode' and 'prefill'; use --seq for "
                                 "single calls"),
                2);
  }
  const InputProfileBounds& pb = r.engine().profiles().bounds[static_cast<size_t>(prefill)][0];
  const int64_t len1 = std::min<int64_t>(pb.opt[1], r.engine().max_context() / 2);
  const int64_t len2 = std::max<int64_t>(pb.min[1], len1 / 2 + 1);
  const int64_t vocab = r.vocab();
  const std::vector<Step> steps = {
      {"prefill, pinned", made_up_ids(len1, vocab, 1), 0, ProfileRequest::named("prefill"), prefill},
      {"decode, pinned", made_up_ids(1, vocab, 2), len1, ProfileRequest::pinned(decode), decode},
      {"decode, pinned", made_up_ids(1, vocab, 3), len1 + 1, ProfileRequest::pinned(decode), decode},
      {"decode, pinned", made_up_ids(1, vocab, 4), len1 + 2, ProfileRequest::pinned(decode), decode},
      {"second prefill length, pinned", made_up_ids(len2, vocab, 5), 0, ProfileRequest::pinned(prefill), prefill},
      {"seq 1, automatic (sticky)", made_up_ids(1, vocab, 6), len2, ProfileRequest::automatic(), prefill},
      {"seq 1, no guard", made_up_ids(1, vocab, 7), len2 + 1, ProfileRequest::unset(), 0},
      {"seq 1, named 'prefill'", made_up_ids(1, vocab, 8), len2 + 2, ProfileRequest::named("prefill"), prefill},
      {"invalid pin", made_up_ids(1, vocab, 9), len2 + 3, ProfileRequest::pinned(r.engine().profiles().size()), -1},
  };
  int unexpected = 0;
  Tensor logits;
  for (const Step& s : steps) {
    const int32_t before = r.session().active_profile();
    double ms = 0;
    const Status st = r.call(s.ids, s.start, s.request, logits, &ms);
    const int32_t ran = r.session().active_profile();
    bool ok;
    if (s.expect_profile < 0) {
      ok = !st.ok() && ran == before;
      std::printf("%-32s seq %-5zu %-22s rejected (%s)%s\n", s.what, s.ids.size(), s.request.to_string().c_str(),
                  st.message().c_str(), ok ? "" : "  UNEXPECTED");
    } else {
      ok = st.ok() && ran == s.expect_profile;
      if (st.ok()) {
        std::printf("%-32s seq %-5zu %-22s ran profile %-14s %8.3f ms%s\n", s.what, s.ids.size(),
                    s.request.to_string().c_str(), r.profile_label(ran).c_str(), ms, ok ? "" : "  UNEXPECTED");
      } else {
        std::printf("%-32s seq %-5zu %-22s failed: %s  UNEXPECTED\n", s.what, s.ids.size(),
                    s.request.to_string().c_str(), st.message().c_str());
      }
    }
    unexpected += ok ? 0 : 1;
  }
  std::printf("%s: %d of %zu calls behaved as expected\n", unexpected == 0 ? "ok" : "FAILED",
              static_cast<int>(steps.size()) - unexpected, steps.size());
  return unexpected == 0 ? 0 : 1;
}

}  // namespace

int run_run(std::span<const std::string_view> args) {
  std::string file, device_flag = "auto", profile_name;
  int64_t seq = 0, pin = -1, repeat = 1;
  bool automatic = false, pinned = false;
  Flags flags(kUsage);
  flags.positional("FILE", &file, true);
  flags.flag("--seq", &seq);
  flags.flag("--pin", &pin);
  flags.flag("--profile", &profile_name);
  flags.flag("--auto", &automatic);
  flags.flag("--repeat", &repeat);
  flags.flag("--device", &device_flag);
  // --pin -1 must reach the engine (and be rejected there), so note whether it was given.
  for (std::string_view a : args) pinned = pinned || a == "--pin";
  if (Status s = flags.parse(args); !s.ok()) return fail("run", s, 2);
  if (flags.help_requested()) return std::fputs(kUsage, stdout) >= 0 ? 0 : 1;
  if (static_cast<int>(pinned) + static_cast<int>(!profile_name.empty()) + static_cast<int>(automatic) > 1) {
    return fail("run", invalid_argument("give at most one of --pin, --profile and --auto"), 2);
  }
  if (repeat < 1) return fail("run", invalid_argument("--repeat must be >= 1"), 2);
  Result<DeviceKind> device = device_from_flag(device_flag);
  if (!device.ok()) return fail("run", device.status(), 2);
  Result<Runner> runner = Runner::open(file, *device);
  if (!runner.ok()) return fail("run", runner.status());
  if (seq == 0) {
    if (pinned || automatic || !profile_name.empty()) {
      return fail("run", invalid_argument("--pin, --profile and --auto go with --seq"), 2);
    }
    return scenario(*runner);
  }
  if (seq < 1) return fail("run", invalid_argument("--seq must be >= 1"), 2);
  ProfileRequest request;
  if (pinned) request = ProfileRequest::pinned(pin);
  if (!profile_name.empty()) request = ProfileRequest::named(profile_name);
  if (automatic) request = ProfileRequest::automatic();
  const std::vector<int64_t> ids = made_up_ids(seq, runner->vocab(), 1);
  Tensor logits;
  for (int64_t i = 0; i < repeat; ++i) {
    double ms = 0;
    const Status s = runner->call(ids, 0, request, logits, &ms);
    if (!s.ok()) return fail("run", s);
    std::printf("seq %lld  %s  ran profile %s  %.3f ms\n", static_cast<long long>(seq), request.to_string().c_str(),
                runner->profile_label(runner->session().active_profile()).c_str(), ms);
  }
  return 0;
}

}  // namespace gearbox::cli
