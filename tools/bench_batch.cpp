#include "bench_batch.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <span>

#include "core/check.h"
#include "core/elapsed.h"
#include "gearbox/profile_guard.h"
#include "json_line.h"

namespace gearbox::cli {
namespace {

// Untimed steps before each batch size's timed ones: the first calls may switch profile.
constexpr int64_t kWarmupSteps = 3;

// The id of row `row` at step `step`: any valid token, varied so rows differ.
int64_t token_id(int64_t row, int64_t step, int64_t vocab) { return (3 + (row + step) * 7919) % vocab; }

// "0 'decode8' [1, 1] to [8, 1], 1 'prefill' [1, 1] to [1, 64]": the tokens each profile takes.
std::string profile_list(const Runner& runner) {
  const ProfileTable& table = runner.engine().profiles();
  std::string list;
  for (int32_t p = 0; p < table.size(); ++p) {
    const InputProfileBounds& b = table.bounds[static_cast<size_t>(p)][0];
    if (p > 0) list += ", ";
    list += runner.profile_label(p) + " " + b.min.to_string() + " to " + b.max.to_string();
  }
  return list;
}

// The profile decode steps of batch `b` pin: of those that take tokens [b, 1], the one with
// the fewest sequence positions (a decode profile, tuned for one token a row), then the
// smallest batch, then the lowest index. Sticky automatic selection would keep the batch-1
// decode on the prefill profile that filled the slots.
int32_t decode_profile(const ProfileTable& table, int64_t b) {
  int32_t best = -1;
  for (int32_t p = 0; p < table.size(); ++p) {
    const InputProfileBounds& t = table.bounds[static_cast<size_t>(p)][0];
    if (t.min[0] > b || t.max[0] < b || t.min[1] > 1) continue;
    const InputProfileBounds* o = best < 0 ? nullptr : &table.bounds[static_cast<size_t>(best)][0];
    if (o == nullptr || t.max[1] < o->max[1] || (t.max[1] == o->max[1] && t.max[0] < o->max[0])) best = p;
  }
  return best;
}

}  // namespace

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(std::lround(q * static_cast<double>(v.size() - 1)))]; };
  double sum = 0;
  for (double x : v) sum += x;
  return {at(0.5), at(0.1), at(0.9), sum / static_cast<double>(v.size())};
}

Result<BatchPlan> plan_batches(const Runner& runner, const std::vector<int64_t>& batches, int64_t context,
                               int64_t steps) {
  for (int64_t b : batches) {
    if (b < 1) return invalid_argument("--batch " + std::to_string(b) + ": a batch size must be >= 1");
  }
  const Engine& engine = runner.engine();
  if (engine.max_batch() == 0) {
    return invalid_argument(
        "--batch needs a batched engine (KV-cache slots, built with a profile BxS such as decode8:1x1:8x1:8x1); "
        "this one runs one sequence, its profiles take tokens " +
        profile_list(runner));
  }
  for (int64_t b : batches) {
    if (b > engine.max_batch()) {
      return invalid_argument("--batch " + std::to_string(b) + " is above the engine's " +
                              std::to_string(engine.max_batch()) + " KV-cache slots");
    }
    if (!runner.fits(Dims{b, 1})) {
      return invalid_argument("--batch " + std::to_string(b) + ": no profile takes a decode call of tokens [" +
                              std::to_string(b) + ", 1]; the profiles take tokens " + profile_list(runner));
    }
  }
  // The prompt leaves room in the context for three passes (logits into a Tensor, into
  // page-locked host memory, left in device memory) of the warm-up and at least one timed
  // step.
  constexpr int64_t kPasses = 3;
  const int64_t room = engine.max_context() - kPasses * (kWarmupSteps + 1);
  const int64_t cap = std::min(context, room);
  int64_t prompt = 0;
  for (const std::vector<InputProfileBounds>& bounds : engine.profiles().bounds) {
    const InputProfileBounds& b = bounds[0];
    if (b.min[0] <= 1 && b.min[1] <= cap) prompt = std::max(prompt, std::min(cap, b.max[1]));
  }
  if (prompt == 0) {
    return invalid_argument("--batch: no profile takes a prompt of one row and at most " + std::to_string(cap) +
                            " tokens (--context " + std::to_string(context) + ", the engine's context " +
                            std::to_string(engine.max_context()) + " less " +
                            std::to_string(kPasses * (kWarmupSteps + 1)) + " decode steps); the profiles take tokens " +
                            profile_list(runner));
  }
  return BatchPlan{batches, prompt, kWarmupSteps,
                   std::min(steps, (engine.max_context() - prompt) / kPasses - kWarmupSteps)};
}

Result<nlohmann::ordered_json> bench_batches(Runner& runner, const BatchPlan& plan, int64_t& checked_calls,
                                             std::string& problem) {
  if (plan.batches.empty()) return nlohmann::ordered_json::array();
  Session& session = runner.session();
  const int64_t vocab = runner.vocab();
  std::vector<int64_t> prompt(static_cast<size_t>(plan.prompt));
  for (int64_t i = 0; i < plan.prompt; ++i) prompt[static_cast<size_t>(i)] = token_id(0, i, vocab);
  Tensor logits;
  // A call's logits must be [rows, 1, vocab] and, where the host can read them (x not null),
  // finite.
  auto check_logits = [&](const float* x, const Dims& dims, int64_t rows, const std::string& what) {
    ++checked_calls;
    if (!problem.empty()) return;
    if (!(dims == Dims{rows, 1, vocab})) {
      problem = what + " returned logits " + dims.to_string() + ", not [" + std::to_string(rows) + ", 1, " +
                std::to_string(vocab) + "]";
      return;
    }
    if (x == nullptr) return;
    for (int64_t i = 0; i < rows * vocab; ++i) {
      if (!std::isfinite(x[i])) {
        problem = "logit " + std::to_string(i % vocab) + " of row " + std::to_string(i / vocab) + " of " + what +
                  " is " + std::to_string(x[i]);
        return;
      }
    }
  };
  auto check = [&](int64_t rows, const std::string& what) {
    check_logits(logits.data<float>(), logits.dims, rows, what);
  };
  struct Measured {
    int64_t batch;
    int32_t profile;
    Stats step_ms;         ///< logits copied to the host (a Tensor)
    Stats pinned_step_ms;  ///< logits in page-locked host memory (Engine::allocate_host)
    Stats device_step_ms;  ///< logits left in device memory, each step waited for
  };
  // The largest batch's logits in page-locked host memory, which the device writes by DMA,
  // and in device memory, where a caller that samples on the device leaves them.
  const int64_t most = *std::max_element(plan.batches.begin(), plan.batches.end());
  Result<HostMemory> pinned_memory = runner.engine().allocate_host(most * vocab * 4);
  if (!pinned_memory.ok()) return pinned_memory.status().with_context("--batch: the page-locked logits");
  Result<DeviceMemory> device_memory = runner.engine().allocate(most * vocab * 4);
  if (!device_memory.ok()) return device_memory.status().with_context("--batch: the device logits");
  std::vector<Measured> measured;
  for (int64_t b : plan.batches) {
    const std::string at = "--batch " + std::to_string(b);
    // Slots 0..B-1 each get the prompt, as many rows a call as a profile takes.
    for (int64_t first = 0; first < b;) {
      int64_t end = first + 1;
      while (end < b && runner.fits(Dims{end - first + 1, plan.prompt})) ++end;
      std::vector<Runner::Row> rows;
      for (int64_t slot = first; slot < end; ++slot) rows.push_back({prompt, 0, slot});
      const std::string what = at + ": the prefill of slots " + std::to_string(first) + ".." + std::to_string(end - 1);
      GEARBOX_RETURN_IF_ERROR(runner.call_rows(rows, logits).with_context(what));
      check(end - first, what);
      first = end;
    }
    // Decode steps: every row one token at its slot's next position, in one call pinned to
    // the decode profile for B; the logits copied to a Tensor, then written into page-locked
    // host memory, then left in device memory.
    const int32_t profile = decode_profile(runner.engine().profiles(), b);
    std::vector<int64_t> tokens(static_cast<size_t>(b)), positions(static_cast<size_t>(b)),
        slots(static_cast<size_t>(b));
    for (int64_t slot = 0; slot < b; ++slot) slots[static_cast<size_t>(slot)] = slot;
    const TensorView in[3] = {{tokens.data(), DataType::kI64, Dims{b, 1}},
                              {positions.data(), DataType::kI64, Dims{b, 1}},
                              {slots.data(), DataType::kI64, Dims{b}}};
    int64_t step = 0;  // over the three passes: each step's tokens differ
    enum class Logits { kTensor, kPinned, kDevice };
    auto timed_steps = [&](Logits into) -> Result<Stats> {
      std::vector<double> ms;
      for (int64_t i = 0; i < plan.warmup + plan.steps; ++i, ++step) {
        for (int64_t slot = 0; slot < b; ++slot) {
          tokens[static_cast<size_t>(slot)] = token_id(slot, plan.prompt + step, vocab);
          positions[static_cast<size_t>(slot)] = session.slot_length(slot);
        }
        const std::string what = at + ": decode step " + std::to_string(i) +
                                 (into == Logits::kPinned   ? " (logits in page-locked host memory)"
                                  : into == Logits::kDevice ? " (logits in device memory)"
                                                            : "");
        TensorView view =
            into == Logits::kPinned
                ? TensorView{pinned_memory->data(), DataType::kF32, Dims{}, MemoryKind::kHost, b * vocab * 4}
                : TensorView{device_memory->data(), DataType::kF32, Dims{}, MemoryKind::kDevice, b * vocab * 4};
        const auto t0 = std::chrono::steady_clock::now();
        Status s;
        {
          OptimizationProfileGuard pin(profile);
          s = into == Logits::kTensor ? session.run(in, std::span(&logits, 1)) : session.run(in, std::span(&view, 1));
          if (into == Logits::kDevice && s.ok()) s = session.synchronize();
        }
        const double t = internal::ms_since(t0);
        GEARBOX_RETURN_IF_ERROR(s.with_context(what));
        if (into == Logits::kTensor) {
          check(b, what);
        } else {
          check_logits(into == Logits::kPinned ? static_cast<const float*>(pinned_memory->data()) : nullptr, view.dims,
                       b, what);
        }
        const int32_t ran = session.active_profile();
        if (ran != profile && problem.empty()) {
          problem = what + " pinned to profile " + runner.profile_label(profile) + " ran profile " +
                    runner.profile_label(ran);
        }
        if (i >= plan.warmup) ms.push_back(t);
      }
      return stats(ms);
    };
    Result<Stats> host = timed_steps(Logits::kTensor);
    if (!host.ok()) return host.status();
    Result<Stats> pinned = timed_steps(Logits::kPinned);
    if (!pinned.ok()) return pinned.status();
    Result<Stats> device = timed_steps(Logits::kDevice);
    if (!device.ok()) return device.status();
    for (int64_t slot = 0; slot < b; ++slot) GEARBOX_RETURN_IF_ERROR(session.release_slot(slot));
    measured.push_back({b, profile, *host, *pinned, *device});
  }
  size_t base = 0;
  for (size_t i = 0; i < measured.size(); ++i) {
    if (measured[i].batch == 1) {
      base = i;
      break;
    }
  }
  const auto tokens_per_s = [](int64_t b, const Stats& st) { return static_cast<double>(b) * 1e3 / st.median; };
  std::printf(
      "batch: a %lld-token prompt in each of B slots, then %lld warm-up and %lld timed decode steps of tokens [B, 1], "
      "the logits copied to a Tensor, then the same steps with them in page-locked host memory and left in device "
      "memory; speedup: tok/s over batch %lld\n",
      static_cast<long long>(plan.prompt), static_cast<long long>(plan.warmup), static_cast<long long>(plan.steps),
      static_cast<long long>(measured[base].batch));
  std::printf("  %5s  %-16s %10s  %-20s %10s %8s  %16s  %16s %10s %8s\n", "batch", "profile", "ms/step", "(p10, p90)",
              "tok/s", "speedup", "pinned ms/step", "device ms/step", "tok/s", "speedup");
  nlohmann::ordered_json json = nlohmann::ordered_json::array();
  for (const Measured& m : measured) {
    const double host_tps = tokens_per_s(m.batch, m.step_ms), device_tps = tokens_per_s(m.batch, m.device_step_ms);
    const double speedup = host_tps / tokens_per_s(measured[base].batch, measured[base].step_ms);
    const double device_speedup = device_tps / tokens_per_s(measured[base].batch, measured[base].device_step_ms);
    char spread[64];
    std::snprintf(spread, sizeof spread, "(%.3f, %.3f)", m.step_ms.p10, m.step_ms.p90);
    std::printf("  %5lld  %-16s %10.3f  %-20s %10.1f %7.2fx  %16.3f  %16.3f %10.1f %7.2fx\n",
                static_cast<long long>(m.batch), runner.profile_label(m.profile).c_str(), m.step_ms.median, spread,
                host_tps, speedup, m.pinned_step_ms.median, m.device_step_ms.median, device_tps, device_speedup);
    json.push_back({{"batch", m.batch},
                    {"profile", runner.engine().profiles().names[static_cast<size_t>(m.profile)]},
                    {"prompt_tokens", plan.prompt},
                    {"steps", plan.steps},
                    {"step_ms_median", as_printed(m.step_ms.median, "%f")},
                    {"step_ms_p10", as_printed(m.step_ms.p10, "%f")},
                    {"step_ms_p90", as_printed(m.step_ms.p90, "%f")},
                    {"token_ms", as_printed(m.step_ms.median, "%f")},
                    {"tokens_per_s", as_printed(host_tps, "%f")},
                    {"speedup", as_printed(speedup, "%f")},
                    {"pinned_logits_step_ms_median", as_printed(m.pinned_step_ms.median, "%f")},
                    {"device_logits_step_ms_median", as_printed(m.device_step_ms.median, "%f")},
                    {"device_logits_step_ms_p10", as_printed(m.device_step_ms.p10, "%f")},
                    {"device_logits_step_ms_p90", as_printed(m.device_step_ms.p90, "%f")},
                    {"device_logits_tokens_per_s", as_printed(device_tps, "%f")},
                    {"device_logits_speedup", as_printed(device_speedup, "%f")},
                    {"speedup_vs_batch", measured[base].batch}});
  }
  return json;
}

}  // namespace gearbox::cli
