// Runs a gearbox-delegated .pte through ExecuTorch's Module the way an LLM runner does, and
// checks that every call ran the profile it should:
//
//   multi_profile_main mini.pte [--method forward] [--prompt-len 16] [--decode-steps 4]
//
// 1. prefill pinned by index (profile 1)      2. decodes pinned by index (profile 0)
// 3. a second prefill length, pinned          4. automatic, seq 1, right after a prefill:
//                                                stays on prefill (sticky first-fit)
// 5. no guard: the method's default request   6. pinned by name ("decode")
// 7. an invalid pin (index 7): rejected, and the next call still works
//
// Prints per call the profile index and name it ran and its latency; exits 0 only if
// every step behaved as expected.
#include <cstdio>
#include <cstring>
#include <string>

#include "example_util.h"
#include "gearbox/profile_guard.h"

namespace {

int g_failures = 0;

void report(const char* step, const example::Call& c, int32_t want_profile) {
  if (!c.ok) {
    std::printf("%-34s FAILED: %s\n", step, c.error.c_str());
    ++g_failures;
    return;
  }
  const bool as_expected = want_profile < 0 || c.profile == want_profile;
  std::printf("%-34s profile %d (%s)  %8.3f ms%s\n", step, c.profile, c.name.c_str(), c.ms,
              as_expected ? "" : "   <-- UNEXPECTED");
  if (!as_expected) ++g_failures;
}

}  // namespace

int main(int argc, char** argv) {
  std::string pte, method = "forward";
  int64_t prompt_len = 16, decode_steps = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--method" && has_value) {
      method = argv[++i];
    } else if (a == "--prompt-len" && has_value) {
      if (!example::parse_int(a, argv[++i], 2, 1 << 20, &prompt_len)) return 2;
    } else if (a == "--decode-steps" && has_value) {
      if (!example::parse_int(a, argv[++i], 1, 1 << 20, &decode_steps)) return 2;
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: multi_profile_main MODEL.pte [--method NAME] [--prompt-len N>=2] [--decode-steps N>=1]\n");
      return 0;
    } else if (pte.empty() && !a.starts_with("-")) {
      pte = a;
    } else {
      std::fprintf(stderr, "unexpected argument '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (pte.empty()) {
    std::fprintf(stderr, "usage: multi_profile_main MODEL.pte [options] (see --help)\n");
    return 2;
  }
  executorch::extension::Module module(pte);
  const int64_t vocab = example::open_method(module, pte, method);
  if (vocab <= 0) return 1;
  std::printf("%s, method %s, vocab %lld\n", pte.c_str(), method.c_str(), static_cast<long long>(vocab));
  const auto prompt = example::token_ids(prompt_len, vocab);
  int64_t pos = 0;
  {
    gearbox::OptimizationProfileGuard pin(1);
    report("1. prefill, pinned index 1", example::run(module, method, prompt, 0), 1);
    pos = prompt_len;
  }
  {
    gearbox::OptimizationProfileGuard pin(0);
    for (int64_t s = 0; s < decode_steps; ++s, ++pos) {
      const std::string step = "2. decode " + std::to_string(s + 1) + ", pinned index 0";
      report(step.c_str(), example::run(module, method, example::token_ids(1, vocab, pos), pos), 0);
    }
  }
  {
    gearbox::OptimizationProfileGuard pin(1);
    const auto second = example::token_ids(prompt_len / 2, vocab, 3);
    report("3. prefill of another length", example::run(module, method, second, 0), 1);
    pos = prompt_len / 2;
  }
  {
    auto pick = gearbox::OptimizationProfileGuard::automatic();
    report("4. automatic, seq 1 (sticky)", example::run(module, method, example::token_ids(1, vocab, pos), pos), 1);
    ++pos;
  }
  report("5. no guard (method default)", example::run(module, method, example::token_ids(1, vocab, pos), pos), -1);
  ++pos;
  {
    auto pin = gearbox::OptimizationProfileGuard::named("decode");
    report("6. pinned by name 'decode'", example::run(module, method, example::token_ids(1, vocab, pos), pos), 0);
    ++pos;
  }
  {
    gearbox::OptimizationProfileGuard pin(7);
    const example::Call bad = example::run(module, method, example::token_ids(1, vocab, pos), pos);
    std::printf("%-34s %s\n", "7. pinned index 7 (no such profile)",
                bad.ok ? "ACCEPTED   <-- UNEXPECTED" : "rejected, as it must be");
    if (bad.ok) ++g_failures;
  }
  {
    gearbox::OptimizationProfileGuard pin(0);
    report("   the next call still runs", example::run(module, method, example::token_ids(1, vocab, pos), pos), 0);
  }
  std::printf(g_failures == 0 ? "all steps behaved as expected\n" : "%d step(s) misbehaved\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
