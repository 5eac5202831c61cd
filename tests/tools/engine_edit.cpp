// Makes the edited engines and tactic caches of the hostile-input suite: one field changed,
// checksums recomputed, as a careless tool or a hostile user would (tests/tools/hostile_input.py).
//
//   engine_edit weight-dtype IN OUT WEIGHT_NAME DTYPE   the weight's dtype byte set to DTYPE (i32, ...)
//   engine_edit tactic IN OUT PROFILE NODE TACTIC       one node's tactic in the CPU table (by name)
//   engine_edit arena IN OUT PROFILE BYTES              one profile's recorded arena bytes
//   engine_edit no-tactics IN OUT                       the engine without tactic tables
//   engine_edit metadata IN OUT KEY FILE                metadata KEY set to FILE's bytes
//   engine_edit cache ENGINE OUT PROFILE NODE TACTIC    a tactic cache for ENGINE (tuned tables of
//                                                       IN's CPU table) with one tactic changed
// Exits 0 when the file is written, 1 otherwise.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "format/binary_io.h"
#include "format/engine_file.h"
#include "format/tactic_cache.h"
#include "format/tactic_tables.h"
#include "gearbox/data_type.h"
#include "runtime/device_backend.h"

namespace {

using gearbox::format::EngineDesc;
using Bytes = std::vector<uint8_t>;

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "engine_edit: %s\n", message.c_str());
  std::exit(1);
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot read " + path);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) die("cannot write " + path);
}

uint64_t u64_at(const Bytes& b, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

// Recomputes the metadata and payload checksums of a version-1 header (an engine of one
// payload digest: the small engines the tests edit, not a version-4 one).
void repair_checksums(Bytes& b) {
  uint32_t version = 0;
  std::memcpy(&version, b.data() + 8, sizeof version);
  if (version >= 4) die("a version-4 engine's payload digests are not repaired here");
  const uint64_t metadata_offset = u64_at(b, 16), metadata_bytes = u64_at(b, 24);
  const uint64_t payload_offset = u64_at(b, 32), payload_bytes = u64_at(b, 40);
  const uint64_t m = XXH3_64bits(b.data() + metadata_offset, metadata_bytes);
  const uint64_t p = XXH3_64bits(b.data() + payload_offset, payload_bytes);
  std::memcpy(b.data() + 48, &m, sizeof m);
  std::memcpy(b.data() + 56, &p, sizeof p);
}

gearbox::format::ParsedEngine parse(const Bytes& bytes) {
  gearbox::Result<gearbox::format::ParsedEngine> parsed = gearbox::format::parse_engine(bytes);
  if (!parsed.ok()) die("the input engine does not parse: " + parsed.status().message());
  return std::move(*parsed);
}

size_t find_bytes(const Bytes& haystack, const Bytes& needle, size_t from = 0) {
  for (size_t i = from; i + needle.size() <= haystack.size(); ++i) {
    if (std::memcmp(haystack.data() + i, needle.data(), needle.size()) == 0) return i;
  }
  die("the bytes to edit are not in the engine");
}

Bytes encoded_tables(const std::vector<gearbox::format::TacticTable>& tables) {
  gearbox::format::ByteWriter w;
  gearbox::format::write_tactic_tables(w, tables);
  return std::move(w).take();
}

size_t profile_index(const EngineDesc& d, const std::string& name) {
  for (size_t p = 0; p < d.profiles.size(); ++p) {
    if (d.profiles[p].name == name) return p;
  }
  die("no profile " + name);
}

size_t node_index(const EngineDesc& d, const std::string& name) {
  for (size_t n = 0; n < d.network.nodes.size(); ++n) {
    if (d.network.nodes[n].name == name) return n;
  }
  die("no node " + name);
}

gearbox::format::TacticTable& cpu_table(EngineDesc& d) {
  for (gearbox::format::TacticTable& t : d.tactic_tables) {
    if (t.device == gearbox::DeviceKind::kCpu) return t;
  }
  die("the engine has no CPU tactic table");
}

uint32_t tactic_id(const EngineDesc& d, size_t node, const std::string& name) {
  auto backend = gearbox::internal::device_backend(gearbox::DeviceKind::kCpu);
  if (!backend.ok()) die("no CPU device");
  for (const gearbox::internal::TacticInfo& t : (*backend)->tactics(d.network.nodes[node])) {
    if (t.name == name) return t.id;
  }
  die("the CPU device has no tactic " + name + " for node " + d.network.nodes[node].name);
}

// Replaces the engine's encoded tactic tables (same length: only fixed-size fields change).
void replace_tables(Bytes& bytes, const EngineDesc& before, const EngineDesc& after) {
  const Bytes old_tables = encoded_tables(before.tactic_tables);
  const Bytes new_tables = encoded_tables(after.tactic_tables);
  if (old_tables.size() != new_tables.size()) die("the edit changes the tables' length");
  const size_t at = find_bytes(bytes, old_tables, 64);
  std::memcpy(bytes.data() + at, new_tables.data(), new_tables.size());
  repair_checksums(bytes);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() < 3) die("usage: see the comment at the top of engine_edit.cpp");
  const std::string& what = a[0];
  Bytes bytes = read_file(a[1]);
  const gearbox::format::ParsedEngine parsed = parse(bytes);
  if (what == "weight-dtype" && a.size() == 5) {
    int dtype = -1;
    for (const gearbox::DataType t : {gearbox::DataType::kF32, gearbox::DataType::kBF16, gearbox::DataType::kF16,
                                      gearbox::DataType::kI32, gearbox::DataType::kI64}) {
      if (a[4] == gearbox::data_type_name(t)) dtype = static_cast<int>(t);
    }
    if (dtype < 0) die("unknown dtype " + a[4]);
    Bytes needle(4);
    const auto length = static_cast<uint32_t>(a[3].size());
    std::memcpy(needle.data(), &length, 4);
    needle.insert(needle.end(), a[3].begin(), a[3].end());
    const size_t at = find_bytes(bytes, needle, 64) + needle.size();
    bytes[at] = static_cast<uint8_t>(dtype);
    repair_checksums(bytes);
  } else if (what == "tactic" && a.size() == 6) {
    EngineDesc edited = parsed.desc;
    const size_t node = node_index(edited, a[4]);
    cpu_table(edited).profiles[profile_index(edited, a[3])].tactic_per_node[node] = tactic_id(edited, node, a[5]);
    replace_tables(bytes, parsed.desc, edited);
  } else if (what == "arena" && a.size() == 5) {
    EngineDesc edited = parsed.desc;
    cpu_table(edited).profiles[profile_index(edited, a[3])].arena_bytes = std::stoull(a[4]);
    replace_tables(bytes, parsed.desc, edited);
  } else if (what == "no-tactics" && a.size() == 3) {
    EngineDesc edited = parsed.desc;
    edited.tactic_tables.clear();
    gearbox::Result<Bytes> out = gearbox::format::serialize_engine(edited, parsed.payload);
    if (!out.ok()) die(out.status().message());
    bytes = std::move(*out);
  } else if (what == "metadata" && a.size() == 5) {
    EngineDesc edited = parsed.desc;
    const Bytes value = read_file(a[4]);
    bool found = false;
    for (auto& [key, v] : edited.metadata) {
      if (key == a[3]) {
        v.assign(value.begin(), value.end());
        found = true;
      }
    }
    if (!found) edited.metadata.emplace_back(a[3], std::string(value.begin(), value.end()));
    gearbox::Result<Bytes> out = gearbox::format::serialize_engine(edited, parsed.payload);
    if (!out.ok()) die(out.status().message());
    bytes = std::move(*out);
  } else if (what == "cache" && a.size() == 6) {
    // a[1] is the engine the cache is for (no tactic tables); the tables come from the CPU
    // table the same engine had before, rebuilt here from the engine's profiles.
    EngineDesc edited = parsed.desc;
    gearbox::format::TacticTable table;
    table.device = gearbox::DeviceKind::kCpu;
    auto backend = gearbox::internal::device_backend(gearbox::DeviceKind::kCpu);
    if (!backend.ok()) die("no CPU device");
    table.device_name = (*backend)->device_name();
    table.library_versions = (*backend)->library_versions();
    for (size_t p = 0; p < edited.profiles.size(); ++p) {
      gearbox::format::ProfileTactics pt;
      for (const gearbox::ir::Node& node : edited.network.nodes) {
        pt.tactic_per_node.push_back((*backend)->tactics(node).front().id);
        pt.time_us_per_node.push_back(1.0f);
      }
      table.profiles.push_back(std::move(pt));
    }
    const size_t node = node_index(edited, a[4]);
    table.profiles[profile_index(edited, a[3])].tactic_per_node[node] = tactic_id(edited, node, a[5]);
    bytes = gearbox::format::encode_tactic_cache(gearbox::format::engine_identity(bytes), {table});
  } else {
    die("unknown edit or wrong argument count: " + what);
  }
  write_file(a[2], bytes);
  return 0;
}
