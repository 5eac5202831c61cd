// serialize_engine and write_engine_file. The byte layout is docs/FORMAT.md; the reader
// (engine_reader.cpp) decodes exactly what this encodes, and serialize_engine parses its
// own output before returning it, so a file it writes always loads.
#include <cstdint>
#include <string>
#include <vector>

#include <xxhash.h>

#include "core/check.h"
#include "core/output_file.h"
#include "format/binary_io.h"
#include "format/engine_file.h"
#include "format/payload_digests.h"
#include "format/tactic_tables.h"
#include "ir/validate.h"

namespace gearbox::format {
namespace {

void write_dims(ByteWriter& w, const Dims& d) {
  w.count(static_cast<size_t>(d.rank()));
  for (int64_t e : d.extents()) w.i64(e);
}

void write_ids(ByteWriter& w, const std::vector<int32_t>& ids) {
  w.count(ids.size());
  for (int32_t id : ids) w.i32(id);
}

// The oldest format version that holds `net` with a payload of `payload_bytes`: 4 for a
// payload of more than one chunk (its chunk digests); 3 for a batched network (its slot
// count); else 1 unless a node is a generic op or sets one of version 2's attrs, so that an
// engine of version-1 ops stays readable by a gearbox that reads only version 1.
uint32_t format_version_for(const ir::Network& net, uint64_t payload_bytes) {
  if (payload_bytes > kPayloadChunkBytes) return 4;
  if (net.slots != 0) return 3;
  const ir::OpAttrs defaults;
  for (const ir::Node& n : net.nodes) {
    const ir::OpAttrs& a = n.attrs;
    if (static_cast<uint32_t>(n.kind) > kMaxOpKindV1 || a.code != defaults.code || a.axis != defaults.axis ||
        a.flags != defaults.flags || a.alpha != defaults.alpha || a.beta != defaults.beta || !a.ints.empty()) {
      return 2;
    }
  }
  return 1;
}

void write_attrs(ByteWriter& w, const ir::OpAttrs& a, uint32_t version) {
  w.f32(a.eps);
  w.f32(a.weight_offset);
  w.f32(a.scale);
  w.f32(a.theta);
  w.i32(a.heads);
  w.i32(a.kv_heads);
  w.i32(a.head_dim);
  w.i32(a.window);
  w.i32(a.state);
  w.i32(a.has_bias);
  if (version < 2) return;
  w.i32(a.code);
  w.i32(a.axis);
  w.i32(a.flags);
  w.f32(a.alpha);
  w.f32(a.beta);
  w.count(a.ints.size());
  for (int64_t v : a.ints) w.i64(v);
}

void write_network(ByteWriter& w, const ir::Network& net, uint32_t version) {
  w.count(net.tensors.size());
  for (const ir::TensorInfo& t : net.tensors) {
    w.string(t.name);
    w.u8(static_cast<uint8_t>(t.dtype));
  }
  w.count(net.weights.size());
  for (const ir::WeightInfo& wt : net.weights) {
    w.string(wt.name);
    w.u8(static_cast<uint8_t>(wt.dtype));
    write_dims(w, wt.dims);
    w.u64(wt.offset);
    w.u64(wt.bytes);
  }
  w.count(net.inputs.size());
  for (const ir::InputSpec& in : net.inputs) {
    w.i32(in.tensor);
    write_dims(w, in.dims);
    w.count(in.dim_names.size());
    for (const std::string& n : in.dim_names) w.string(n);
  }
  write_ids(w, net.outputs);
  w.count(net.states.size());
  for (const ir::StateSpec& s : net.states) {
    w.string(s.name);
    w.u8(static_cast<uint8_t>(s.dtype));
    w.i64(s.rows);
    w.i64(s.width);
  }
  w.count(net.nodes.size());
  for (const ir::Node& n : net.nodes) {
    w.u32(static_cast<uint32_t>(n.kind));
    w.string(n.name);
    write_ids(w, n.inputs);
    write_ids(w, n.outputs);
    write_ids(w, n.weights);
    write_attrs(w, n.attrs, version);
  }
  w.i64(net.max_context);
  if (version >= 3) w.i64(net.slots);
}

void write_profiles(ByteWriter& w, const std::vector<ProfileDesc>& profiles) {
  w.count(profiles.size());
  for (const ProfileDesc& p : profiles) {
    w.string(p.name);
    w.count(p.bounds.size());
    for (const InputProfileBounds& b : p.bounds) {
      write_dims(w, b.min);
      write_dims(w, b.opt);
      write_dims(w, b.max);
    }
  }
}

}  // namespace

void write_tactic_tables(ByteWriter& w, const std::vector<TacticTable>& tables) {
  w.count(tables.size());
  for (const TacticTable& t : tables) {
    w.u32(static_cast<uint32_t>(t.device));
    w.string(t.device_name);
    w.string(t.library_versions);
    w.count(t.profiles.size());
    for (const ProfileTactics& p : t.profiles) {
      w.count(p.tactic_per_node.size());
      for (uint32_t tactic : p.tactic_per_node) w.u32(tactic);
      w.count(p.time_us_per_node.size());
      for (float time : p.time_us_per_node) w.f32(time);
      w.u64(p.arena_bytes);
    }
  }
}

namespace {

// Section id, u64 body length (patched once the body is written), body.
template <typename F>
void write_section(ByteWriter& w, Section id, F&& body) {
  w.u32(static_cast<uint32_t>(id));
  const size_t length_at = w.size();
  w.u64(0);
  body();
  w.patch_u64(length_at, w.size() - length_at - sizeof(uint64_t));
}

ByteWriter encode_metadata(const EngineDesc& desc, uint32_t version, std::span<const uint64_t> digests) {
  ByteWriter w;
  write_section(w, Section::kNetwork, [&] { write_network(w, desc.network, version); });
  write_section(w, Section::kProfiles, [&] { write_profiles(w, desc.profiles); });
  write_section(w, Section::kTacticTables, [&] { write_tactic_tables(w, desc.tactic_tables); });
  write_section(w, Section::kMetadata, [&] {
    w.count(desc.metadata.size());
    for (const auto& [key, value] : desc.metadata) {
      w.string(key);
      w.string(value);
    }
  });
  write_section(w, Section::kProducer, [&] { w.string(desc.producer); });
  if (version >= 4) {
    write_section(w, Section::kPayloadDigests, [&] {
      w.u64(kPayloadChunkBytes);
      w.count(digests.size());
      for (uint64_t d : digests) w.u64(d);
    });
  }
  return w;
}

}  // namespace

Result<std::vector<uint8_t>> serialize_engine(const EngineDesc& desc, std::span<const uint8_t> payload) {
  const Status valid = ir::validate_network(desc.network, payload.size());
  if (!valid.ok()) return invalid_argument("cannot serialize the engine: " + valid.message());

  const uint32_t version = format_version_for(desc.network, payload.size());
  const std::vector<uint64_t> digests =
      version >= 4 ? chunk_digests(payload, kPayloadChunkBytes) : std::vector<uint64_t>{};
  const ByteWriter metadata = encode_metadata(desc, version, digests);
  if (!metadata.ok()) {
    return invalid_argument("cannot serialize the engine: a string or a list is longer than 4 GiB");
  }
  const uint64_t metadata_offset = kHeaderBytesV1;
  const uint64_t metadata_bytes = metadata.size();
  const uint64_t metadata_end = metadata_offset + metadata_bytes;
  const uint64_t payload_offset = (metadata_end + kPayloadAlignment - 1) / kPayloadAlignment * kPayloadAlignment;

  ByteWriter file;
  file.raw(std::span(reinterpret_cast<const uint8_t*>(kMagic), sizeof kMagic));
  file.u32(version);
  file.u32(kHeaderBytesV1);
  file.u64(metadata_offset);
  file.u64(metadata_bytes);
  file.u64(payload_offset);
  file.u64(payload.size());
  file.u64(XXH3_64bits(metadata.bytes().data(), metadata.bytes().size()));
  file.u64(version >= 4 ? digest_of_digests(digests) : XXH3_64bits(payload.data(), payload.size()));
  GEARBOX_CHECK(file.size() == kHeaderBytesV1);
  file.raw(metadata.bytes());
  file.pad_to(kPayloadAlignment);
  GEARBOX_CHECK(file.size() == payload_offset);
  file.raw(payload);
  std::vector<uint8_t> bytes = std::move(file).take();

  // The reader's checks beyond validate_network (profiles, tactic tables, metadata keys,
  // string limits) are the single definition of a loadable engine: apply them here too.
  Result<ParsedEngine> parsed = parse_engine(bytes);
  if (!parsed.ok()) {
    return invalid_argument("cannot serialize the engine: it would not load: " + parsed.status().message());
  }
  return bytes;
}

Status write_file_atomically(const std::string& path, std::span<const uint8_t> bytes, const std::string& what) {
  return write_output_file(path, bytes, what);
}

Status write_engine_file(const std::string& path, const EngineDesc& desc, std::span<const uint8_t> payload) {
  Result<std::vector<uint8_t>> bytes = serialize_engine(desc, payload);
  if (!bytes.ok()) return bytes.status();
  return write_file_atomically(path, *bytes, "engine");
}

}  // namespace gearbox::format
