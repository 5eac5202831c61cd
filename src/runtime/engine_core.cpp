#include "runtime/engine_core.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "builder/builder.h"
#include "core/check.h"
#include "core/elapsed.h"
#include "core/log.h"
#include "format/mapped_file.h"
#include "format/tactic_cache.h"
#include "format/tactic_tables.h"
#include "ir/shape_inference.h"

namespace gearbox::internal {
namespace {

// format::check_payload on a thread of its own; on the calling thread, before returning,
// where no thread can be started.
std::future<Status> start_payload_check(std::span<const uint8_t> payload, const format::PayloadDigests& digests) {
  try {
    return std::async(std::launch::async, [payload, &digests] { return format::check_payload(payload, digests); });
  } catch (const std::system_error&) {
    std::promise<Status> checked;
    checked.set_value(format::check_payload(payload, digests));
    return checked.get_future();
  }
}

// load_phases_line's phases, and parse_load_phases' reading of them.
constexpr char kPhasesWritten[] =
    "parsed %.1f, device ready %.1f, weights uploaded %.1f, payload checked %.1f, tactics and memory plans %.1f";
constexpr char kPhasesRead[] =
    "parsed %lf, device ready %lf, weights uploaded %lf, payload checked %lf, tactics and memory plans %lf";
constexpr std::string_view kLoadLine = "engine load (";

BindingInfo binding(const ir::Network& net, int32_t tensor, const Dims& dims, std::vector<std::string> dim_names) {
  const ir::TensorInfo& t = net.tensors[static_cast<size_t>(tensor)];
  return BindingInfo{t.name, t.dtype, dims, std::move(dim_names)};
}

// A file is input: every tactic it names (in the engine or in a tactic cache) must be one
// the device runs for every shape of its profile, up to the profile's max dims.
Status check_tactics(const ir::Network& net, std::span<const Dims> max_dims, std::span<const uint32_t> tactics,
                     const DeviceBackend& device, const std::string& profile, const std::string& source) {
  for (size_t n = 0; n < net.nodes.size() && n < tactics.size(); ++n) {
    const ir::Node& node = net.nodes[n];
    if (!device.tactic_runnable(net, node, tactics[n], max_dims)) {
      return data_loss("profile " + profile + ", node " + node.name + ": tactic " + std::to_string(tactics[n]) + " ('" +
                       device.tactic_name(node, tactics[n]) + "') cannot run the node for every shape of " +
                       "the profile on this " + device_kind_name(device.kind()) + " device; " + source);
    }
  }
  return {};
}

}  // namespace

EngineCore::~EngineCore() { finish_device_background_work(); }

Status EngineCore::tactics_from_cache_or_tuning(std::span<const uint8_t> bytes, const EngineOptions& options) {
  const std::string cache = options.tactic_cache.value_or("");
  const format::EngineIdentity identity = format::engine_identity(bytes);
  const std::string versions = device_->library_versions();
  if (!cache.empty()) {
    Result<format::MappedFile> file = format::MappedFile::open(cache);
    if (file.ok()) {
      Result<std::vector<format::TacticTable>> tables = format::decode_tactic_cache(file->bytes(), identity, desc_);
      if (tables.ok()) {
        for (format::TacticTable& t : *tables) {
          if (t.device == options.device && t.library_versions == versions) {
            tuned_here_ = std::move(t);
            tactics_ = &tuned_here_;
            GEARBOX_LOG(kInfo, "tactics for this %s device read from the tactic cache %s",
                        device_kind_name(options.device), cache.c_str());
            return {};
          }
        }
      } else {
        GEARBOX_LOG(kWarning, "ignoring the tactic cache %s: %s", cache.c_str(), tables.status().message().c_str());
      }
    }
  }
  GEARBOX_LOG(kInfo, "the engine has no tactics for this %s device (%s); tuning now", device_kind_name(options.device),
              versions.c_str());
  Result<format::TacticTable> tuned = tune(desc_.network, desc_.profiles, *device_, *weights_, BuildOptions{});
  if (!tuned.ok()) return tuned.status();
  tuned_here_ = std::move(*tuned);
  tactics_ = &tuned_here_;
  tuned_at_load_ = true;
  if (!cache.empty()) {
    const std::vector<uint8_t> encoded = format::encode_tactic_cache(identity, {tuned_here_});
    if (Status s = format::write_file_atomically(cache, encoded, "tactic cache"); !s.ok()) {
      GEARBOX_LOG(kWarning, "the tactics tuned now are not cached (the next load tunes again): %s",
                  s.message().c_str());
    }
  }
  return {};
}

std::string load_phases_line(const LoadPhases& p, size_t bytes, DeviceKind device) {
  char phases[256];
  std::snprintf(phases, sizeof phases, kPhasesWritten, p.parsed_ms, p.device_ready_ms, p.uploaded_ms, p.checked_ms,
                p.planned_ms);
  char head[96];
  std::snprintf(head, sizeof head, "%.1f MB, %s device), ms from its start: ", static_cast<double>(bytes) / 1e6,
                device_kind_name(device));
  return std::string(kLoadLine) + head + phases;
}

std::optional<LoadPhases> parse_load_phases(std::string_view line) {
  const size_t load = line.find(kLoadLine);
  const size_t from = line.find("parsed ", load == std::string_view::npos ? line.size() : load);
  if (from == std::string_view::npos) return std::nullopt;
  const std::string phases(line.substr(from));
  LoadPhases p;
  if (std::sscanf(phases.c_str(), kPhasesRead, &p.parsed_ms, &p.device_ready_ms, &p.uploaded_ms, &p.checked_ms,
                  &p.planned_ms) != 5) {
    return std::nullopt;
  }
  return p;
}

Result<std::shared_ptr<EngineCore>> EngineCore::load(std::span<const uint8_t> bytes, const EngineOptions& options) {
  // Where a load's time goes, for the debug log: each phase's end, in ms from the start.
  const auto start = std::chrono::steady_clock::now();
  LoadPhases phases;
  Result<format::ParsedEngine> parsed = format::parse_engine(bytes, format::PayloadCheck::kDeferred);
  if (!parsed.ok()) return parsed.status();
  phases.parsed_ms = ms_since(start);
  // The payload's checksum runs on a thread of its own while the weights upload: both read
  // the whole payload (from the page cache, or from the disk through the mapping). Its
  // verdict is taken first, so a damaged payload is reported as such whatever else fails.
  std::future<Status> payload_checked = start_payload_check(parsed->payload, parsed->payload_digests);
  auto core = std::make_shared<EngineCore>();
  core->desc_ = std::move(parsed->desc);
  const ir::Network& net = core->desc_.network;
  const Status uploaded = [&]() -> Status {
    Result<std::shared_ptr<const DeviceBackend>> device = device_backend(options.device);
    if (!device.ok()) return device.status();
    core->device_ = *device;
    phases.device_ready_ms = ms_since(start);
    for (const ir::InputSpec& in : net.inputs) {
      const DataType declared = net.tensors[static_cast<size_t>(in.tensor)].dtype;
      if (core->device_->storage_type(declared) != declared) {
        return unimplemented("input '" + net.tensors[static_cast<size_t>(in.tensor)].name + "' is " +
                             data_type_name(declared) + ", which the " + device_kind_name(options.device) +
                             " device does not take; build the engine with f32 inputs");
      }
    }
    for (int32_t out : net.outputs) {
      const DataType declared = net.tensors[static_cast<size_t>(out)].dtype;
      if (core->device_->storage_type(declared) != declared) {
        return unimplemented("output '" + net.tensors[static_cast<size_t>(out)].name + "' is " +
                             data_type_name(declared) + ", which the " + device_kind_name(options.device) +
                             " device does not produce; build the engine with f32 outputs");
      }
    }
    Result<std::shared_ptr<DeviceWeights>> weights = core->device_->upload_weights(net, parsed->payload);
    if (!weights.ok()) return weights.status();
    core->weights_ = std::move(*weights);
    phases.uploaded_ms = ms_since(start);
    return {};
  }();
  GEARBOX_RETURN_IF_ERROR(payload_checked.get());
  GEARBOX_RETURN_IF_ERROR(uploaded);
  phases.checked_ms = ms_since(start);

  for (const format::TacticTable& table : core->desc_.tactic_tables) {
    if (table.device == options.device && table.library_versions == core->device_->library_versions()) {
      core->tactics_ = &table;
      break;
    }
  }
  if (core->tactics_ == nullptr) GEARBOX_RETURN_IF_ERROR(core->tactics_from_cache_or_tuning(bytes, options));

  for (const format::ProfileDesc& p : core->desc_.profiles) {
    core->profiles_.bounds.push_back(p.bounds);
    core->profiles_.names.push_back(p.name);
  }
  for (const ir::InputSpec& in : net.inputs) core->inputs_.push_back(binding(net, in.tensor, in.dims, in.dim_names));
  for (int32_t out : net.outputs) core->outputs_.push_back(binding(net, out, Dims(), {}));

  core->input_value_limit_.assign(net.inputs.size(), 0);
  for (size_t i = 0; i < net.inputs.size(); ++i) {
    const int32_t tensor = net.inputs[i].tensor;
    for (const ir::Node& node : net.nodes) {
      if (node.kind == ir::OpKind::kEmbedding && node.inputs[0] == tensor) {
        core->input_value_limit_[i] = net.weights[static_cast<size_t>(node.weights[0])].dims[0];
      } else if ((node.kind == ir::OpKind::kRope && node.inputs[1] == tensor) ||
                 (node.kind == ir::OpKind::kAttention && node.inputs[3] == tensor)) {
        core->input_value_limit_[i] = net.max_context;
        if (net.slots > 0) core->positions_input_ = static_cast<int32_t>(i);
      } else if (node.kind == ir::OpKind::kAttention && node.inputs.size() > 4 && node.inputs[4] == tensor) {
        core->input_value_limit_[i] = net.slots;
        core->slots_input_ = static_cast<int32_t>(i);
      }
    }
  }

  core->binding_max_bytes_.assign(net.inputs.size() + net.outputs.size(), 0);
  for (int32_t p = 0; p < core->profiles_.size(); ++p) {
    std::vector<Dims> input_max;
    for (const InputProfileBounds& b : core->desc_.profiles[static_cast<size_t>(p)].bounds) input_max.push_back(b.max);
    std::vector<Dims> dims;
    GEARBOX_RETURN_IF_ERROR(ir::infer_shapes(net, input_max, dims));
    const bool cached = core->tactics_ == &core->tuned_here_ && !core->tuned_at_load_;
    GEARBOX_RETURN_IF_ERROR(
        check_tactics(net, dims, core->tactics(p), *core->device_,
                      std::to_string(p) + " '" + core->profiles_.names[static_cast<size_t>(p)] + "'",
                      cached ? "the tactic cache " + options.tactic_cache.value_or("") +
                                   " is damaged: delete it (the next load tunes again)"
                             : std::string("the engine is damaged: rebuild it")));
    core->plans_.push_back(plan_memory(net, dims, core->tactics(p), *core->device_));
    core->arena_bytes_ = std::max(core->arena_bytes_, core->plans_.back().arena_bytes);
    for (size_t b = 0; b < core->binding_max_bytes_.size(); ++b) {
      const int32_t tensor = b < net.inputs.size() ? net.inputs[b].tensor : net.outputs[b - net.inputs.size()];
      const auto t = static_cast<size_t>(tensor);
      const int64_t binding_bytes = ir::tensor_bytes(dims[t], core->device_->storage_type(net.tensors[t].dtype));
      core->binding_max_bytes_[b] = std::max(core->binding_max_bytes_[b], binding_bytes);
    }
    core->max_dims_.push_back(std::move(dims));
  }
  if (log_enabled(LogLevel::kDebug)) {
    phases.planned_ms = ms_since(start);
    GEARBOX_LOG(kDebug, "%s", load_phases_line(phases, bytes.size(), options.device).c_str());
  }
  return core;
}

Status EngineCore::check_bounds(int32_t profile, size_t input, const Dims& dims) const {
  const InputProfileBounds& b = profiles_.bounds[static_cast<size_t>(profile)][input];
  const BindingInfo& info = inputs_[input];
  if (dims.rank() != b.min.rank()) {
    return invalid_argument("input '" + info.name + "' has rank " + std::to_string(dims.rank()) + " " +
                            dims.to_string() + ", expected " + std::to_string(b.min.rank()));
  }
  for (int32_t d = 0; d < dims.rank(); ++d) {
    if (dims[d] >= b.min[d] && dims[d] <= b.max[d]) continue;
    const std::string dim_name =
        static_cast<size_t>(d) < info.dim_names.size() ? info.dim_names[static_cast<size_t>(d)] : std::to_string(d);
    return out_of_range("input '" + info.name + "' dim '" + dim_name + "' is " + std::to_string(dims[d]) +
                        ", outside [" + std::to_string(b.min[d]) + ", " + std::to_string(b.max[d]) + "] of profile " +
                        std::to_string(profile) + " '" + profiles_.names[static_cast<size_t>(profile)] + "'");
  }
  return {};
}

std::string EngineCore::describe_profile(int32_t profile) const {
  std::string s = std::to_string(profile) + " '" + profiles_.names[static_cast<size_t>(profile)] + "':";
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const InputProfileBounds& b = profiles_.bounds[static_cast<size_t>(profile)][i];
    s += " " + inputs_[i].name + " " + b.min.to_string() + ".." + b.max.to_string();
  }
  return s;
}

}  // namespace gearbox::internal
