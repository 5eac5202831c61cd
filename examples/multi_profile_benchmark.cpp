// Measures what per-regime profiles buy an LLM runner, through ExecuTorch's Module:
//
//   multi_profile_benchmark mini.pte [--method forward] [--prompt-len 64] [--decode-steps 32]
//                                    [--rounds 10] [--warmup 2]
//
// A round is one prefill of --prompt-len tokens followed by --decode-steps decodes of one
// token. Two blocks of rounds, interleaved round by round so drift hits both alike:
//   prefill-only: every call pinned to the "prefill" profile (what one profile gives)
//   switching:    the prefill pinned to "prefill", each decode pinned to "decode"
// Reported per block: round time and decode time per token, median and p10/p90 over the
// rounds, and "prefill-only minus switching" (positive: switching is faster).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "example_util.h"
#include "gearbox/profile_guard.h"

namespace {

struct Stats {
  double p10 = 0, p50 = 0, p90 = 0;
};

// Nearest-rank percentiles of `v` (not empty).
Stats percentiles(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
  };
  return {at(0.10), at(0.50), at(0.90)};
}

struct Round {
  double total_ms = 0;
  double decode_ms_per_token = 0;
  std::string error;  // empty when every call succeeded on the profile it pinned
};

// One call pinned to `profile`; records a failure (or a call that ran another profile).
double pinned_call(executorch::extension::Module& module, const std::string& method, const char* profile,
                   const std::vector<int64_t>& ids, int64_t start, Round& round) {
  auto pin = gearbox::OptimizationProfileGuard::named(profile);
  const example::Call c = example::run(module, method, ids, start);
  if (!c.ok) {
    round.error = c.error;
  } else if (c.name != profile) {
    round.error = "a call pinned to '" + std::string(profile) + "' ran '" + c.name + "'";
  }
  return c.ms;
}

Round one_round(executorch::extension::Module& module, const std::string& method, int64_t prompt_len,
                int64_t decode_steps, int64_t vocab, bool switching) {
  Round r;
  r.total_ms += pinned_call(module, method, "prefill", example::token_ids(prompt_len, vocab), 0, r);
  double decode_ms = 0;
  for (int64_t s = 0; s < decode_steps && r.error.empty(); ++s) {
    const int64_t pos = prompt_len + s;
    decode_ms +=
        pinned_call(module, method, switching ? "decode" : "prefill", example::token_ids(1, vocab, pos), pos, r);
  }
  r.total_ms += decode_ms;
  r.decode_ms_per_token = decode_ms / static_cast<double>(decode_steps);
  return r;
}

void print_block(const char* label, const std::vector<double>& round_ms, const std::vector<double>& decode_ms) {
  const Stats r = percentiles(round_ms), d = percentiles(decode_ms);
  std::printf("%-13s round %9.3f ms (p10 %9.3f, p90 %9.3f)   decode %8.4f ms/token (p10 %8.4f, p90 %8.4f)\n", label,
              r.p50, r.p10, r.p90, d.p50, d.p10, d.p90);
}

}  // namespace

int main(int argc, char** argv) {
  std::string pte, method = "forward";
  int64_t prompt_len = 64, decode_steps = 32, rounds = 10, warmup = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    bool ok = true;
    if (a == "--method" && has_value) {
      method = argv[++i];
    } else if (a == "--prompt-len" && has_value) {
      ok = example::parse_int(a, argv[++i], 1, 1 << 20, &prompt_len);
    } else if (a == "--decode-steps" && has_value) {
      ok = example::parse_int(a, argv[++i], 1, 1 << 20, &decode_steps);
    } else if (a == "--rounds" && has_value) {
      ok = example::parse_int(a, argv[++i], 1, 1 << 20, &rounds);
    } else if (a == "--warmup" && has_value) {
      ok = example::parse_int(a, argv[++i], 0, 1 << 20, &warmup);
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: multi_profile_benchmark MODEL.pte [--method NAME] [--prompt-len N] [--decode-steps N]\n"
          "                               [--rounds N] [--warmup N]\n");
      return 0;
    } else if (pte.empty() && !a.starts_with("-")) {
      pte = a;
    } else {
      std::fprintf(stderr, "unexpected argument '%s' (see --help)\n", a.c_str());
      return 2;
    }
    if (!ok) return 2;
  }
  if (pte.empty()) {
    std::fprintf(stderr, "usage: multi_profile_benchmark MODEL.pte [options] (see --help)\n");
    return 2;
  }
  executorch::extension::Module module(pte);
  const int64_t vocab = example::open_method(module, pte, method);
  if (vocab <= 0) return 1;
  std::printf("%s, method %s: %lld rounds (+%lld warm-up) of 1 prefill of %lld tokens + %lld decodes\n", pte.c_str(),
              method.c_str(), static_cast<long long>(rounds), static_cast<long long>(warmup),
              static_cast<long long>(prompt_len), static_cast<long long>(decode_steps));
  std::vector<double> only_round, only_decode, switch_round, switch_decode;
  for (int64_t i = 0; i < warmup + rounds; ++i) {
    for (const bool switching : {false, true}) {
      const Round r = one_round(module, method, prompt_len, decode_steps, vocab, switching);
      if (!r.error.empty()) {
        std::fprintf(stderr, "round %lld (%s) failed: %s\n", static_cast<long long>(i),
                     switching ? "switching" : "prefill-only", r.error.c_str());
        return 1;
      }
      if (i < warmup) continue;
      (switching ? switch_round : only_round).push_back(r.total_ms);
      (switching ? switch_decode : only_decode).push_back(r.decode_ms_per_token);
    }
  }
  print_block("prefill-only", only_round, only_decode);
  print_block("switching", switch_round, switch_decode);
  const double saved = percentiles(only_round).p50 - percentiles(switch_round).p50;
  std::printf("prefill-only minus switching: %+.3f ms per round (%+.1f%%; positive = switching is faster)\n", saved,
              100.0 * saved / percentiles(only_round).p50);
  return 0;
}
