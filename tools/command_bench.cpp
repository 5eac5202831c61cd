// gearbox bench: what each profile is worth, and what a user meets. The engine's load time;
// the first prefill and the first decode of a new session against warm calls; decode
// ms/token on every profile that takes one token (logits copied to the host, left in device
// memory, and written into page-locked host memory); prefill latency at several lengths,
// and at many lengths each seen for the first time against the same lengths repeated; the
// switch cost (end to end, and the host time a switch adds to a call) and its break-even;
// and rounds of 1 prefill + N decodes with switching vs on the prefill profile only. With
// --batch, only the load time and a batched engine's decode throughput at each batch size.
// First of all, before this process loads the engine: process start to first token, as
// fresh `gearbox generate` processes meet it, and when each reached its load's phases.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_batch.h"
#include "bench_chart.h"
#include "cli_args.h"
#include "commands.h"
#include "core/check.h"
#include "core/elapsed.h"
#include "core/output_file.h"
#include "devices/cuda/device_probe.h"
#include "first_token.h"
#include "format/engine_file.h"
#include "format/mapped_file.h"
#include "json_line.h"
#include "runner.h"
#include "runtime/device_backend.h"
#include "runtime/engine_core.h"

namespace gearbox::cli {
namespace {

std::vector<int64_t> ids(int64_t n, int64_t vocab) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (3 + i * 7919) % vocab;
  return v;
}

// The median of warm calls: the first two are left out when more than four remain.
double warm_median(std::vector<double> ms) {
  if (ms.size() > 4) ms.erase(ms.begin(), ms.begin() + 2);
  return stats(std::move(ms)).median;
}

// Up to `count` distinct prefill lengths spread evenly over [kShortest, longest], none of
// them in `seen` (lengths the process ran already), in a fixed shuffled order: a user's
// prompts do not come sorted, and an ascending order would make every length the longest so
// far. Fewer when the range holds fewer.
constexpr int64_t kShortest = 16;
std::vector<int64_t> distinct_lengths(int64_t count, int64_t longest, const std::vector<int64_t>& seen) {
  std::vector<int64_t> candidates;
  for (int64_t len = kShortest; len <= longest; ++len) {
    if (std::find(seen.begin(), seen.end(), len) == seen.end()) candidates.push_back(len);
  }
  const auto c = static_cast<int64_t>(candidates.size());
  if (count <= 0 || c == 0) return {};
  std::vector<int64_t> picked;
  if (count >= c) {
    picked = candidates;
  } else if (count == 1) {
    picked.push_back(candidates[static_cast<size_t>(c / 2)]);
  } else {
    for (int64_t k = 0; k < count; ++k) picked.push_back(candidates[static_cast<size_t>(k * (c - 1) / (count - 1))]);
  }
  // Fisher-Yates with splitmix64 from a fixed seed: the same order on every run and library.
  uint64_t state = 35;
  auto next = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  for (size_t i = picked.size(); i > 1; --i) std::swap(picked[i - 1], picked[next() % i]);
  return picked;
}

// Device copy bandwidth (bytes read + written per second) over a buffer larger than caches.
Result<double> copy_bandwidth(const Engine& engine) {
  const int64_t bytes = engine.device() == DeviceKind::kCuda ? (int64_t{1} << 30) : (int64_t{1} << 28);
  Result<DeviceMemory> a = engine.allocate(bytes), b = engine.allocate(bytes);
  if (!a.ok()) return a.status();
  if (!b.ok()) return b.status();
  Result<Stream> stream = Stream::create(engine.device());
  if (!stream.ok()) return stream.status();
  Result<std::shared_ptr<const internal::DeviceBackend>> dev = internal::device_backend(engine.device());
  if (!dev.ok()) return dev.status();
  std::vector<double> t;
  for (int r = 0; r < 6; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    GEARBOX_RETURN_IF_ERROR((*dev)->enqueue_copy(b->data(), a->data(), bytes, *stream->impl()));
    GEARBOX_RETURN_IF_ERROR(stream->synchronize());
    if (r > 0) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(bytes) / stats(t).median;
}

struct BenchArgs {
  std::string file;
  std::string device = "auto";
  std::string json_path;
  std::string svg_path;
  std::vector<int64_t> prefill_lengths = {128, 512};
  int64_t context = 128;
  int64_t steps = 64;
  int64_t rounds = 5;
  int64_t round_decodes = 64;
  int64_t distinct = 40;
  int64_t fresh = 3;
  std::vector<int64_t> batches;  // --batch: only the load time and decode at these batch sizes
};

// A number of the JSON, with six decimals (printf's %f): finer than the timings resolve.
double json_number(double x) { return as_printed(x, "%f"); }

// Where a fresh process's time to first token goes, in ms from the spawn, from the debug
// lines of its engine load and its session (GEARBOX_LOG_LEVEL=debug in the child).
struct FreshPhases {
  double load_start_ms = 0;     // the load's own start: the process's start-up, its arguments
  double device_ready_ms = 0;   // the device initialized (its first use in the process)
  double uploaded_ms = 0;       // the weights on the device
  double loaded_ms = 0;         // the engine ready: payload checked, tactics, memory plans
  double session_ready_ms = 0;  // a session created and warmed up
};

// The phases of one child from its stderr; nullopt where a line is missing.
std::optional<FreshPhases> fresh_phases(const std::vector<ChildLine>& messages) {
  std::optional<FreshPhases> p;
  bool session = false;
  for (const ChildLine& line : messages) {
    const std::optional<internal::LoadPhases> load = p ? std::nullopt : internal::parse_load_phases(line.text);
    if (load) {
      p.emplace();
      p->loaded_ms = line.ms;
      p->load_start_ms = std::max(0.0, line.ms - load->planned_ms);
      p->device_ready_ms = p->load_start_ms + load->device_ready_ms;
      p->uploaded_ms = p->load_start_ms + load->uploaded_ms;
    } else if (p && !session && line.text.find("session: created in") != std::string::npos) {
      p->session_ready_ms = line.ms;
      session = true;
    }
  }
  if (!session) return std::nullopt;
  return p;
}

struct FreshProcesses {
  int64_t runs = 0;
  int64_t prompt_tokens = 0;
  double first_token_ms = 0;  // medians over the runs
  double exit_ms = 0;
  std::optional<FreshPhases> phases;  // each phase's median, where every run logged them
};

// The phases as JSON: ms from the spawn, null where the children did not log them.
nlohmann::ordered_json fresh_phases_json(const std::optional<FreshPhases>& p) {
  if (!p) return nullptr;
  return {{"load_start_ms", json_number(p->load_start_ms)},
          {"device_ready_ms", json_number(p->device_ready_ms)},
          {"weights_uploaded_ms", json_number(p->uploaded_ms)},
          {"engine_ready_ms", json_number(p->loaded_ms)},
          {"session_ready_ms", json_number(p->session_ready_ms)}};
}

// Process start to first token: `gearbox generate FILE --prompt-ids ... --max-new-tokens 1`
// in `runs` fresh processes, one after another, with a prompt of min(128, the prefill
// profile's max, context - 1) ids. Runs before this process loads the engine, so that no
// other process holds it; the first run may read the file from the disk, the others from
// the page cache, as a user's processes do.
Result<FreshProcesses> time_fresh_processes(const std::string& file, const std::string& device, int64_t runs) {
  Result<format::MappedFile> mapped = format::MappedFile::open(file);
  if (!mapped.ok()) return mapped.status();
  Result<format::ParsedEngine> parsed = format::parse_engine(mapped->bytes(), format::PayloadCheck::kDeferred);
  if (!parsed.ok()) return parsed.status().with_context(file);
  const format::EngineDesc& desc = parsed->desc;
  Result<int64_t> vocab = parse_int(format::metadata_value(desc, "model.vocab"), "model.vocab");
  if (!vocab.ok()) return data_loss(file + ": the engine does not record its vocabulary (model.vocab)");
  int64_t tokens = std::min<int64_t>(128, desc.network.max_context - 1);
  bool prefill = false;
  for (const format::ProfileDesc& p : desc.profiles) {
    if (p.name == "prefill" && !p.bounds.empty() && p.bounds[0].max.rank() == 2) {
      tokens = std::min(tokens, p.bounds[0].max[1]);
      prefill = true;
    }
  }
  if (!prefill) return invalid_argument("the engine has no profile named 'prefill'");
  FreshProcesses out;
  if (runs < 1 || tokens < 1) return out;
  Result<std::string> self = own_executable();
  if (!self.ok()) return self.status();
  std::string csv;
  for (int64_t id : ids(tokens, *vocab)) csv += (csv.empty() ? "" : ",") + std::to_string(id);
  const std::vector<std::string> argv = {*self, "generate", file,  "--prompt-ids", csv, "--max-new-tokens",
                                         "1",   "--device", device};
  std::vector<double> first, exits;
  std::vector<FreshPhases> phases;
  for (int64_t i = 0; i < runs; ++i) {
    Result<ChildTiming> t = time_child(argv, {"GEARBOX_LOG_LEVEL=debug"});
    if (!t.ok()) return t.status().with_context("a fresh process");
    first.push_back(t->first_line_ms);
    exits.push_back(t->exit_ms);
    if (std::optional<FreshPhases> p = fresh_phases(t->messages)) phases.push_back(*p);
  }
  out.runs = runs;
  out.prompt_tokens = tokens;
  out.first_token_ms = stats(first).median;
  out.exit_ms = stats(exits).median;
  if (std::ssize(phases) == runs) {
    const auto median = [&phases](double FreshPhases::*field) {
      std::vector<double> v(phases.size());
      std::transform(phases.begin(), phases.end(), v.begin(), [field](const FreshPhases& p) { return p.*field; });
      return stats(v).median;
    };
    out.phases = FreshPhases{median(&FreshPhases::load_start_ms), median(&FreshPhases::device_ready_ms),
                             median(&FreshPhases::uploaded_ms), median(&FreshPhases::loaded_ms),
                             median(&FreshPhases::session_ready_ms)};
  }
  return out;
}

// The end of a run: the JSON written where --json asks (with `validated` and
// `checked_calls`), then exit 1 naming the first check that failed, or a line saying what
// every checked call did.
int finish_bench(const BenchArgs& o, nlohmann::ordered_json json, const std::string& problem, int64_t checked_calls,
                 const char* checked) {
  json["validated"] = problem.empty();
  json["checked_calls"] = checked_calls;
  if (!o.json_path.empty()) {
    if (Status s = write_output_file(o.json_path, json_line(json) + "\n", "benchmark JSON"); !s.ok()) {
      return fail("bench", s);
    }
  }
  if (!problem.empty()) return fail("bench", internal_error("not validated: " + problem));
  std::printf("validated: %lld calls %s\n", static_cast<long long>(checked_calls), checked);
  return 0;
}

// `--batch`: the load time, then decode at each batch size (bench_batch.h), in text and JSON.
int run_batch_bench(Runner& r, const BenchArgs& o, double load_ms, double file_gb, double memory_overhead) {
  Result<BatchPlan> plan = plan_batches(r, o.batches, o.context, o.steps);
  if (!plan.ok()) return fail("bench", plan.status(), 2);
  const double weight_gb = static_cast<double>(r.engine().weight_bytes()) / 1e9;
  const double load_gb_s = load_ms > 0 ? file_gb / (load_ms / 1e3) : 0.0;
  std::printf("engine %s on %s: %.3f GB of weights, %lld KV-cache slots\n", o.file.c_str(),
              device_kind_name(r.engine().device()), weight_gb, static_cast<long long>(r.engine().max_batch()));
  std::printf(
      "load: %.1f ms to open the engine (%.1f MB file, %.2f GB/s): read, weights uploaded, a session warmed up\n",
      load_ms, file_gb * 1e3, load_gb_s);
  int64_t checked_calls = 0;
  std::string problem;  // the first check that failed
  Result<nlohmann::ordered_json> batch = bench_batches(r, *plan, checked_calls, problem);
  if (!batch.ok()) return fail("bench", batch.status());
  nlohmann::ordered_json json = {{"device", device_kind_name(r.engine().device())},
                                 {"weight_gb", json_number(weight_gb)},
                                 {"load_ms", json_number(load_ms)},
                                 {"engine_file_gb", json_number(file_gb)},
                                 {"load_gb_s", json_number(load_gb_s)},
                                 {"memory_overhead_percent", json_number(memory_overhead)},
                                 {"batch", *batch}};
  return finish_bench(o, std::move(json), problem, checked_calls,
                      "returned finite logits [B, 1, vocab], decode steps on the profile they pinned");
}

int run_bench(const BenchArgs& o) {
  const std::string& file = o.file;
  const int64_t context = o.context, steps = o.steps, rounds = o.rounds, round_decodes = o.round_decodes;
  if (context < 1 || steps < 1 || rounds < 1 || round_decodes < 1) {
    return fail("bench", invalid_argument("--context, --steps, --rounds and --round-decodes must be >= 1"), 2);
  }
  if (o.distinct < 0) return fail("bench", invalid_argument("--distinct-lengths must be >= 0"), 2);
  if (o.fresh < 0) return fail("bench", invalid_argument("--fresh-processes must be >= 0"), 2);
  if (!o.batches.empty() && !o.svg_path.empty()) {
    return fail("bench", invalid_argument("--svg charts sections that --batch does not run; leave one out"), 2);
  }
  // The outputs are checked before the benchmark runs, not after.
  if (!o.json_path.empty() && o.json_path == o.svg_path) {
    return fail("bench", invalid_argument("--json and --svg name the same file '" + o.json_path + "'"), 2);
  }
  for (const auto& [path, what] : {std::pair{&o.json_path, "benchmark JSON"}, std::pair{&o.svg_path, "chart"}}) {
    if (path->empty()) continue;
    if (Status s = check_output_path(*path, {file}, what); !s.ok()) return fail("bench", s, 2);
  }
  Result<DeviceKind> device = device_from_flag(o.device);
  if (!device.ok()) return fail("bench", device.status(), 2);
  FreshProcesses fresh;
  if (o.batches.empty() && o.fresh > 0) {
    Result<FreshProcesses> timed = time_fresh_processes(file, o.device, o.fresh);
    if (!timed.ok()) return fail("bench", timed.status());
    fresh = *timed;
    if (fresh.runs > 0) {
      std::printf(
          "fresh process: `gearbox generate` of a %lld-token prompt, first token %.1f ms after the process started, "
          "exit %.1f ms (median of %lld processes)\n",
          static_cast<long long>(fresh.prompt_tokens), fresh.first_token_ms, fresh.exit_ms,
          static_cast<long long>(fresh.runs));
      if (fresh.phases) {
        const FreshPhases& p = *fresh.phases;
        std::printf(
            "  ms from the process's start (medians): engine load started %.1f, device ready %.1f, weights "
            "uploaded %.1f, engine ready %.1f, session warmed up %.1f, first token %.1f\n",
            p.load_start_ms, p.device_ready_ms, p.uploaded_ms, p.loaded_ms, p.session_ready_ms, fresh.first_token_ms);
      } else {
        std::printf("  (the processes did not log their load's phases)\n");
      }
    }
  }
  // Device memory the engine and its session take, against what they are made of.
  const bool cuda = *device == DeviceKind::kCuda;
  const Result<int64_t> used_before = cuda ? internal::cuda_memory_in_use() : Result<int64_t>(int64_t{0});
  // Load time: the engine read, its weights uploaded, and a session created (Runner::open).
  const auto open_start = std::chrono::steady_clock::now();
  Result<Runner> opened = Runner::open(file, *device);
  const double load_ms = internal::ms_since(open_start);
  if (!opened.ok()) return fail("bench", opened.status());
  Runner& r = *opened;
  std::error_code size_error;
  const auto file_bytes = std::filesystem::file_size(file, size_error);
  const double file_gb = size_error ? 0.0 : static_cast<double>(file_bytes) / 1e9;
  double memory_overhead = -1;
  if (cuda && r.engine().device() == DeviceKind::kCuda && used_before.ok()) {
    const Result<int64_t> used_after = internal::cuda_memory_in_use();
    const internal::EngineCore& core = *r.engine().core();
    int64_t kv = 0;
    for (const ir::StateSpec& st : core.network().states) {  // K and V of every KV-cache slot
      kv += 2 * core.network().caches() * st.rows * st.width *
            static_cast<int64_t>(data_type_size(core.device().storage_type(st.dtype)));
    }
    const int64_t weights = r.engine().weight_bytes(), arena = core.arena_bytes();
    const int64_t expected = weights + kv + arena;
    if (used_after.ok()) {
      const int64_t total = *used_after - *used_before;
      memory_overhead = 100.0 * static_cast<double>(total - expected) / static_cast<double>(expected);
      std::printf(
          "device memory: %.1f MB for the engine and a session = weights %.1f + KV caches %.1f + arena %.1f + other "
          "%.1f MB (%.1f%% beyond the three)\n",
          static_cast<double>(total) / 1e6, static_cast<double>(weights) / 1e6, static_cast<double>(kv) / 1e6,
          static_cast<double>(arena) / 1e6, static_cast<double>(total - expected) / 1e6, memory_overhead);
    }
  }
  if (!o.batches.empty()) return run_batch_bench(r, o, load_ms, file_gb, memory_overhead);
  const int32_t prefill = r.profile_index("prefill");
  if (prefill < 0) return fail("bench", invalid_argument("the engine has no profile named 'prefill'"), 2);
  const int64_t max_seq = r.engine().profiles().bounds[static_cast<size_t>(prefill)][0].max[1];
  const int64_t max_context = r.engine().max_context();
  // context + steps + round_decodes <= max_context, without overflowing.
  if (context > max_seq || steps > max_context || round_decodes > max_context - steps ||
      context > max_context - steps - round_decodes) {
    return fail("bench", invalid_argument("--context plus decode steps exceed the engine's context"), 2);
  }
  Tensor logits;
  // The same logits left in device memory: a call then returns once its work is enqueued.
  Result<DeviceMemory> device_logits_memory = r.engine().allocate(r.vocab() * 4);
  if (!device_logits_memory.ok()) return fail("bench", device_logits_memory.status());
  TensorView device_logits{device_logits_memory->data(), DataType::kF32, Dims{}, MemoryKind::kDevice, r.vocab() * 4};
  // And in host memory the device writes by DMA (page-locked on CUDA): no staging copy.
  Result<HostMemory> pinned_logits_memory = r.engine().allocate_host(r.vocab() * 4);
  if (!pinned_logits_memory.ok()) return fail("bench", pinned_logits_memory.status());
  TensorView pinned_logits{pinned_logits_memory->data(), DataType::kF32, Dims{}, MemoryKind::kHost, r.vocab() * 4};
  auto must = [&](const Status& s) {
    if (!s.ok()) {
      fail("bench", s);
      internal::finish_device_background_work();
      std::exit(1);
    }
  };
  const std::vector<int64_t> prompt = ids(context, r.vocab());
  // Every call is checked, outside the timed regions: it ran the profile it pinned, and the
  // logits that came back to the host are all finite. A bench that timed something else
  // fails (exit 1) after writing what it measured.
  int64_t checked_calls = 0;
  std::string problem;  // the first check that failed
  auto check_logits = [&](int32_t want, std::span<const float> host_logits) {
    ++checked_calls;
    if (!problem.empty()) return;
    const int32_t ran = r.session().active_profile();
    if (ran != want) {
      problem = "a call pinned to profile " + r.profile_label(want) + " ran profile " + r.profile_label(ran);
      return;
    }
    const float* x = host_logits.data();
    const auto n = static_cast<int64_t>(host_logits.size());
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(x[i])) {
        problem = "logit " + std::to_string(i) + " of a call on profile " + r.profile_label(want) + " is " +
                  std::to_string(x[i]);
        return;
      }
    }
  };
  auto check = [&](int32_t want, const Tensor* host_logits) {
    check_logits(want, host_logits == nullptr
                           ? std::span<const float>()
                           : std::span(host_logits->data<float>(), static_cast<size_t>(host_logits->dims.volume())));
  };
  // The first calls of a new session, the engine loaded: a prefill of --context tokens in
  // one fresh session, and in another the first decode after its prompt, each against the
  // warm calls that follow it. They run before anything else, as a process's first requests
  // do. `fresh_session` is what a user's process does before its first request: create a
  // session and warm it up (Runner::reset).
  auto fresh_session = [&] { must(r.reset()); };
  int32_t first_decode_profile = r.profile_index("decode");
  for (int32_t p = 0; p < r.engine().profiles().size() && first_decode_profile < 0; ++p) {
    if (r.engine().profiles().bounds[static_cast<size_t>(p)][0].min[1] <= 1) first_decode_profile = p;
  }
  double session_create_ms = 0, first_prefill_ms = 0, warm_prefill_ms = 0, first_decode_ms = 0, warm_decode_ms = 0;
  {
    const auto t0 = std::chrono::steady_clock::now();
    fresh_session();
    session_create_ms = internal::ms_since(t0);
    std::vector<double> ms;
    for (int i = 0; i < 9; ++i) {
      double t = 0;
      must(r.call(prompt, 0, ProfileRequest::named("prefill"), logits, &t));
      check(prefill, &logits);
      if (i == 0) {
        first_prefill_ms = t;
      } else {
        ms.push_back(t);
      }
    }
    warm_prefill_ms = warm_median(ms);
  }
  if (first_decode_profile >= 0) {
    fresh_session();
    must(r.call(prompt, 0, ProfileRequest::named("prefill"), logits));
    check(prefill, &logits);
    // Positions context.. stay below context + steps + round_decodes, checked above.
    const int64_t calls = std::min<int64_t>(11, steps + round_decodes);
    std::vector<double> ms;
    for (int64_t i = 0; i < calls; ++i) {
      double t = 0;
      must(r.call({ids(1, r.vocab())[0]}, context + i, ProfileRequest::pinned(first_decode_profile), logits, &t));
      check(first_decode_profile, &logits);
      if (i == 0) {
        first_decode_ms = t;
      } else {
        ms.push_back(t);
      }
    }
    warm_decode_ms = ms.empty() ? first_decode_ms : warm_median(ms);
  }
  const double weight_gb = static_cast<double>(r.engine().weight_bytes()) / 1e9;
  Result<double> bandwidth = copy_bandwidth(r.engine());
  if (!bandwidth.ok()) return fail("bench", bandwidth.status());
  std::printf("engine %s on %s: %.3f GB of weights; device copy bandwidth %.0f GB/s\n", file.c_str(),
              device_kind_name(r.engine().device()), weight_gb, *bandwidth / 1e9);
  const double load_gb_s = load_ms > 0 ? file_gb / (load_ms / 1e3) : 0.0;
  const double first_prefill_ratio = warm_prefill_ms > 0 ? first_prefill_ms / warm_prefill_ms : 0.0;
  const double first_decode_ratio = warm_decode_ms > 0 ? first_decode_ms / warm_decode_ms : 0.0;
  std::printf(
      "load: %.1f ms to open the engine (%.1f MB file, %.2f GB/s): read, weights uploaded, a session warmed up\n",
      load_ms, file_gb * 1e3, load_gb_s);
  std::printf("new session: created and warmed up in %.3f ms; first prefill (%lld tokens) %.3f ms vs %.3f warm (%.1fx)",
              session_create_ms, static_cast<long long>(context), first_prefill_ms, warm_prefill_ms,
              first_prefill_ratio);
  if (first_decode_profile >= 0) {
    std::printf("; first decode on profile %s %.3f ms vs %.3f warm (%.1fx)",
                r.profile_label(first_decode_profile).c_str(), first_decode_ms, warm_decode_ms, first_decode_ratio);
  }
  std::printf("\n");
  nlohmann::ordered_json json = {{"device", device_kind_name(r.engine().device())},
                                 {"weight_gb", json_number(weight_gb)},
                                 {"copy_gb_s", json_number(*bandwidth / 1e9)},
                                 {"load_ms", json_number(load_ms)},
                                 {"engine_file_gb", json_number(file_gb)},
                                 {"load_gb_s", json_number(load_gb_s)},
                                 {"session_create_ms", json_number(session_create_ms)},
                                 {"first_prefill_ms", json_number(first_prefill_ms)},
                                 {"warm_prefill_ms", json_number(warm_prefill_ms)},
                                 {"first_prefill_ratio", json_number(first_prefill_ratio)},
                                 {"first_decode_ms", json_number(first_decode_ms)},
                                 {"warm_decode_ms", json_number(warm_decode_ms)},
                                 {"first_decode_ratio", json_number(first_decode_ratio)},
                                 {"fresh_process",
                                  {{"runs", fresh.runs},
                                   {"prompt_tokens", fresh.prompt_tokens},
                                   {"first_token_ms", json_number(fresh.first_token_ms)},
                                   {"exit_ms", json_number(fresh.exit_ms)},
                                   {"phases", fresh_phases_json(fresh.phases)}}},
                                 {"decode", nlohmann::ordered_json::array()},
                                 {"prefill", nlohmann::ordered_json::array()}};

  // Decode on every profile that accepts one token.
  double decode_on_prefill_ms = 0, best_decode_ms = 1e30;
  double decode_on_prefill_mean = 0, decode_on_decode_mean = 0;
  const ProfileTable& table = r.engine().profiles();
  ChartPanel decode_panel{"decode, ms/token at context " + std::to_string(context) + " (lower is better)", {}};
  ChartPanel prefill_panel{"prefill on profile 'prefill', ms (lower is better)", {}};
  for (int32_t p = 0; p < table.size(); ++p) {
    const InputProfileBounds& b = table.bounds[static_cast<size_t>(p)][0];
    if (b.min[1] > 1) continue;
    must(r.reset());
    must(r.call(prompt, 0, ProfileRequest::named("prefill"), logits));
    check(prefill, &logits);
    std::vector<double> ms;
    for (int64_t i = 0; i < steps + 3; ++i) {
      double t = 0;
      must(r.call({ids(1, r.vocab())[0]}, context + i, ProfileRequest::pinned(p), logits, &t));
      check(p, &logits);
      if (i >= 3) ms.push_back(t);  // the first calls switch, and may capture a graph
    }
    const Stats s = stats(ms);
    const double gbs = weight_gb / (s.median / 1e3);
    std::printf(
        "decode on profile %-14s %8.3f ms/token (p10 %.3f, p90 %.3f)  %8.1f tok/s  %7.0f GB/s (%.0f%% of copy)\n",
        r.profile_label(p).c_str(), s.median, s.p10, s.p90, 1e3 / s.median, gbs, 100.0 * gbs * 1e9 / *bandwidth);
    // The same steps with the logits left in device memory (each step still waited for):
    // what a caller that samples on the device pays, without the host copy of the logits.
    ms.clear();
    for (int64_t i = 0; i < steps + 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      must(r.call({ids(1, r.vocab())[0]}, context + i, ProfileRequest::pinned(p), device_logits));
      must(r.session().synchronize());
      if (i >= 3) ms.push_back(internal::ms_since(t0));
      check(p, nullptr);
    }
    const Stats sd = stats(ms);
    std::printf("  the same, logits left in device memory %8.3f ms/token (p10 %.3f, p90 %.3f)\n", sd.median, sd.p10,
                sd.p90);
    // The same steps with the logits in host memory from Engine::allocate_host.
    ms.clear();
    for (int64_t i = 0; i < steps + 3; ++i) {
      double t = 0;
      must(r.call({ids(1, r.vocab())[0]}, context + i, ProfileRequest::pinned(p), pinned_logits, &t));
      if (i >= 3) ms.push_back(t);
      check_logits(p, std::span(static_cast<const float*>(pinned_logits.data),
                                static_cast<size_t>(pinned_logits.dims.volume())));
    }
    const Stats sp = stats(ms);
    std::printf("  the same, logits in page-locked host memory %8.3f ms/token (p10 %.3f, p90 %.3f)\n", sp.median,
                sp.p10, sp.p90);
    json["decode"].push_back({{"profile", table.names[static_cast<size_t>(p)]},
                              {"ms", json_number(s.median)},
                              {"p10", json_number(s.p10)},
                              {"p90", json_number(s.p90)},
                              {"device_logits_ms", json_number(sd.median)},
                              {"pinned_logits_ms", json_number(sp.median)}});
    if (p == prefill) {
      decode_on_prefill_ms = s.median;
      decode_on_prefill_mean = s.mean;
    }
    if (table.names[static_cast<size_t>(p)] == "decode") decode_on_decode_mean = s.mean;
    decode_panel.bars.push_back({"on profile '" + table.names[static_cast<size_t>(p)] + "'", s.median, s.p10, s.p90});
    best_decode_ms = std::min(best_decode_ms, s.median);
  }
  for (int64_t len : o.prefill_lengths) {
    if (len < 1 || len > max_seq) continue;
    std::vector<double> ms;
    for (int i = 0; i < 8; ++i) {
      double t = 0;
      must(r.call(ids(len, r.vocab()), 0, ProfileRequest::named("prefill"), logits, &t));
      check(prefill, &logits);
      if (i >= 2) ms.push_back(t);
    }
    const Stats s = stats(ms);
    std::printf("prefill %5lld tokens %10.3f ms (p10 %.3f, p90 %.3f)  %10.0f tok/s\n", static_cast<long long>(len),
                s.median, s.p10, s.p90, static_cast<double>(len) * 1e3 / s.median);
    prefill_panel.bars.push_back({std::to_string(len) + " tokens", s.median, s.p10, s.p90});
    json["prefill"].push_back({{"tokens", len}, {"ms", json_number(s.median)}});
  }
  // Prefill at lengths the process has not run yet (first sight), then the same lengths
  // twice more in the same order: the third sight is a repeated length's cost.
  {
    std::vector<int64_t> seen = o.prefill_lengths;
    seen.push_back(context);
    const int64_t longest = std::min<int64_t>(1024, max_seq);
    const std::vector<int64_t> lengths = distinct_lengths(o.distinct, longest, seen);
    std::vector<double> sight[3];
    for (std::vector<double>& ms : sight) {
      for (int64_t len : lengths) {
        double t = 0;
        must(r.call(ids(len, r.vocab()), 0, ProfileRequest::named("prefill"), logits, &t));
        check(prefill, &logits);
        ms.push_back(t);
      }
    }
    nlohmann::ordered_json d = {{"n", lengths.size()}, {"first_ms", 0.0},      {"first_p90_ms", 0.0},
                                {"repeat_ms", 0.0},    {"repeat_p90_ms", 0.0}, {"ratio", 0.0}};
    if (!lengths.empty()) {
      const Stats first = stats(sight[0]), repeat = stats(sight[2]);
      std::printf(
          "prefill at %zu distinct lengths in [%lld, %lld]: first sight %.3f ms (p90 %.3f), third sight %.3f ms (p90 "
          "%.3f); first / third %.2fx\n",
          lengths.size(), static_cast<long long>(kShortest), static_cast<long long>(longest), first.median, first.p90,
          repeat.median, repeat.p90, first.median / repeat.median);
      d = {{"n", lengths.size()},
           {"first_ms", json_number(first.median)},
           {"first_p90_ms", json_number(first.p90)},
           {"repeat_ms", json_number(repeat.median)},
           {"repeat_p90_ms", json_number(repeat.p90)},
           {"ratio", json_number(first.median / repeat.median)}};
    }
    // Each length's first and third sight, in the order run: where a change gains or loses.
    d["lengths"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < lengths.size(); ++i) {
      d["lengths"].push_back(
          {{"tokens", lengths[i]}, {"first_ms", json_number(sight[0][i])}, {"third_ms", json_number(sight[2][i])}});
    }
    json["distinct_lengths"] = d;
  }
  // The switch: decode steps alternating profiles, minus the mean of the two steady costs.
  const int32_t decode = r.profile_index("decode");
  double switch_ms = 0;
  double switch_host_us[2] = {0, 0};  // into decode, into prefill
  if (decode >= 0) {
    must(r.reset());
    must(r.call(prompt, 0, ProfileRequest::named("prefill"), logits));
    check(prefill, &logits);
    std::vector<double> ms;
    for (int64_t i = 0; i < steps; ++i) {
      double t = 0;
      must(r.call({7}, context + i, ProfileRequest::pinned(i % 2 == 0 ? decode : prefill), logits, &t));
      check(i % 2 == 0 ? decode : prefill, &logits);
      ms.push_back(t);
    }
    // Half the steps run on each profile, so compare means (a median of two clusters would
    // pick one of them): each step pays one switch on top of its profile's steady cost.
    switch_ms = std::max(0.0, stats(ms).mean - (decode_on_decode_mean + decode_on_prefill_mean) / 2);
    const double gain = decode_on_prefill_ms - best_decode_ms;
    std::printf("switch (alternating decode steps, minus steady steps) %.3f ms; decode gain %.3f ms/token", switch_ms,
                gain);
    if (gain > 0) std::printf("; pays off after %.1f decode steps", switch_ms / gain);
    std::printf("\n");
    // The switch itself. It enqueues no device work, so its cost is the host time a call
    // spends because the profile changed: a call's time to enqueue (logits in device memory,
    // the previous call waited for outside the timed region) right after the other
    // profile ran, minus the same call's right after its own profile ran. The order runs
    // both profiles in pairs (d d p p d d ...): the first of a pair switches, the second stays.
    std::vector<double> enqueue_ms[2][2];  // [into decode, into prefill][switched, stayed]
    for (int64_t i = 0; i < 4 * steps + 4; ++i) {
      const int which = static_cast<int>((i / 2) % 2);  // 0: decode, 1: prefill
      const int32_t profile = which == 0 ? decode : prefill;
      double t = 0;
      must(r.call({7}, context, ProfileRequest::pinned(profile), device_logits, &t));
      must(r.session().synchronize());
      check(profile, nullptr);
      if (i >= 4) enqueue_ms[which][i % 2].push_back(t);
    }
    for (int which = 0; which < 2; ++which) {
      const Stats switched = stats(enqueue_ms[which][0]), stayed = stats(enqueue_ms[which][1]);
      switch_host_us[which] = 1e3 * (switched.median - stayed.median);
      std::printf(
          "switch into profile %-12s %+8.1f us of host time (a call enqueues in %.1f us after a switch, %.1f "
          "us without); no device work\n",
          r.profile_label(which == 0 ? decode : prefill).c_str(), switch_host_us[which], 1e3 * switched.median,
          1e3 * stayed.median);
    }
  }
  // Rounds: 1 prefill (context) + N decodes, switching vs prefill-only.
  double round_ms[2] = {0, 0};
  for (int mode = 0; mode < 2 && decode >= 0; ++mode) {
    std::vector<double> totals;
    for (int64_t round = 0; round < rounds; ++round) {
      const auto t0 = std::chrono::steady_clock::now();
      must(r.call(prompt, 0, ProfileRequest::named("prefill"), logits));
      check(prefill, nullptr);  // in the timed loop, only the profile (a read under the session's lock)
      for (int64_t i = 0; i < round_decodes; ++i) {
        must(r.call({7}, context + i, ProfileRequest::pinned(mode == 0 ? decode : prefill), logits));
        check(mode == 0 ? decode : prefill, nullptr);
      }
      totals.push_back(internal::ms_since(t0));
      check(mode == 0 ? decode : prefill, &logits);  // and the round's last logits
    }
    round_ms[mode] = stats(totals).median;
  }
  if (decode >= 0) {
    std::printf(
        "round of 1 prefill (%lld) + %lld decodes: switching %.3f ms, prefill-only %.3f ms (switching is %.1f%% "
        "faster)\n",
        static_cast<long long>(context), static_cast<long long>(round_decodes), round_ms[0], round_ms[1],
        100.0 * (round_ms[1] - round_ms[0]) / round_ms[1]);
  }
  if (!o.svg_path.empty()) {
    ChartPanel rounds_panel{"1 prefill (" + std::to_string(context) + ") + " + std::to_string(round_decodes) +
                                " decodes, ms per round (lower is better)",
                            {}};
    if (decode >= 0) {
      rounds_panel.bars.push_back({"switching", round_ms[0]});
      rounds_panel.bars.push_back({"prefill profile only", round_ms[1]});
    }
    const std::string svg = bar_chart_svg("gearbox bench: " + file + " on " + device_kind_name(r.engine().device()),
                                          {decode_panel, prefill_panel, rounds_panel});
    if (Status s = write_output_file(o.svg_path, svg, "chart"); !s.ok()) return fail("bench", s);
    std::printf("wrote the chart to %s\n", o.svg_path.c_str());
  }
  json["memory_overhead_percent"] = json_number(memory_overhead);
  json["switch_ms"] = json_number(switch_ms);
  json["switch_into_decode_host_us"] = json_number(switch_host_us[0]);
  json["switch_into_prefill_host_us"] = json_number(switch_host_us[1]);
  json["round_switching_ms"] = json_number(round_ms[0]);
  json["round_prefill_only_ms"] = json_number(round_ms[1]);
  return finish_bench(o, std::move(json), problem, checked_calls,
                      "ran the profile they pinned, with finite logits where they came back");
}

}  // namespace

Command add_bench_command(CLI::App& gearbox) {
  auto o = std::make_shared<BenchArgs>();
  CLI::App* app = gearbox.add_subcommand(
      "bench",
      "process start to first token, load time, first calls of a session, decode per profile, prefill (repeated and "
      "first-seen lengths), switch cost, rounds with and without switching; or, with --batch, a batched "
      "engine's decode throughput at several batch sizes");
  app->footer(
      "Times are wall-clock per call, median and p10/p90; achieved GB/s counts the weight bytes a decode step must "
      "read, against a device copy bandwidth this command measures.");
  app->add_option("FILE", o->file, "the engine file")->required();
  add_int_option(*app, "--context", o->context, "decode steps run after an N-token prompt")->capture_default_str();
  add_int_option(*app, "--steps", o->steps, "decode steps per measurement")->capture_default_str();
  add_int_list_option(*app, "--prefill", o->prefill_lengths, "prefill lengths, clipped to the prefill profile")
      ->type_name("L1,L2");
  add_int_option(*app, "--rounds", o->rounds, "rounds of 1 prefill + --round-decodes decodes")->capture_default_str();
  add_int_option(*app, "--round-decodes", o->round_decodes, "decodes per round")->capture_default_str();
  add_int_list_option(*app, "--batch", o->batches,
                      "decode throughput of a batched engine at these batch sizes (slots 0..B-1 each hold a "
                      "--context prompt, one call of tokens [B, 1] a step); runs only this and the load time")
      ->type_name("B1,B2");
  add_int_option(*app, "--fresh-processes", o->fresh,
                 "process start to first token: N `gearbox generate` processes with a 128-token prompt (clipped "
                 "to the prefill profile), run before this one loads the engine; 0: skip")
      ->capture_default_str();
  add_int_option(*app, "--distinct-lengths", o->distinct,
                 "prefill at N lengths in [16, min(1024, profile max)] not run before, first sight vs third; 0: skip")
      ->capture_default_str();
  app->add_option("--json", o->json_path, "also write the numbers as JSON")->type_name("OUT");
  app->add_option("--svg", o->svg_path, "and a chart of them (SVG): decode per profile, prefill, rounds")
      ->type_name("OUT");
  app->add_option("--device", o->device, "cpu, cuda or auto")->type_name("D")->capture_default_str();
  return {app, [o] { return run_bench(*o); }};
}

}  // namespace gearbox::cli
