// gearbox run: the multi-profile scenario (pins, automatic, named, an invalid pin), or
// single calls.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>

#include <CLI/CLI.hpp>

#include "cli_args.h"
#include "commands.h"
#include "runner.h"

namespace gearbox::cli {
namespace {

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
    Status st = r.call(s.ids, s.start, s.request, logits, &ms);
    if (st.ok()) st = check_finite_logits(logits, s.start + static_cast<int64_t>(s.ids.size()) - 1);
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

struct RunArgs {
  std::string file;
  std::string device = "auto";
  std::string profile;
  int64_t seq = 0;
  int64_t pin = -1;
  int64_t repeat = 1;
  bool automatic = false;
};

// `pinned`: --pin was given (any value, -1 included, must reach the engine).
int run_run(const RunArgs& o, bool pinned) {
  if (static_cast<int>(pinned) + static_cast<int>(!o.profile.empty()) + static_cast<int>(o.automatic) > 1) {
    return fail("run", invalid_argument("give at most one of --pin, --profile and --auto"), 2);
  }
  if (o.repeat < 1) return fail("run", invalid_argument("--repeat must be >= 1"), 2);
  Result<DeviceKind> device = device_from_flag(o.device);
  if (!device.ok()) return fail("run", device.status(), 2);
  Result<Runner> runner = Runner::open(o.file, *device);
  if (!runner.ok()) return fail("run", runner.status());
  // Made-up ids take 16 bytes per token before the engine checks the length against its
  // profiles: refuse first what could never run and would take more than a few MiB (a
  // shorter length gets the engine's message, which names the profile's bounds).
  if (o.seq > std::max<int64_t>(runner->engine().max_context(), int64_t{1} << 20)) {
    return fail("run",
                invalid_argument("--seq " + std::to_string(o.seq) + " exceeds the engine's context of " +
                                 std::to_string(runner->engine().max_context())),
                2);
  }
  if (o.seq == 0) {
    if (pinned || o.automatic || !o.profile.empty()) {
      return fail("run", invalid_argument("--pin, --profile and --auto go with --seq"), 2);
    }
    return scenario(*runner);
  }
  if (o.seq < 1) return fail("run", invalid_argument("--seq must be >= 1"), 2);
  ProfileRequest request;
  if (pinned) request = ProfileRequest::pinned(o.pin);
  if (!o.profile.empty()) request = ProfileRequest::named(o.profile);
  if (o.automatic) request = ProfileRequest::automatic();
  const std::vector<int64_t> ids = made_up_ids(o.seq, runner->vocab(), 1);
  Tensor logits;
  for (int64_t i = 0; i < o.repeat; ++i) {
    double ms = 0;
    Status s = runner->call(ids, 0, request, logits, &ms);
    if (s.ok()) s = check_finite_logits(logits, o.seq - 1);
    if (!s.ok()) return fail("run", s);
    std::printf("seq %lld  %s  ran profile %s  %.3f ms\n", static_cast<long long>(o.seq), request.to_string().c_str(),
                runner->profile_label(runner->session().active_profile()).c_str(), ms);
  }
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& gearbox) {
  auto o = std::make_shared<RunArgs>();
  CLI::App* app = gearbox.add_subcommand(
      "run",
      "run the multi-profile scenario on an engine, or single calls\n\n"
      "Without --seq, runs the multi-profile scenario on an engine with profiles 'decode' and 'prefill': a pinned "
      "prefill, pinned decodes, a second prefill length, automatic selection with seq 1 staying on the prefill "
      "profile (sticky), a call with no guard (profile 0), a named pin, and an invalid pin that must be rejected. "
      "Prints each call's profile and latency; exits 0 only if every call behaved as expected.");
  app->add_option("FILE", o->file, "the engine file")->required();
  add_int_option(*app, "--seq", o->seq, "instead, run one call of L tokens from position 0", 1,
                 std::numeric_limits<int64_t>::max())
      ->type_name("L");
  const CLI::Option* pin = add_int_option(*app, "--pin", o->pin, "... pinned to profile index N");
  add_name_option(*app, "--profile", o->profile, "... pinned to the profile called NAME");
  app->add_flag("--auto", o->automatic, "... with automatic selection (default: no guard, profile 0)");
  add_int_option(*app, "--repeat", o->repeat, "... N times", 1, std::numeric_limits<int64_t>::max())
      ->capture_default_str();
  app->add_option("--device", o->device, "cpu, cuda or auto")->type_name("D")->capture_default_str();
  return {app, [o, pin] { return run_run(*o, pin->count() > 0); }};
}

}  // namespace gearbox::cli
