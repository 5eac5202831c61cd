#include "generate_batch.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <thread>

#include "core/check.h"
#include "core/elapsed.h"
#include "logits_scan.h"

namespace gearbox::cli {

Result<BatchOutcome> generate_batch(Runner& runner, const std::vector<std::vector<int64_t>>& prompts,
                                    const BatchOptions& options) {
  BatchOutcome out;
  out.sequences.resize(prompts.size());
  out.slots = runner.capacity();
  const bool batched = runner.engine().max_batch() > 0;
  const auto start = std::chrono::steady_clock::now();
  std::deque<size_t> waiting;
  for (size_t i = 0; i < prompts.size(); ++i) waiting.push_back(i);
  std::vector<int64_t> free_slots;
  for (int64_t s = out.slots - 1; s >= 0; --s) free_slots.push_back(s);  // lowest slot first
  struct Running {
    size_t index;
    int64_t slot;
  };
  std::vector<Running> running;
  // Each call's logits [rows, 1, vocab] land in page-locked host memory, which the device
  // writes by DMA (a batched step's rows would otherwise pass through a staging copy into
  // a Tensor); where the device gives none now, in a Tensor.
  Result<HostMemory> pinned = runner.engine().allocate_host(out.slots * runner.vocab() * 4);
  if (!pinned.ok()) {
    std::fprintf(stderr, "warning: the logits go through a Tensor: %s\n", pinned.status().to_string().c_str());
  }
  Tensor tensor;
  // Each call's rows are checked (and, greedy, their ids found) on the host's threads.
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  struct Logits {
    const float* data;
    int64_t vocab;
  };
  const auto call = [&](const std::vector<Runner::Row>& rows, double* ms) -> Result<Logits> {
    if (pinned.ok()) {
      TensorView view{pinned->data(), DataType::kF32, Dims{}, MemoryKind::kHost, pinned->bytes()};
      GEARBOX_RETURN_IF_ERROR(runner.call_rows(rows, view, ms));
      return Logits{static_cast<const float*>(view.data), view.dims[view.dims.rank() - 1]};
    }
    GEARBOX_RETURN_IF_ERROR(runner.call_rows(rows, tensor, ms));
    return Logits{tensor.data<float>(), tensor.dims[tensor.dims.rank() - 1]};
  };
  const auto ended = [&](size_t i) {
    const std::vector<int64_t>& g = out.sequences[i].generated;
    return static_cast<int64_t>(g.size()) >= options.max_new ||
           std::find(options.eos.begin(), options.eos.end(), g.back()) != options.eos.end();
  };
  const auto finish = [&](size_t r) -> Status {
    const Running done = running[r];
    running.erase(running.begin() + static_cast<std::ptrdiff_t>(r));
    free_slots.push_back(done.slot);
    if (batched) return runner.session().release_slot(done.slot);
    return runner.reset();  // one sequence a session: the next starts fresh
  };

  while (!waiting.empty() || !running.empty()) {
    // Admit waiting prompts into free slots, prefilled together where a profile takes
    // their rows (left-padded to the longest), else in smaller groups.
    std::vector<Running> admitted;
    while (!waiting.empty() && !free_slots.empty()) {
      admitted.push_back({waiting.front(), free_slots.back()});
      waiting.pop_front();
      free_slots.pop_back();
    }
    for (size_t first = 0; first < admitted.size();) {
      size_t end = first + 1;
      size_t longest = prompts[admitted[first].index].size();
      while (end < admitted.size()) {
        const size_t seq = std::max(longest, prompts[admitted[end].index].size());
        if (!runner.fits(Dims{static_cast<int64_t>(end - first + 1), static_cast<int64_t>(seq)})) break;
        longest = seq;
        ++end;
      }
      std::vector<Runner::Row> rows;
      const double wait_ms = internal::ms_since(start);
      for (size_t a = first; a < end; ++a) rows.push_back({prompts[admitted[a].index], 0, admitted[a].slot});
      double ms = 0;
      Result<Logits> logits = call(rows, &ms);
      if (!logits.ok()) return logits.status().with_context("prompt " + std::to_string(admitted[first].index + 1));
      const int64_t vocab = logits->vocab;
      const std::vector<LogitsScan> scans = scan_rows(logits->data, static_cast<int64_t>(end - first), vocab, threads);
      for (size_t a = first; a < end; ++a) {
        const size_t i = admitted[a].index;
        SequenceResult& seq = out.sequences[i];
        seq.wait_ms = wait_ms;
        seq.prefill_ms = ms;
        const float* row = logits->data + static_cast<int64_t>(a - first) * vocab;
        const LogitsScan& scan = scans[a - first];
        const int64_t position = static_cast<int64_t>(prompts[i].size()) - 1;
        if (scan.first_non_finite >= 0) return non_finite_logit(scan.first_non_finite, position);
        seq.generated.push_back(options.greedy ? scan.argmax : options.next_token(row, vocab));
        running.push_back(admitted[a]);
        if (ended(i)) GEARBOX_RETURN_IF_ERROR(finish(running.size() - 1));
      }
      first = end;
    }
    if (running.empty()) continue;
    // One decode step for every running sequence.
    std::vector<Runner::Row> rows;
    for (const Running& r : running) {
      const SequenceResult& seq = out.sequences[r.index];
      const int64_t pos = static_cast<int64_t>(prompts[r.index].size() + seq.generated.size()) - 1;
      rows.push_back({{seq.generated.back()}, pos, r.slot});
    }
    double ms = 0;
    Result<Logits> logits = call(rows, &ms);
    if (!logits.ok()) return logits.status();
    ++out.decode_calls;
    out.decode_rows += static_cast<int64_t>(rows.size());
    const int64_t vocab = logits->vocab;
    const std::vector<LogitsScan> scans = scan_rows(logits->data, static_cast<int64_t>(running.size()), vocab, threads);
    for (size_t r = 0; r < running.size(); ++r) {
      SequenceResult& seq = out.sequences[running[r].index];
      const float* row = logits->data + static_cast<int64_t>(r) * vocab;
      if (scans[r].first_non_finite >= 0) return non_finite_logit(scans[r].first_non_finite, rows[r].start);
      seq.generated.push_back(options.greedy ? scans[r].argmax : options.next_token(row, vocab));
      seq.decode_ms += ms;
    }
    for (size_t r = running.size(); r-- > 0;) {
      if (ended(running[r].index)) GEARBOX_RETURN_IF_ERROR(finish(r));
    }
  }
  out.wall_ms = internal::ms_since(start);
  return out;
}

}  // namespace gearbox::cli
