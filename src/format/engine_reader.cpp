// parse_engine: header checks, checksums, the metadata decoder and the checks of the
// decoded description. Every failure is kDataLoss with one distinct message per kind of
// damage (docs/FORMAT.md lists them). Nothing is allocated before the count that sizes it
// has been checked against the bytes that remain.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <xxhash.h>

#include "core/check.h"
#include "format/binary_io.h"
#include "format/engine_file.h"
#include "format/payload_digests.h"
#include "format/tactic_tables.h"
#include "ir/shape_inference.h"
#include "ir/validate.h"

namespace gearbox::format {
namespace {

// Version-1 layout constants (docs/FORMAT.md); the writer has the same table.
constexpr uint32_t kMaxNameBytes = ByteReader::kDefaultMaxStringBytes;  // names, keys, versions
constexpr uint32_t kMaxValueBytes = 16u << 20;                          // metadata values
constexpr const char* kSectionNames[] = {"",         "network",  "profiles",       "tactic tables",
                                         "metadata", "producer", "payload digests"};

// Smallest encodings, for the count checks: a string or a list is at least its u32 prefix.
constexpr size_t kMinDims = 4;
constexpr size_t kMinTensor = 4 + 1;
constexpr size_t kMinWeight = 4 + 1 + kMinDims + 8 + 8;
constexpr size_t kMinInput = 4 + kMinDims + 4;
constexpr size_t kMinState = 4 + 1 + 8 + 8;
constexpr size_t kAttrBytes = size_t{10} * 4;  // version 1's; version 2 appends more
constexpr size_t kMinNode = 4 + 4 + size_t{3} * 4 + kAttrBytes;
constexpr size_t kMinProfile = 4 + 4;
constexpr size_t kMinBound = kMinDims * 3;
constexpr size_t kMinTable = 4 + 4 + 4 + 4;
constexpr size_t kMinProfileTactics = 4 + 4 + 8;
constexpr size_t kMinKeyValue = 4 + 4;

std::string str(uint64_t v) { return std::to_string(v); }
std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

uint64_t read_u64_at(std::span<const uint8_t> bytes, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}
uint32_t read_u32_at(std::span<const uint8_t> bytes, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

// ---- metadata decoder ----------------------------------------------------------------------

bool read_dims(ByteReader& r, Dims& out) {
  uint32_t rank = 0;
  if (!r.count("rank", rank, sizeof(int64_t), static_cast<uint32_t>(kMaxDims))) return false;
  int64_t extents[kMaxDims] = {};
  for (uint32_t i = 0; i < rank; ++i) {
    if (!r.i64("extent", extents[i])) return false;
  }
  out = Dims(std::span<const int64_t>(extents, rank));
  return true;
}

bool read_ids(ByteReader& r, const char* field, std::vector<int32_t>& out) {
  uint32_t n = 0;
  if (!r.count(field, n, sizeof(int32_t))) return false;
  out.resize(n);
  for (int32_t& id : out) {
    if (!r.i32(field, id)) return false;
  }
  return true;
}

bool read_dtype(ByteReader& r, DataType& out) {
  uint8_t v = 0;
  if (!r.u8("dtype", v)) return false;
  if (!data_type_valid(v)) return r.fail("dtype", "is " + str(v) + ", not a known data type");
  out = static_cast<DataType>(v);
  return true;
}

// Decodes a list: a checked count, then `read_one` per element; on failure the status
// names the element ("node 3: ...").
template <typename T, typename F>
Status read_list(ByteReader& r, const char* what, size_t min_bytes, std::vector<T>& out, F&& read_one) {
  uint32_t n = 0;
  if (!r.count(what, n, min_bytes)) return r.status();
  out.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (!read_one(out[i])) return r.status().with_context(std::string(what) + " " + str(i));
  }
  return Status::ok_status();
}

bool read_attrs(ByteReader& r, ir::OpAttrs& a, uint32_t version) {
  if (!(r.f32("eps", a.eps) && r.f32("weight_offset", a.weight_offset) && r.f32("scale", a.scale) &&
        r.f32("theta", a.theta) && r.i32("heads", a.heads) && r.i32("kv_heads", a.kv_heads) &&
        r.i32("head_dim", a.head_dim) && r.i32("window", a.window) && r.i32("state", a.state) &&
        r.i32("has_bias", a.has_bias))) {
    return false;
  }
  if (version < 2) return true;
  uint32_t ints = 0;
  if (!(r.i32("code", a.code) && r.i32("axis", a.axis) && r.i32("flags", a.flags) && r.f32("alpha", a.alpha) &&
        r.f32("beta", a.beta) && r.count("ints", ints, sizeof(int64_t), static_cast<uint32_t>(kMaxDims)))) {
    return false;
  }
  a.ints.resize(ints);
  for (int64_t& v : a.ints) {
    if (!r.i64("ints", v)) return false;
  }
  return true;
}

Status read_network(ByteReader& r, ir::Network& net, uint32_t version) {
  GEARBOX_RETURN_IF_ERROR(read_list(r, "tensor", kMinTensor, net.tensors, [&](ir::TensorInfo& t) {
    return r.string("name", t.name, kMaxNameBytes) && read_dtype(r, t.dtype);
  }));
  GEARBOX_RETURN_IF_ERROR(read_list(r, "weight", kMinWeight, net.weights, [&](ir::WeightInfo& w) {
    return r.string("name", w.name, kMaxNameBytes) && read_dtype(r, w.dtype) && read_dims(r, w.dims) &&
           r.u64("offset", w.offset) && r.u64("bytes", w.bytes);
  }));
  GEARBOX_RETURN_IF_ERROR(read_list(r, "input", kMinInput, net.inputs, [&](ir::InputSpec& in) {
    uint32_t names = 0;
    if (!r.i32("tensor", in.tensor) || !read_dims(r, in.dims) || !r.count("dim names", names, 4)) return false;
    in.dim_names.resize(names);
    for (std::string& n : in.dim_names) {
      if (!r.string("dim name", n, kMaxNameBytes)) return false;
    }
    return true;
  }));
  if (!read_ids(r, "outputs", net.outputs)) return r.status();
  GEARBOX_RETURN_IF_ERROR(read_list(r, "state", kMinState, net.states, [&](ir::StateSpec& s) {
    return r.string("name", s.name, kMaxNameBytes) && read_dtype(r, s.dtype) && r.i64("rows", s.rows) &&
           r.i64("width", s.width);
  }));
  GEARBOX_RETURN_IF_ERROR(read_list(r, "node", kMinNode, net.nodes, [&](ir::Node& n) {
    uint32_t kind = 0;
    if (!r.u32("op kind", kind)) return false;
    if (kind < 1 || kind > ir::kMaxOpKind) return r.fail("op kind", "is " + str(kind) + ", not a known op");
    if (version < 2 && kind > kMaxOpKindV1) {
      return r.fail("op kind", "is " + str(kind) + ", which format version " + str(version) + " cannot hold");
    }
    n.kind = static_cast<ir::OpKind>(kind);
    return r.string("name", n.name, kMaxNameBytes) && read_ids(r, "inputs", n.inputs) &&
           read_ids(r, "outputs", n.outputs) && read_ids(r, "weights", n.weights) && read_attrs(r, n.attrs, version);
  }));
  if (!r.i64("max_context", net.max_context)) return r.status();
  if (version >= 3) {
    if (!r.i64("slots", net.slots)) return r.status();
    // Version 3 is written only for a batched network; version 4 also for one of one
    // sequence (slots 0).
    if (net.slots < (version == 3 ? 1 : 0)) {
      r.fail("slots", "is " + str(net.slots) + "; a version-" + str(version) + " network has at least " +
                          (version == 3 ? "1" : "0"));
      return r.status();
    }
  }
  return Status::ok_status();
}

Status read_profiles(ByteReader& r, std::vector<ProfileDesc>& profiles) {
  return read_list(r, "profile", kMinProfile, profiles, [&](ProfileDesc& p) {
    uint32_t n = 0;
    if (!r.string("name", p.name, kMaxNameBytes) || !r.count("bounds", n, kMinBound)) return false;
    p.bounds.resize(n);
    for (InputProfileBounds& b : p.bounds) {
      if (!read_dims(r, b.min) || !read_dims(r, b.opt) || !read_dims(r, b.max)) return false;
    }
    return true;
  });
}

}  // namespace

Status read_tactic_tables(ByteReader& r, std::vector<TacticTable>& tables) {
  return read_list(r, "tactic table", kMinTable, tables, [&](TacticTable& t) {
    uint32_t device = 0;
    if (!r.u32("device kind", device)) return false;
    if (device > static_cast<uint32_t>(DeviceKind::kCuda)) {
      return r.fail("device kind", "is " + str(device) + ", not a known device kind");
    }
    t.device = static_cast<DeviceKind>(device);
    uint32_t n = 0;
    if (!r.string("device name", t.device_name, kMaxNameBytes) ||
        !r.string("library versions", t.library_versions, kMaxNameBytes) ||
        !r.count("profiles", n, kMinProfileTactics)) {
      return false;
    }
    t.profiles.resize(n);
    for (ProfileTactics& p : t.profiles) {
      uint32_t tactics = 0;
      uint32_t times = 0;
      if (!r.count("tactics", tactics, 4)) return false;
      p.tactic_per_node.resize(tactics);
      for (uint32_t& v : p.tactic_per_node) {
        if (!r.u32("tactic", v)) return false;
      }
      if (!r.count("times", times, 4)) return false;
      p.time_us_per_node.resize(times);
      for (float& v : p.time_us_per_node) {
        if (!r.f32("time", v)) return false;
      }
      if (!r.u64("arena_bytes", p.arena_bytes)) return false;
    }
    return true;
  });
}

namespace {

// Reads one section: id (must be `expected`), u64 length, then a body that `read_body`
// must consume exactly.
template <typename F>
Status read_section(ByteReader& r, uint64_t base, Section expected, F&& read_body) {
  const char* name = kSectionNames[static_cast<uint32_t>(expected)];
  const std::string context = std::string(name) + " section";
  uint32_t id = 0;
  uint64_t length = 0;
  std::span<const uint8_t> body;
  if (!r.u32("section id", id)) return r.status().with_context(context);
  if (id != static_cast<uint32_t>(expected)) {
    return data_loss(context + ": expected section id " + str(static_cast<uint32_t>(expected)) + ", found " + str(id));
  }
  if (!r.u64("section length", length) ||
      !r.bytes("section body", static_cast<size_t>(std::min<uint64_t>(length, SIZE_MAX)), body)) {
    return r.status().with_context(context);
  }
  ByteReader sub(body, base + (r.position() - body.size()));
  GEARBOX_RETURN_IF_ERROR(read_body(sub).with_context(context));
  if (sub.remaining() != 0) {
    return data_loss(context + ": " + str(sub.remaining()) + " unexpected bytes at its end");
  }
  return Status::ok_status();
}

Status decode_metadata(std::span<const uint8_t> bytes, uint64_t base, uint32_t version, EngineDesc& desc,
                       PayloadDigests& digests) {
  ByteReader r(bytes, base);
  GEARBOX_RETURN_IF_ERROR(
      read_section(r, base, Section::kNetwork, [&](ByteReader& s) { return read_network(s, desc.network, version); }));
  GEARBOX_RETURN_IF_ERROR(
      read_section(r, base, Section::kProfiles, [&](ByteReader& s) { return read_profiles(s, desc.profiles); }));
  GEARBOX_RETURN_IF_ERROR(read_section(r, base, Section::kTacticTables,
                                       [&](ByteReader& s) { return read_tactic_tables(s, desc.tactic_tables); }));
  GEARBOX_RETURN_IF_ERROR(read_section(r, base, Section::kMetadata, [&](ByteReader& s) {
    return read_list(s, "entry", kMinKeyValue, desc.metadata, [&](std::pair<std::string, std::string>& kv) {
      return s.string("key", kv.first, kMaxNameBytes) && s.string("value", kv.second, kMaxValueBytes);
    });
  }));
  GEARBOX_RETURN_IF_ERROR(read_section(r, base, Section::kProducer, [&](ByteReader& s) {
    return s.string("producer", desc.producer, kMaxNameBytes) ? Status::ok_status() : s.status();
  }));
  if (version >= 4) {
    GEARBOX_RETURN_IF_ERROR(read_section(r, base, Section::kPayloadDigests, [&](ByteReader& s) {
      if (!s.u64("chunk_bytes", digests.chunk_bytes)) return s.status();
      if (digests.chunk_bytes == 0) {
        s.fail("chunk_bytes", "is 0");
        return s.status();
      }
      return read_list(s, "digest", sizeof(uint64_t), digests.chunks, [&](uint64_t& d) { return s.u64("digest", d); });
    }));
  }
  if (r.remaining() != 0) return data_loss(str(r.remaining()) + " unexpected bytes after the last section");
  return Status::ok_status();
}

// ---- checks of the decoded description ------------------------------------------------------
// Messages here say what is inconsistent; parse_engine adds "engine metadata: ".

Status check_profiles(const EngineDesc& desc) {
  const std::vector<ir::InputSpec>& inputs = desc.network.inputs;
  if (desc.profiles.empty()) return data_loss("the engine has no profiles (it needs at least one)");
  std::set<std::string_view> names;
  for (size_t p = 0; p < desc.profiles.size(); ++p) {
    const ProfileDesc& profile = desc.profiles[p];
    const std::string label = "profile " + str(p) + " " + quoted(profile.name);
    if (profile.name.empty()) return data_loss("profile " + str(p) + " has an empty name");
    if (!names.insert(profile.name).second) return data_loss(label + ": the name is taken by an earlier profile");
    if (profile.bounds.size() != inputs.size()) {
      return data_loss(label + ": " + str(profile.bounds.size()) + " bounds for " + str(inputs.size()) +
                       " network inputs (one per input)");
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      const InputProfileBounds& b = profile.bounds[i];
      const Dims& spec = inputs[i].dims;
      const std::string where = label + ", input " + str(i);
      if (b.min.rank() != spec.rank() || b.opt.rank() != spec.rank() || b.max.rank() != spec.rank()) {
        return data_loss(where + ": bounds " + b.min.to_string() + " / " + b.opt.to_string() + " / " +
                         b.max.to_string() + " do not all have the input's rank " + str(spec.rank()));
      }
      for (int32_t d = 0; d < spec.rank(); ++d) {
        if (!(1 <= b.min[d] && b.min[d] <= b.opt[d] && b.opt[d] <= b.max[d])) {
          return data_loss(where + ", dim " + str(d) + ": needs 1 <= min <= opt <= max, has " +
                           std::to_string(b.min[d]) + " / " + std::to_string(b.opt[d]) + " / " +
                           std::to_string(b.max[d]));
        }
        if (spec[d] != -1 && (b.min[d] != spec[d] || b.max[d] != spec[d])) {
          return data_loss(where + ", dim " + str(d) + ": the input's extent is fixed at " + std::to_string(spec[d]) +
                           " but the profile allows [" + std::to_string(b.min[d]) + ", " + std::to_string(b.max[d]) +
                           "]");
        }
      }
    }
  }
  return Status::ok_status();
}

}  // namespace

Status check_tactic_tables(const EngineDesc& desc) {
  const size_t nodes = desc.network.nodes.size();
  std::set<std::tuple<DeviceKind, std::string_view, std::string_view>> seen;
  for (size_t t = 0; t < desc.tactic_tables.size(); ++t) {
    const TacticTable& table = desc.tactic_tables[t];
    const std::string label = "tactic table " + str(t) + " (" + device_kind_name(table.device) + " " +
                              quoted(table.device_name) + ", " + quoted(table.library_versions) + ")";
    if (!seen.emplace(table.device, table.device_name, table.library_versions).second) {
      return data_loss(label + ": an earlier table is for the same device and library versions");
    }
    if (table.profiles.size() != desc.profiles.size()) {
      return data_loss(label + ": " + str(table.profiles.size()) + " entries for " + str(desc.profiles.size()) +
                       " profiles (one per profile)");
    }
    for (size_t p = 0; p < table.profiles.size(); ++p) {
      const ProfileTactics& entry = table.profiles[p];
      const std::string where = label + ", profile " + str(p);
      if (entry.tactic_per_node.size() != nodes || entry.time_us_per_node.size() != nodes) {
        return data_loss(where + ": " + str(entry.tactic_per_node.size()) + " tactics and " +
                         str(entry.time_us_per_node.size()) + " times for " + str(nodes) +
                         " nodes (one each per node)");
      }
      for (size_t n = 0; n < nodes; ++n) {
        const float time = entry.time_us_per_node[n];
        if (!(time >= 0.0f) || !std::isfinite(time)) {
          return data_loss(where + ", node " + str(n) + ": the time is not a finite number >= 0");
        }
      }
    }
  }
  return Status::ok_status();
}

namespace {

Status check_metadata_keys(const EngineDesc& desc) {
  std::set<std::string_view> keys;
  for (size_t i = 0; i < desc.metadata.size(); ++i) {
    const std::string& key = desc.metadata[i].first;
    if (key.empty()) return data_loss("metadata entry " + str(i) + " has an empty key");
    if (!keys.insert(key).second)
      return data_loss("metadata entry " + str(i) + ": the key " + quoted(key) + " repeats");
  }
  return Status::ok_status();
}

// Weights are floating point where an op computes with them: every device reads f32, bf16
// and f16 weights there. i32, i64 and bool weights are bytes a `constant` node outputs as
// they are, and no other node may read them.
Status check_weight_dtypes(const EngineDesc& desc) {
  const ir::Network& net = desc.network;
  std::vector<bool> only_constants(net.weights.size(), true);
  for (const ir::Node& node : net.nodes) {
    if (node.kind == ir::OpKind::kConstant) continue;
    for (const int32_t w : node.weights) {
      if (w >= 0 && static_cast<size_t>(w) < only_constants.size()) only_constants[static_cast<size_t>(w)] = false;
    }
  }
  for (size_t i = 0; i < net.weights.size(); ++i) {
    const ir::WeightInfo& w = net.weights[i];
    const bool is_float = w.dtype == DataType::kF32 || w.dtype == DataType::kBF16 || w.dtype == DataType::kF16;
    if (!is_float && !only_constants[i]) {
      return data_loss("weight " + str(i) + " " + quoted(w.name) + " has dtype " + data_type_name(w.dtype) +
                       "; weights an op computes with are f32, bf16 or f16 (other dtypes only feed constant nodes)");
    }
  }
  return Status::ok_status();
}

// The runtime infers every tensor's shape at each profile's max dims, and sizes what it
// allocates (RoPE tables, KV caches, the arena) from attributes those shapes tie together
// (a RoPE node's heads * head_dim is its input's width): a profile whose shapes do not infer
// is refused here, before a device allocates from its attributes.
Status check_profile_shapes(const EngineDesc& desc) {
  for (size_t p = 0; p < desc.profiles.size(); ++p) {
    std::vector<Dims> input_max;
    for (const InputProfileBounds& b : desc.profiles[p].bounds) input_max.push_back(b.max);
    std::vector<Dims> dims;
    const Status inferred = ir::infer_shapes(desc.network, input_max, dims);
    if (!inferred.ok()) {
      return data_loss("profile " + str(p) + " " + quoted(desc.profiles[p].name) +
                       " at its max dims: " + inferred.message());
    }
  }
  return Status::ok_status();
}

Status check_desc(const EngineDesc& desc, uint64_t payload_bytes) {
  const Status network = ir::validate_network(desc.network, payload_bytes);
  if (!network.ok()) return data_loss(network.message());
  GEARBOX_RETURN_IF_ERROR(check_weight_dtypes(desc));
  GEARBOX_RETURN_IF_ERROR(check_profiles(desc));
  GEARBOX_RETURN_IF_ERROR(check_profile_shapes(desc));
  GEARBOX_RETURN_IF_ERROR(check_tactic_tables(desc));
  return check_metadata_keys(desc);
}

}  // namespace

Status check_payload(std::span<const uint8_t> payload, const PayloadDigests& digests) {
  const std::string advice = "the weights are corrupted; copy the engine again or rebuild it";
  if (digests.chunk_bytes == 0) {
    if (XXH3_64bits(payload.data(), payload.size()) != digests.whole) {
      return data_loss("payload checksum mismatch: " + advice);
    }
    return {};
  }
  if (digests.chunks.size() != chunk_count(payload.size(), digests.chunk_bytes)) {
    return data_loss("payload checksum mismatch: " + str(digests.chunks.size()) + " chunk digests for " +
                     str(chunk_count(payload.size(), digests.chunk_bytes)) + " chunks; " + advice);
  }
  const std::vector<uint64_t> got = chunk_digests(payload, digests.chunk_bytes);
  for (size_t c = 0; c < got.size(); ++c) {
    if (got[c] != digests.chunks[c]) {
      const uint64_t first = c * digests.chunk_bytes;
      const uint64_t end = std::min<uint64_t>(first + digests.chunk_bytes, payload.size());
      return data_loss("payload checksum mismatch in bytes " + str(first) + " to " + str(end) +
                       " of the payload (chunk " + str(c) + " of " + str(got.size()) + "): " + advice);
    }
  }
  return {};
}

Result<ParsedEngine> parse_engine(std::span<const uint8_t> bytes, PayloadCheck check) {
  const size_t size = bytes.size();
  // ---- fixed header ----
  if (size == 0) return data_loss("truncated: the engine is empty (0 bytes)");
  if (std::memcmp(bytes.data(), kMagic, std::min(size, sizeof kMagic)) != 0) {
    return data_loss("not a gearbox engine file (bad magic); was it built with `gearbox build`?");
  }
  if (size < 16) {
    return data_loss("truncated: " + str(size) + " bytes, shorter than the start of the engine header (16 bytes)");
  }
  const uint32_t version = read_u32_at(bytes, 8);
  const uint32_t header_bytes = read_u32_at(bytes, 12);
  if (version == 0) return data_loss("engine format version 0 is invalid: the header is corrupted");
  if (version > kFormatVersion) {
    return data_loss("engine format version " + str(version) + " is newer than this gearbox supports (" +
                     str(kFormatVersion) + "); rebuild the engine or upgrade gearbox");
  }
  if (header_bytes < kHeaderBytesV1) {
    return data_loss("header_bytes " + str(header_bytes) + " is smaller than the version-1 header (" +
                     str(kHeaderBytesV1) + "): the header is corrupted");
  }
  if (size < header_bytes) {
    return data_loss("truncated: the header is " + str(header_bytes) + " bytes but the file has " + str(size) +
                     " bytes");
  }
  const uint64_t metadata_offset = read_u64_at(bytes, 16);
  const uint64_t metadata_bytes = read_u64_at(bytes, 24);
  const uint64_t payload_offset = read_u64_at(bytes, 32);
  const uint64_t payload_bytes = read_u64_at(bytes, 40);
  const uint64_t metadata_xxh3 = read_u64_at(bytes, 48);
  const uint64_t payload_xxh3 = read_u64_at(bytes, 56);

  // ---- section bounds (header fields are not checksummed: check each against the others) ----
  if (metadata_offset != header_bytes) {
    return data_loss("metadata offset " + str(metadata_offset) + " is out of range: the metadata must start right " +
                     "after the " + str(header_bytes) + "-byte header; the header is corrupted");
  }
  if (metadata_bytes > UINT64_MAX - metadata_offset - kPayloadAlignment) {
    return data_loss("metadata size " + str(metadata_bytes) + " is out of range: the header is corrupted");
  }
  const uint64_t metadata_end = metadata_offset + metadata_bytes;
  if (payload_offset % kPayloadAlignment != 0) {
    return data_loss("payload offset " + str(payload_offset) + " is not 64-byte aligned: the header is corrupted");
  }
  const uint64_t expected_payload_offset =
      (metadata_end + kPayloadAlignment - 1) / kPayloadAlignment * kPayloadAlignment;
  if (payload_offset != expected_payload_offset) {
    return data_loss("payload offset " + str(payload_offset) + " is out of range: the metadata ends at byte " +
                     str(metadata_end) + ", so the payload must start at byte " + str(expected_payload_offset) +
                     "; the header is corrupted");
  }
  if (metadata_end > size) {
    return data_loss("truncated: the header says the metadata ends at byte " + str(metadata_end) +
                     " but the file has " + str(size) + " bytes; copy the engine again or rebuild it");
  }
  if (payload_bytes > UINT64_MAX - payload_offset) {
    return data_loss("payload size " + str(payload_bytes) + " is out of range: the header is corrupted");
  }
  const uint64_t payload_end = payload_offset + payload_bytes;
  if (payload_end > size) {
    return data_loss("truncated: the header says the payload ends at byte " + str(payload_end) + " but the file has " +
                     str(size) + " bytes; copy the engine again or rebuild it");
  }
  if (payload_end < size) {
    return data_loss(str(size - payload_end) +
                     " unexpected bytes after the payload (the header says the file ends at " + "byte " +
                     str(payload_end) + ")");
  }
  for (uint64_t i = metadata_end; i < payload_offset; ++i) {
    if (bytes[i] != 0)
      return data_loss("non-zero padding at byte " + str(i) + " before the payload: the file is corrupted");
  }

  // ---- checksums ----
  const std::span<const uint8_t> metadata = bytes.subspan(metadata_offset, metadata_bytes);
  const std::span<const uint8_t> payload = bytes.subspan(payload_offset, payload_bytes);
  if (XXH3_64bits(metadata.data(), metadata.size()) != metadata_xxh3) {
    return data_loss("metadata checksum mismatch: the file is corrupted; copy the engine again or rebuild it");
  }

  // ---- metadata (checksummed above), and the payload against its digests ----
  ParsedEngine parsed;
  PayloadDigests& digests = parsed.payload_digests;
  const Status decoded = decode_metadata(metadata, metadata_offset, version, parsed.desc, digests);
  if (!decoded.ok()) return data_loss("engine metadata is malformed: " + decoded.message());
  if (version >= 4) {
    if (digests.chunks.size() != chunk_count(payload_bytes, digests.chunk_bytes)) {
      return data_loss("engine metadata is malformed: payload digests section: " + str(digests.chunks.size()) +
                       " digests, but a payload of " + str(payload_bytes) + " bytes has " +
                       str(chunk_count(payload_bytes, digests.chunk_bytes)) + " chunks of " + str(digests.chunk_bytes) +
                       " bytes");
    }
    if (digest_of_digests(digests.chunks) != payload_xxh3) {
      return data_loss("payload checksum " + str(payload_xxh3) +
                       " in the header does not match the payload digests: the header is corrupted");
    }
  } else {
    digests.whole = payload_xxh3;
  }
  if (check == PayloadCheck::kVerify) GEARBOX_RETURN_IF_ERROR(check_payload(payload, digests));
  const Status valid = check_desc(parsed.desc, payload_bytes);
  if (!valid.ok()) return valid.with_context("engine metadata");
  parsed.payload = payload;
  parsed.version = version;
  return parsed;
}

}  // namespace gearbox::format
