#include "runner.h"

#include <algorithm>
#include <cmath>

#include "cli_args.h"
#include "core/check.h"
#include "core/elapsed.h"
#include "gearbox/binding_names.h"
#include "gearbox/profile_guard.h"
#include "logits_scan.h"

namespace gearbox::cli {
namespace {

/// A runner's sessions are warmed up as they are created (Session::warm_up).
SessionOptions warmed() {
  SessionOptions options;
  options.warm_up = true;
  return options;
}

}  // namespace

Result<DeviceKind> device_from_flag(const std::string& flag) {
  Result<DeviceKind> device = device_from_name(flag);
  if (!device.ok()) return device.status().with_context("--device");
  return device;
}

Result<Runner> Runner::open(const std::string& path, DeviceKind device) {
  EngineOptions options;
  options.device = device;
  Result<Engine> engine = Engine::load_file(path, options);
  if (!engine.ok()) return engine.status();
  const auto in = engine->inputs();
  const auto out = engine->outputs();
  const bool slots = engine->max_batch() > 0;
  if (in.size() != (slots ? 3u : 2u) || in[0].name != kTokensBinding || in[1].name != kPositionsBinding ||
      (slots && in[2].name != kSlotsBinding) || out.size() != 1 || out[0].name != kLogitsBinding) {
    return invalid_argument(path +
                            " is not a gearbox LLM engine (inputs 'tokens', 'positions' and, batched, 'slots'; "
                            "output 'logits')");
  }
  Result<int64_t> vocab = parse_int(engine->metadata("model.vocab"), "model.vocab");
  if (!vocab.ok()) return data_loss(path + ": the engine does not record its vocabulary (model.vocab)");
  Result<Session> session = Session::create(*engine, warmed());
  if (!session.ok()) return session.status();
  return Runner(std::move(*engine), std::move(*session), *vocab);
}

Status Runner::reset() {
  Result<Session> session = Session::create(engine_, warmed());
  if (!session.ok()) return session.status();
  session_ = std::move(*session);
  return {};
}

Status Runner::call(const std::vector<int64_t>& ids, int64_t start, const ProfileRequest& request, Tensor& logits,
                    double* ms) {
  return call_with(ids, start, request, logits, ms);
}

Status Runner::call(const std::vector<int64_t>& ids, int64_t start, const ProfileRequest& request, TensorView& logits,
                    double* ms) {
  return call_with(ids, start, request, logits, ms);
}

template <typename Output>
Status Runner::call_with(const std::vector<int64_t>& ids, int64_t start, const ProfileRequest& request, Output& logits,
                         double* ms) {
  std::vector<int64_t> positions(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) positions[i] = start + static_cast<int64_t>(i);
  const Dims dims{1, static_cast<int64_t>(ids.size())};
  // A batched engine runs the one sequence in KV-cache slot 0.
  int64_t slot = 0;
  TensorView in_views[3] = {{const_cast<int64_t*>(ids.data()), DataType::kI64, dims},
                            {positions.data(), DataType::kI64, dims},
                            {&slot, DataType::kI64, Dims{1}}};
  const std::span<const TensorView> in(in_views, engine_.max_batch() > 0 ? 3 : 2);
  const auto t0 = std::chrono::steady_clock::now();
  Status s;
  switch (request.kind()) {
    case ProfileRequest::Kind::kUnset: s = session_.run(in, std::span(&logits, 1)); break;
    case ProfileRequest::Kind::kAutomatic: {
      auto g = OptimizationProfileGuard::automatic();
      s = session_.run(in, std::span(&logits, 1));
      break;
    }
    case ProfileRequest::Kind::kNamed: {
      auto g = OptimizationProfileGuard::named(request.name());
      s = session_.run(in, std::span(&logits, 1));
      break;
    }
    case ProfileRequest::Kind::kPinned: {
      OptimizationProfileGuard g(request.index());
      s = session_.run(in, std::span(&logits, 1));
      break;
    }
  }
  if (ms != nullptr) *ms = internal::ms_since(t0);
  return s;
}

Status Runner::call_rows(const std::vector<Row>& rows, Tensor& logits, double* ms) {
  return call_rows_with(rows, logits, ms);
}

Status Runner::call_rows(const std::vector<Row>& rows, TensorView& logits, double* ms) {
  return call_rows_with(rows, logits, ms);
}

template <typename Output>
Status Runner::call_rows_with(const std::vector<Row>& rows, Output& logits, double* ms) {
  const bool slots = engine_.max_batch() > 0;
  if (!slots && rows.size() != 1) return invalid_argument("an engine without KV-cache slots runs one sequence a call");
  size_t seq = 0;
  for (const Row& r : rows) seq = std::max(seq, r.ids.size());
  std::vector<int64_t> tokens, positions, slot_ids;
  for (const Row& r : rows) {
    const size_t pad = seq - r.ids.size();
    for (size_t t = 0; t < seq; ++t) {
      tokens.push_back(t < pad ? 0 : r.ids[t - pad]);  // padding: a valid id at position -1
      positions.push_back(t < pad ? -1 : r.start + static_cast<int64_t>(t - pad));
    }
    slot_ids.push_back(r.slot);
  }
  const Dims dims{static_cast<int64_t>(rows.size()), static_cast<int64_t>(seq)};
  const TensorView in[3] = {{tokens.data(), DataType::kI64, dims},
                            {positions.data(), DataType::kI64, dims},
                            {slot_ids.data(), DataType::kI64, Dims{static_cast<int64_t>(rows.size())}}};
  const auto t0 = std::chrono::steady_clock::now();
  Status s;
  {
    auto g = OptimizationProfileGuard::automatic();
    s = session_.run(std::span(in, slots ? 3 : 2), std::span(&logits, 1));
  }
  if (ms != nullptr) *ms = internal::ms_since(t0);
  return s;
}

bool Runner::fits(const Dims& tokens) const {
  for (const std::vector<InputProfileBounds>& bounds : engine_.profiles().bounds) {
    const InputProfileBounds& b = bounds[0];
    bool inside = b.min.rank() == tokens.rank();
    for (int32_t d = 0; inside && d < tokens.rank(); ++d) inside = b.min[d] <= tokens[d] && tokens[d] <= b.max[d];
    if (inside) return true;
  }
  return false;
}

int64_t Runner::capacity() const {
  if (engine_.max_batch() == 0) return 1;
  int64_t largest = 1;
  for (const std::vector<InputProfileBounds>& bounds : engine_.profiles().bounds) {
    largest = std::max(largest, bounds[0].max[0]);
  }
  return std::min(largest, engine_.max_batch());
}

int32_t Runner::profile_index(const std::string& name) const {
  const ProfileTable& t = engine_.profiles();
  for (int32_t p = 0; p < t.size(); ++p) {
    if (t.names[static_cast<size_t>(p)] == name) return p;
  }
  return -1;
}

std::string Runner::profile_label(int32_t profile) const {
  return std::to_string(profile) + " '" + engine_.profiles().names[static_cast<size_t>(profile)] + "'";
}

Status non_finite_logit(int64_t token, int64_t position) {
  return data_loss("the engine returned a non-finite logit (token " + std::to_string(token) + ") at position " +
                   std::to_string(position) + "; its weights or inputs hold NaN or infinity");
}

Status check_finite_logits(const float* x, int64_t vocab, int64_t position) {
  if (vocab < 1) return {};
  const LogitsScan scan = scan_logits(x, vocab);
  return scan.first_non_finite < 0 ? Status{} : non_finite_logit(scan.first_non_finite, position);
}

Status check_finite_logits(const Tensor& logits, int64_t last_position) {
  const int64_t vocab = logits.dims[logits.dims.rank() - 1];
  const int64_t rows = vocab > 0 ? logits.dims.volume() / vocab : 0;
  for (int64_t r = 0; r < rows; ++r) {
    GEARBOX_RETURN_IF_ERROR(
        check_finite_logits(logits.data<float>() + r * vocab, vocab, last_position - (rows - 1) + r));
  }
  return {};
}

double log_prob(const Tensor& logits, int64_t row, int64_t id) {
  const int64_t vocab = logits.dims[logits.dims.rank() - 1];
  const float* x = logits.data<float>() + row * vocab;
  double mx = x[0];
  for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  return static_cast<double>(x[id]) - mx - std::log(sum);
}

}  // namespace gearbox::cli
