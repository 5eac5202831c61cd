// gearbox inspect: what an engine file holds, and how long it takes to load.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli_args.h"
#include "commands.h"
#include "core/elapsed.h"
#include "format/engine_file.h"
#include "format/mapped_file.h"
#include "gearbox/engine.h"
#include "runner.h"
#include "runtime/device_backend.h"

namespace gearbox::cli {
namespace {

std::string tactic_name(DeviceKind device, const ir::Node& node, uint32_t id) {
  Result<std::shared_ptr<const internal::DeviceBackend>> backend = internal::device_backend(device);
  if (!backend.ok()) return "?";
  return (*backend)->tactic_name(node, id);
}

// Loads the engine on `device` and prints the wall time, when the engine holds tactics for
// that device and its libraries: otherwise a load would tune (and write a tactic cache),
// which is not what an inspection should do or time.
int print_load_time(const std::string& file, const format::EngineDesc& d, DeviceKind device, size_t file_bytes) {
  Result<std::shared_ptr<const internal::DeviceBackend>> backend = internal::device_backend(device);
  if (!backend.ok()) return fail("inspect", backend.status());
  const std::string versions = (*backend)->library_versions();
  const bool tuned = std::any_of(d.tactic_tables.begin(), d.tactic_tables.end(), [&](const format::TacticTable& t) {
    return t.device == device && t.library_versions == versions;
  });
  if (!tuned) {
    std::printf("load on %s: not timed, the engine holds no tactics for this device (%s) and a load would tune\n",
                device_kind_name(device), versions.c_str());
    return 0;
  }
  EngineOptions options;
  options.device = device;
  options.tactic_cache = "";
  const auto t0 = std::chrono::steady_clock::now();
  Result<Engine> engine = Engine::load_file(file, options);
  const double ms = internal::ms_since(t0);
  if (!engine.ok()) return fail("inspect", engine.status());
  std::printf("load on %s: %.1f ms (%.1f MB file, %.2f GB/s): mapped, parsed, weights uploaded\n",
              device_kind_name(device), ms, static_cast<double>(file_bytes) / 1e6,
              ms > 0 ? static_cast<double>(file_bytes) / 1e6 / ms : 0.0);
  return 0;
}

int run_inspect(const std::string& file, bool nodes, const std::string& device_flag) {
  std::optional<DeviceKind> load_device;
  if (device_flag != "none") {
    Result<DeviceKind> device = device_from_flag(device_flag);
    if (!device.ok()) return fail("inspect", device.status(), 2);
    load_device = *device;
  }
  Result<format::MappedFile> mapped = format::MappedFile::open(file);
  if (!mapped.ok()) return fail("inspect", mapped.status());
  Result<format::ParsedEngine> parsed = format::parse_engine(mapped->bytes());
  if (!parsed.ok()) return fail("inspect", parsed.status().with_context(file));
  const format::EngineDesc& d = parsed->desc;
  const ir::Network& net = d.network;

  std::printf("engine %s: %zu bytes, format %u, written by %s\n", file.c_str(), mapped->bytes().size(), parsed->version,
              d.producer.c_str());
  if (const format::PayloadDigests& digests = parsed->payload_digests; digests.chunk_bytes > 0) {
    std::printf("payload checksum: %zu chunks of %.0f MiB, checked on the host's threads\n", digests.chunks.size(),
                static_cast<double>(digests.chunk_bytes) / (1 << 20));
  }
  std::printf("network: %zu nodes, %zu tensors, %zu weights (%.2f MB), max context %lld\n", net.nodes.size(),
              net.tensors.size(), net.weights.size(), static_cast<double>(parsed->payload.size()) / 1e6,
              static_cast<long long>(net.max_context));
  for (const ir::InputSpec& in : net.inputs) {
    std::printf("  input  %-12s %-4s %s\n", net.tensors[static_cast<size_t>(in.tensor)].name.c_str(),
                data_type_name(net.tensors[static_cast<size_t>(in.tensor)].dtype), in.dims.to_string().c_str());
  }
  for (int32_t out : net.outputs) {
    std::printf("  output %-12s %s\n", net.tensors[static_cast<size_t>(out)].name.c_str(),
                data_type_name(net.tensors[static_cast<size_t>(out)].dtype));
  }
  int64_t state_bytes = 0;
  for (const ir::StateSpec& s : net.states)
    state_bytes += 2 * net.caches() * s.rows * s.width * static_cast<int64_t>(data_type_size(s.dtype));
  if (net.slots > 0) {
    std::printf("state: %zu KV caches x %lld slots, %.2f MB\n", net.states.size(), static_cast<long long>(net.slots),
                static_cast<double>(state_bytes) / 1e6);
  } else {
    std::printf("state: %zu KV caches, %.2f MB\n", net.states.size(), static_cast<double>(state_bytes) / 1e6);
  }
  std::printf("profiles:\n");
  for (size_t p = 0; p < d.profiles.size(); ++p) {
    std::printf("  %zu '%s':", p, d.profiles[p].name.c_str());
    for (size_t i = 0; i < d.profiles[p].bounds.size(); ++i) {
      const InputProfileBounds& b = d.profiles[p].bounds[i];
      std::printf("  %s min %s opt %s max %s", net.tensors[static_cast<size_t>(net.inputs[i].tensor)].name.c_str(),
                  b.min.to_string().c_str(), b.opt.to_string().c_str(), b.max.to_string().c_str());
    }
    std::printf("\n");
  }
  for (const format::TacticTable& t : d.tactic_tables) {
    std::printf("tactics for %s '%s' (%s):\n", device_kind_name(t.device), t.device_name.c_str(),
                t.library_versions.c_str());
    for (size_t p = 0; p < t.profiles.size(); ++p) {
      const format::ProfileTactics& pt = t.profiles[p];
      double total_us = 0;
      for (float us : pt.time_us_per_node) total_us += us;
      std::printf("  profile %zu '%s': arena %.2f MB, sum of tuned node times %.1f us\n", p, d.profiles[p].name.c_str(),
                  static_cast<double>(pt.arena_bytes) / 1e6, total_us);
      for (size_t n = 0; n < net.nodes.size(); ++n) {
        const ir::Node& node = net.nodes[n];
        const bool first_of_kind = [&] {
          for (size_t m = 0; m < n; ++m) {
            if (net.nodes[m].kind == node.kind && pt.tactic_per_node[m] == pt.tactic_per_node[n]) return false;
          }
          return true;
        }();
        if (!nodes && !first_of_kind) continue;
        std::printf("    %-28s %-14s %-10s %9.1f us\n", node.name.c_str(), ir::op_kind_name(node.kind),
                    tactic_name(t.device, node, pt.tactic_per_node[n]).c_str(),
                    static_cast<double>(pt.time_us_per_node[n]));
      }
    }
  }
  std::printf("metadata:\n");
  for (const auto& [k, v] : d.metadata) {
    if (v.size() > 80) {
      std::printf("  %s: (%zu bytes)\n", k.c_str(), v.size());
    } else {
      std::printf("  %s: %s\n", k.c_str(), v.c_str());
    }
  }
  return load_device ? print_load_time(file, d, *load_device, mapped->bytes().size()) : 0;
}

struct InspectArgs {
  std::string file;
  bool nodes = false;
  std::string device = "auto";
};

}  // namespace

Command add_inspect_command(CLI::App& gearbox) {
  auto o = std::make_shared<InspectArgs>();
  CLI::App* app = gearbox.add_subcommand(
      "inspect",
      "what an engine file holds: profiles, tactics, memory, versions\n\n"
      "Prints the engine's profiles and bounds, bindings, state, memory, versions and metadata, and per device and "
      "profile the tactic chosen for each kind of op; then loads the engine on --device and prints the time it "
      "took.");
  app->add_option("FILE", o->file, "the engine file")->required();
  app->add_flag("--nodes", o->nodes, "the tactic of every node, not only the first of each kind");
  app->add_option("--device", o->device,
                  "time a load of the engine on cpu, cuda or auto, where it holds tactics for the device; none: do "
                  "not load")
      ->type_name("D")
      ->capture_default_str();
  return {app, [o] { return run_inspect(o->file, o->nodes, o->device); }};
}

}  // namespace gearbox::cli
