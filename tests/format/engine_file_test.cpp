// The engine file: a hand-built one-layer decoder round-trips field by field (in memory and
// through a file); every kind of damage the reader knows gets its own kDataLoss message;
// truncation at every length and every single-byte patch of the metadata fail cleanly.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#define XXH_INLINE_ALL  // the test recomputes checksums without linking libxxhash itself
#include <xxhash.h>

#include "engine_fixture.h"
#include "format/engine_file.h"
#include "ir/network.h"
#include "ir/validate.h"

namespace gearbox::format {
namespace {

// ---- byte-level helpers ----------------------------------------------------------------------

uint64_t get_u64(const Bytes& b, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}
template <typename T>
void put(Bytes& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}
// Recomputes the metadata checksum, so a patch reaches the decoder.
void reseal(Bytes& b) { put(b, 48, XXH3_64bits(b.data() + get_u64(b, 16), get_u64(b, 24))); }
// Where the bytes of the length-prefixed string `s` start (its first occurrence).
size_t find_string(const Bytes& b, const std::string& s) {
  Bytes needle(4);
  put(needle, 0, static_cast<uint32_t>(s.size()));
  needle.insert(needle.end(), s.begin(), s.end());
  const auto it = std::search(b.begin(), b.end(), needle.begin(), needle.end());
  EXPECT_NE(it, b.end()) << s;
  return static_cast<size_t>(it - b.begin()) + 4;
}
// Where the body of metadata section `id` starts (after its id and length).
size_t section_body(const Bytes& b, uint32_t id) {
  size_t at = get_u64(b, 16);
  for (uint32_t i = 1; i < id; ++i) at += 12 + get_u64(b, at + 4);
  return at + 12;
}

// Appends `n` bytes to the metadata, taken from the padding before the payload (so the
// payload does not move), optionally inside the last section, and reseals.
void grow_metadata(Bytes& b, size_t n, bool grow_last_section) {
  const size_t end = get_u64(b, 16) + get_u64(b, 24);
  ASSERT_GE(get_u64(b, 32) - end, n) << "the fixture needs padding to grow into";
  if (grow_last_section) {
    const size_t last = section_body(b, 5) - 12;
    put<uint64_t>(b, last + 4, get_u64(b, last + 4) + n);
  }
  put<uint64_t>(b, 24, get_u64(b, 24) + n);
  std::fill_n(b.begin() + static_cast<std::ptrdiff_t>(end), n, uint8_t{0x5A});
  reseal(b);
}

Status parse(const Bytes& b) { return parse_engine(b).status(); }

// ---- round trip ------------------------------------------------------------------------------

void expect_same(const EngineDesc& a, const EngineDesc& b) {
  const ir::Network& x = a.network;
  const ir::Network& y = b.network;
  ASSERT_EQ(x.tensors.size(), y.tensors.size());
  for (size_t i = 0; i < x.tensors.size(); ++i) {
    EXPECT_EQ(x.tensors[i].name, y.tensors[i].name);
    EXPECT_EQ(x.tensors[i].dtype, y.tensors[i].dtype);
  }
  ASSERT_EQ(x.weights.size(), y.weights.size());
  for (size_t i = 0; i < x.weights.size(); ++i) {
    EXPECT_EQ(x.weights[i].name, y.weights[i].name);
    EXPECT_EQ(x.weights[i].dtype, y.weights[i].dtype);
    EXPECT_EQ(x.weights[i].dims, y.weights[i].dims);
    EXPECT_EQ(x.weights[i].offset, y.weights[i].offset);
    EXPECT_EQ(x.weights[i].bytes, y.weights[i].bytes);
  }
  ASSERT_EQ(x.inputs.size(), y.inputs.size());
  for (size_t i = 0; i < x.inputs.size(); ++i) {
    EXPECT_EQ(x.inputs[i].tensor, y.inputs[i].tensor);
    EXPECT_EQ(x.inputs[i].dims, y.inputs[i].dims);
    EXPECT_EQ(x.inputs[i].dim_names, y.inputs[i].dim_names);
  }
  EXPECT_EQ(x.outputs, y.outputs);
  ASSERT_EQ(x.states.size(), y.states.size());
  for (size_t i = 0; i < x.states.size(); ++i) {
    EXPECT_EQ(x.states[i].name, y.states[i].name);
    EXPECT_EQ(x.states[i].dtype, y.states[i].dtype);
    EXPECT_EQ(x.states[i].rows, y.states[i].rows);
    EXPECT_EQ(x.states[i].width, y.states[i].width);
  }
  ASSERT_EQ(x.nodes.size(), y.nodes.size());
  for (size_t i = 0; i < x.nodes.size(); ++i) {
    EXPECT_EQ(x.nodes[i].kind, y.nodes[i].kind);
    EXPECT_EQ(x.nodes[i].name, y.nodes[i].name);
    EXPECT_EQ(x.nodes[i].inputs, y.nodes[i].inputs);
    EXPECT_EQ(x.nodes[i].outputs, y.nodes[i].outputs);
    EXPECT_EQ(x.nodes[i].weights, y.nodes[i].weights);
    EXPECT_TRUE(x.nodes[i].attrs == y.nodes[i].attrs) << "node " << i;
  }
  EXPECT_EQ(x.max_context, y.max_context);
  EXPECT_EQ(x.slots, y.slots);
  ASSERT_EQ(a.profiles.size(), b.profiles.size());
  for (size_t p = 0; p < a.profiles.size(); ++p) {
    EXPECT_EQ(a.profiles[p].name, b.profiles[p].name);
    ASSERT_EQ(a.profiles[p].bounds.size(), b.profiles[p].bounds.size());
    for (size_t i = 0; i < a.profiles[p].bounds.size(); ++i) {
      EXPECT_EQ(a.profiles[p].bounds[i].min, b.profiles[p].bounds[i].min);
      EXPECT_EQ(a.profiles[p].bounds[i].opt, b.profiles[p].bounds[i].opt);
      EXPECT_EQ(a.profiles[p].bounds[i].max, b.profiles[p].bounds[i].max);
    }
  }
  ASSERT_EQ(a.tactic_tables.size(), b.tactic_tables.size());
  for (size_t t = 0; t < a.tactic_tables.size(); ++t) {
    const TacticTable& ta = a.tactic_tables[t];
    const TacticTable& tb = b.tactic_tables[t];
    EXPECT_EQ(ta.device, tb.device);
    EXPECT_EQ(ta.device_name, tb.device_name);
    EXPECT_EQ(ta.library_versions, tb.library_versions);
    ASSERT_EQ(ta.profiles.size(), tb.profiles.size());
    for (size_t p = 0; p < ta.profiles.size(); ++p) {
      EXPECT_EQ(ta.profiles[p].tactic_per_node, tb.profiles[p].tactic_per_node);
      EXPECT_EQ(ta.profiles[p].time_us_per_node, tb.profiles[p].time_us_per_node);
      EXPECT_EQ(ta.profiles[p].arena_bytes, tb.profiles[p].arena_bytes);
    }
  }
  EXPECT_EQ(a.metadata, b.metadata);
  EXPECT_EQ(a.producer, b.producer);
}

TEST(EngineFile, TheFixtureIsValid) {
  const Engine e = tiny_decoder();
  const Status s = ir::validate_network(e.desc.network, e.payload.size());
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(EngineFile, RoundTripsEveryField) {
  const Engine e = tiny_decoder();
  const Bytes bytes = serialize(e);
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(std::memcmp(bytes.data(), kMagic, sizeof kMagic), 0);
  Result<ParsedEngine> parsed = parse_engine(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  expect_same(e.desc, parsed->desc);
  ASSERT_EQ(parsed->payload.size(), e.payload.size());
  EXPECT_TRUE(std::equal(e.payload.begin(), e.payload.end(), parsed->payload.begin()));
  // A view into the input, 64-byte aligned relative to its start.
  const auto offset = static_cast<size_t>(parsed->payload.data() - bytes.data());
  EXPECT_EQ(offset % kPayloadAlignment, 0u);
  EXPECT_EQ(offset, get_u64(bytes, 32));
  EXPECT_EQ(offset + e.payload.size(), bytes.size());
}

TEST(EngineFile, ADeferredPayloadCheckIsTheCallersWithTheSameMessage) {
  Bytes bytes = serialize(tiny_decoder());
  ASSERT_FALSE(bytes.empty());
  bytes[get_u64(bytes, 32) + 3] ^= 1;  // a payload byte
  EXPECT_EQ(parse_engine(bytes).status().code(), StatusCode::kDataLoss);
  Result<ParsedEngine> parsed = parse_engine(bytes, PayloadCheck::kDeferred);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->version, 1u);
  EXPECT_EQ(parsed->payload_digests.whole, get_u64(bytes, 56));
  EXPECT_EQ(parsed->payload_digests.chunk_bytes, 0u);
  const Status s = check_payload(parsed->payload, parsed->payload_digests);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), parse_engine(bytes).status().message());
  bytes[get_u64(bytes, 32) + 3] ^= 1;
  EXPECT_TRUE(check_payload(parsed->payload, parsed->payload_digests).ok());
}

TEST(EngineFile, SerializingIsDeterministic) { EXPECT_EQ(serialize(tiny_decoder()), serialize(tiny_decoder())); }

TEST(EngineFile, SerializeRefusesAnInvalidNetwork) {
  Engine e = tiny_decoder();
  e.desc.network.nodes[0].weights.clear();
  const Result<Bytes> bytes = serialize_engine(e.desc, e.payload);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bytes.status().message().find("node 0 'embed' (embedding): needs 1 weight"), std::string::npos)
      << bytes.status().message();
}

// No weights, no states: the payload is empty and starts (and ends) at the end of the file.
TEST(EngineFile, AnEngineWithoutWeightsRoundTrips) {
  EngineDesc desc;
  ir::Network& n = desc.network;
  n.tensors = {{"a", DataType::kF32}, {"b", DataType::kF32}, {"c", DataType::kF32}};
  n.inputs = {{0, Dims{-1, 4}, {"rows", "features"}}, {1, Dims{-1, 4}, {}}};
  n.nodes = {{OpKind::kSiluMul, "act", {0, 1}, {2}, {}, {}}};
  n.outputs = {2};
  desc.profiles = {{"any", {{Dims{1, 4}, Dims{8, 4}, Dims{64, 4}}, {Dims{1, 4}, Dims{8, 4}, Dims{64, 4}}}}};
  const Result<Bytes> bytes = serialize_engine(desc, {});
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  EXPECT_EQ(bytes->size() % kPayloadAlignment, 0u);
  EXPECT_EQ(get_u64(*bytes, 32), bytes->size());
  Result<ParsedEngine> parsed = parse_engine(*bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  expect_same(desc, parsed->desc);
  EXPECT_TRUE(parsed->payload.empty());
}

TEST(EngineFile, WritesAndReadsAFile) {
  const Engine e = tiny_decoder();
  const std::filesystem::path dir =
      std::filesystem::path(testing::TempDir()) / ("engine_file_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tiny.gbx").string();
  const Status written = write_engine_file(path, e.desc, e.payload);
  ASSERT_TRUE(written.ok()) << written.to_string();
  std::ifstream in(path, std::ios::binary);
  const Bytes bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, serialize(e));
  Result<ParsedEngine> parsed = parse_engine(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  expect_same(e.desc, parsed->desc);
  // Only the engine is left behind, no temporary file.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);

  const Status missing = write_engine_file((dir / "no/such/dir/x.gbx").string(), e.desc, e.payload);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.to_string();
  EXPECT_NE(missing.message().find("does not exist"), std::string::npos) << missing.message();

  std::filesystem::create_directories(dir / "a_directory");
  const Status onto_dir = write_engine_file((dir / "a_directory").string(), e.desc, e.payload);
  EXPECT_EQ(onto_dir.code(), StatusCode::kFailedPrecondition) << onto_dir.to_string();
  EXPECT_NE(onto_dir.message().find("a_directory"), std::string::npos) << onto_dir.message();
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 2);

  EngineDesc bad_desc = e.desc;
  bad_desc.network.max_context = 0;
  EXPECT_EQ(write_engine_file(path, bad_desc, e.payload).code(), StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

// ---- damaged files ----------------------------------------------------------------------------

struct Damage {
  const char* name;
  std::function<void(Bytes&)> apply;
  std::string expected;  // a substring of the message
};

TEST(EngineFile, EachKindOfDamageHasItsOwnMessage) {
  const Bytes good = serialize(tiny_decoder());
  ASSERT_FALSE(good.empty());
  const size_t meta = get_u64(good, 16);
  const size_t payload = get_u64(good, 32);
  ASSERT_GT(payload, meta + get_u64(good, 24)) << "the fixture needs padding before the payload";
  const size_t nodes = tiny_decoder().desc.network.nodes.size();
  const std::vector<Damage> cases = {
      {"bad magic", [](Bytes& b) { b[0] = 'X'; }, "not a gearbox engine file (bad magic)"},
      {"newer version", [](Bytes& b) { put<uint32_t>(b, 8, 7); },
       "engine format version 7 is newer than this gearbox supports (4); rebuild the engine or upgrade gearbox"},
      {"version 0", [](Bytes& b) { put<uint32_t>(b, 8, 0); }, "version 0 is invalid"},
      {"small header", [](Bytes& b) { put<uint32_t>(b, 12, 12); },
       "header_bytes 12 is smaller than the version-1 header (64)"},
      {"metadata flip", [&](Bytes& b) { b[meta + 20] ^= 0x40; }, "metadata checksum mismatch"},
      {"payload flip", [&](Bytes& b) { b[payload + 3] ^= 1; }, "payload checksum mismatch"},
      {"checksum field flip", [](Bytes& b) { b[60] ^= 1; }, "payload checksum mismatch"},
      {"misaligned payload", [](Bytes& b) { put<uint64_t>(b, 32, get_u64(b, 32) + 8); }, "not 64-byte aligned"},
      {"payload offset moved", [](Bytes& b) { put<uint64_t>(b, 32, get_u64(b, 32) + 64); },
       "is out of range: the metadata ends at byte"},
      {"metadata offset past the end", [&](Bytes& b) { put<uint64_t>(b, 16, b.size() + 100); }, "metadata offset"},
      {"metadata size huge", [](Bytes& b) { put<uint64_t>(b, 24, ~uint64_t{0} - 8); }, "metadata size"},
      {"payload size huge", [](Bytes& b) { put<uint64_t>(b, 40, ~uint64_t{0}); }, "payload size"},
      {"payload size too big", [](Bytes& b) { put<uint64_t>(b, 40, get_u64(b, 40) + 64); },
       "truncated: the header says the payload ends at byte"},
      {"trailing bytes", [](Bytes& b) { b.insert(b.end(), 5, 0); }, "5 unexpected bytes after the payload"},
      {"nonzero padding", [&](Bytes& b) { b[payload - 1] = 1; },
       "non-zero padding at byte " + std::to_string(payload - 1)},
      {"huge tensor count",
       [&](Bytes& b) {
         put<uint32_t>(b, meta + 12, 0xFFFFFFF0u);
         reseal(b);
       },
       "'tensor' at byte 76 is 4294967280, but only"},
      {"wrong section id",
       [&](Bytes& b) {
         put<uint32_t>(b, meta, 9);
         reseal(b);
       },
       "network section: expected section id 1, found 9"},
      {"section longer than the metadata",
       [&](Bytes& b) {
         put<uint64_t>(b, meta + 4, 1u << 30);
         reseal(b);
       },
       "'section body' at byte 76 needs 1073741824 bytes"},
      {"unknown dtype",
       [](Bytes& b) {
         b[find_string(b, "tokens") + 6] = 99;
         reseal(b);
       },
       "'dtype' at byte"},
      {"unknown op kind",
       [](Bytes& b) {
         put<uint32_t>(b, find_string(b, "layers.0.add1") - 8, 42);
         reseal(b);
       },
       "node 7: 'op kind' at byte"},
      {"unknown device kind",
       [](Bytes& b) {
         put<uint32_t>(b, section_body(b, 3) + 4, 5);
         reseal(b);
       },
       "is 5, not a known device kind"},
      {"string too long",
       [](Bytes& b) {
         put<uint32_t>(b, find_string(b, "x") - 4, 1u << 20);
         reseal(b);
       },
       "more than the limit of 65536"},
      {"bytes left at the end of a section", [](Bytes& b) { grow_metadata(b, 3, /*grow_last_section=*/true); },
       "engine metadata is malformed: producer section: 3 unexpected bytes at its end"},
      {"bytes after the last section", [](Bytes& b) { grow_metadata(b, 3, /*grow_last_section=*/false); },
       "engine metadata is malformed: 3 unexpected bytes after the last section"},
      {"weight misaligned (validate_network)",
       [](Bytes& b) {
         const size_t name = find_string(b, "final_norm.weight");
         const size_t offset_at = name + 17 + 1 + 4 + 8;
         put<uint64_t>(b, offset_at, get_u64(b, offset_at) + 1);
         reseal(b);
       },
       "engine metadata: weight 11 'final_norm.weight': offset"},
      {"profile opt above max",
       [](Bytes& b) {
         const size_t max_at = find_string(b, "prefill") + 7 + 4 + 40;  // name, count, min, opt
         put<int64_t>(b, max_at + 12, 8);
         reseal(b);
       },
       "engine metadata: profile 1 'prefill', input 0, dim 1: needs 1 <= min <= opt <= max, has 1 / 16 / 8"},
      {"profile widens a static extent",
       [](Bytes& b) {
         const size_t max_at = find_string(b, "prefill") + 7 + 4 + 40;  // name, count, min, opt
         put<int64_t>(b, max_at + 4, 2);
         reseal(b);
       },
       "input 0, dim 0: the input's extent is fixed at 1 but the profile allows [1, 2]"},
      {"NaN tactic time",
       [&](Bytes& b) {
         const size_t first_time = find_string(b, "gearbox-cpu-tactics v1") + 22 + 4 + 4 + 4 * nodes + 4;
         put<float>(b, first_time, std::numeric_limits<float>::quiet_NaN());
         reseal(b);
       },
       "tactic table 0 (cpu 'test-cpu', 'gearbox-cpu-tactics v1'), profile 0, node 0: the time is not a finite"},
      {"repeated metadata key",
       [](Bytes& b) {
         std::memcpy(b.data() + find_string(b, "model.bbbb"), "model.aaaa", 10);
         reseal(b);
       },
       "metadata entry 1: the key 'model.aaaa' repeats"},
  };
  for (const Damage& d : cases) {
    Bytes bytes = good;
    d.apply(bytes);
    const Status s = parse(bytes);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << d.name << ": " << s.to_string();
    EXPECT_NE(s.message().find(d.expected), std::string::npos) << d.name << ": " << s.message();
  }
}

// header_bytes lets a newer header grow: a reader skips the fields it does not know.
// The fixture as a batched network: tokens and positions [B, S], slots [B] (3 slots).
Engine tiny_batched_decoder() {
  Engine e = tiny_decoder();
  ir::Network& n = e.desc.network;
  const int32_t slots = add_tensor(n, "slots", DataType::kI64);
  n.inputs[0].dims = Dims{-1, -1};
  n.inputs[1].dims = Dims{-1, -1};
  n.inputs.push_back({slots, Dims{-1}, {"batch"}});
  n.slots = 3;
  for (ir::Node& node : n.nodes) {
    if (node.kind == OpKind::kAttention) node.inputs.push_back(slots);
  }
  const InputProfileBounds rows{Dims{1, 1}, Dims{2, 1}, Dims{3, 1}};
  const InputProfileBounds per_row{Dims{1}, Dims{2}, Dims{3}};
  for (ProfileDesc& p : e.desc.profiles) p.bounds = {rows, rows, per_row};
  return e;
}

TEST(EngineFile, OnlyABatchedNetworkIsWrittenAsVersionThree) {
  EXPECT_EQ(get_u64(serialize(tiny_decoder()), 8) & 0xFFFFFFFFu, 1u);
  const Engine e = tiny_batched_decoder();
  Bytes b = serialize(e);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(get_u64(b, 8) & 0xFFFFFFFFu, 3u);
  Result<ParsedEngine> parsed = parse_engine(b);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  expect_same(e.desc, parsed->desc);
  // The slot count closes the network section: 0 is refused by name.
  const size_t network_end = section_body(b, 1) + get_u64(b, section_body(b, 1) - 8);
  ASSERT_EQ(get_u64(b, network_end - 8), 3u);
  put<int64_t>(b, network_end - 8, 0);
  reseal(b);
  const Status s = parse(b);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("'slots'"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("a version-3 network has at least 1"), std::string::npos) << s.to_string();
}

// The one-layer decoder with its payload grown past two chunks (bytes no weight reads).
Engine decoder_of_three_chunks() {
  Engine e = tiny_decoder();
  e.payload.resize(2 * kPayloadChunkBytes + 1000, 0x5A);
  for (const size_t end : {kPayloadChunkBytes, 2 * kPayloadChunkBytes, e.payload.size()}) {
    e.payload[end - 1] = static_cast<uint8_t>(end >> 20);  // each chunk's last byte differs
  }
  return e;
}

TEST(EngineFile, APayloadOfSeveralChunksIsWrittenAsVersionFourWithADigestEach) {
  const Engine e = decoder_of_three_chunks();
  const Bytes b = serialize(e);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(get_u64(b, 8) & 0xFFFFFFFFu, 4u);
  // Section 6 after the producer: the chunk size, then one XXH3-64 per chunk; the header's
  // payload checksum is the XXH3-64 of those digests.
  const size_t body = section_body(b, 6);
  EXPECT_EQ(get_u64(b, body - 12) & 0xFFFFFFFFu, 6u);
  EXPECT_EQ(get_u64(b, body), kPayloadChunkBytes);
  ASSERT_EQ(get_u64(b, body + 8) & 0xFFFFFFFFu, 3u);
  const uint8_t* payload = b.data() + get_u64(b, 32);
  const uint64_t want[3] = {XXH3_64bits(payload, kPayloadChunkBytes),
                            XXH3_64bits(payload + kPayloadChunkBytes, kPayloadChunkBytes),
                            XXH3_64bits(payload + 2 * kPayloadChunkBytes, 1000)};
  for (size_t c = 0; c < 3; ++c) EXPECT_EQ(get_u64(b, body + 12 + 8 * c), want[c]) << c;
  EXPECT_EQ(get_u64(b, 56), XXH3_64bits(want, sizeof want));

  Result<ParsedEngine> parsed = parse_engine(b);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  expect_same(e.desc, parsed->desc);  // a network of one sequence keeps slots 0
  EXPECT_TRUE(std::equal(e.payload.begin(), e.payload.end(), parsed->payload.begin()));
  EXPECT_EQ(parsed->version, 4u);
  EXPECT_EQ(parsed->payload_digests.chunk_bytes, kPayloadChunkBytes);
  EXPECT_EQ(parsed->payload_digests.chunks, std::vector<uint64_t>(std::begin(want), std::end(want)));

  // A payload of exactly one chunk keeps the oldest version.
  Engine one = tiny_decoder();
  one.payload.resize(kPayloadChunkBytes);
  EXPECT_EQ(get_u64(serialize(one), 8) & 0xFFFFFFFFu, 1u);
}

TEST(EngineFile, AVersionFourPayloadNamesTheChunkThatIsDamaged) {
  Bytes b = serialize(decoder_of_three_chunks());
  ASSERT_FALSE(b.empty());
  const size_t payload = get_u64(b, 32);
  for (const auto& [at, want] :
       {std::pair<size_t, std::string>{kPayloadChunkBytes + 5,
                                       "in bytes 33554432 to 67108864 of the payload (chunk 1 of 3)"},
        {2 * kPayloadChunkBytes + 999, "in bytes 67108864 to 67109864 of the payload (chunk 2 of 3)"}}) {
    b[payload + at] ^= 0x40;
    const Status s = parse(b);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_EQ(s.message(),
              "payload checksum mismatch " + want + ": the weights are corrupted; copy the engine again or rebuild it");
    Result<ParsedEngine> deferred = parse_engine(b, PayloadCheck::kDeferred);
    ASSERT_TRUE(deferred.ok()) << deferred.status().to_string();
    EXPECT_EQ(check_payload(deferred->payload, deferred->payload_digests).message(), s.message());
    b[payload + at] ^= 0x40;
  }
  EXPECT_TRUE(parse(b).ok());

  // The header's checksum must be the digests' own.
  put<uint64_t>(b, 56, get_u64(b, 56) ^ 1);
  EXPECT_NE(parse(b).message().find("in the header does not match the payload digests"), std::string::npos)
      << parse(b).to_string();
  put<uint64_t>(b, 56, get_u64(b, 56) ^ 1);

  // Digests for another chunk size are refused by count before any payload is read.
  put<uint64_t>(b, section_body(b, 6), 2 * kPayloadChunkBytes);
  reseal(b);
  EXPECT_EQ(parse(b).message(),
            "engine metadata is malformed: payload digests section: 3 digests, but a payload of 67109864 bytes has "
            "2 chunks of 67108864 bytes");
  put<uint64_t>(b, section_body(b, 6), 0);
  reseal(b);
  EXPECT_NE(parse(b).message().find("'chunk_bytes'"), std::string::npos) << parse(b).to_string();
}

TEST(EngineFile, ALongerHeaderIsSkipped) {
  const Engine e = tiny_decoder();
  Bytes bytes = serialize(e);
  ASSERT_FALSE(bytes.empty());
  bytes.insert(bytes.begin() + 64, 64, 0xAB);
  put<uint32_t>(bytes, 12, 128);
  put<uint64_t>(bytes, 16, 128);
  put<uint64_t>(bytes, 32, get_u64(bytes, 32) + 64);
  Result<ParsedEngine> parsed = parse_engine(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  expect_same(e.desc, parsed->desc);
  EXPECT_TRUE(std::equal(e.payload.begin(), e.payload.end(), parsed->payload.begin()));
}

TEST(EngineFile, TruncationAtEveryLengthIsAnError) {
  const Bytes good = serialize(tiny_decoder());
  ASSERT_FALSE(good.empty());
  const uint64_t metadata_end = get_u64(good, 16) + get_u64(good, 24);
  for (size_t n = 0; n < good.size(); ++n) {
    const Status s = parse_engine(std::span(good.data(), n)).status();
    ASSERT_EQ(s.code(), StatusCode::kDataLoss) << n;
    ASSERT_NE(s.message().find("truncated"), std::string::npos) << n << ": " << s.message();
    const char* where = n < 64 ? "" : n < metadata_end ? "metadata ends at" : "payload ends at";
    ASSERT_NE(s.message().find(where), std::string::npos) << n << ": " << s.message();
  }
}

// Every metadata byte set to a few values, with the checksum recomputed: the decoder and
// the checks after it must fail cleanly or accept, never crash (ASan/UBSan builds check).
TEST(EngineFile, PatchingAnyMetadataByteNeverCrashes) {
  const Bytes good = serialize(tiny_decoder());
  ASSERT_FALSE(good.empty());
  const size_t begin = get_u64(good, 16);
  const size_t end = begin + get_u64(good, 24);
  int rejected = 0;
  for (size_t i = begin; i < end; ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0x7F}, uint8_t{0xFF}}) {
      if (good[i] == v) continue;
      Bytes bytes = good;
      bytes[i] = v;
      reseal(bytes);
      const Status s = parse(bytes);
      if (!s.ok()) {
        ++rejected;
        ASSERT_EQ(s.code(), StatusCode::kDataLoss) << i;
      }
    }
  }
  EXPECT_GT(rejected, 0);
}

// The writer runs the reader's checks: what it will not load, it does not write.
TEST(EngineFile, TheWriterRefusesWhatTheReaderWouldReject) {
  struct Case {
    const char* name;
    std::function<void(EngineDesc&)> apply;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"no profiles", [](EngineDesc& d) { d.profiles.clear(); }, "the engine has no profiles"},
      {"unnamed profile", [](EngineDesc& d) { d.profiles[1].name.clear(); }, "profile 1 has an empty name"},
      {"repeated profile name", [](EngineDesc& d) { d.profiles[1].name = "decode"; }, "the name is taken"},
      {"missing bound", [](EngineDesc& d) { d.profiles[0].bounds.pop_back(); }, "1 bounds for 2 network inputs"},
      {"bound of the wrong rank", [](EngineDesc& d) { d.profiles[0].bounds[1].opt = Dims{1}; },
       "do not all have the input's rank 2"},
      {"zero extent",
       [](EngineDesc& d) {
         d.profiles[1].bounds[0].min = Dims{1, 0};
       },
       "needs 1 <= min"},
      {"tactics for one profile", [](EngineDesc& d) { d.tactic_tables[0].profiles.pop_back(); },
       "1 entries for 2 profiles"},
      {"tactic missing", [](EngineDesc& d) { d.tactic_tables[0].profiles[1].tactic_per_node.pop_back(); },
       "profile 1: 15 tactics and 16 times for 16 nodes"},
      {"negative time", [](EngineDesc& d) { d.tactic_tables[0].profiles[0].time_us_per_node[3] = -1.0f; },
       "node 3: the time is not a finite number"},
      {"repeated table", [](EngineDesc& d) { d.tactic_tables.push_back(d.tactic_tables[0]); },
       "an earlier table is for the same device"},
      {"empty metadata key", [](EngineDesc& d) { d.metadata.emplace_back("", "x"); }, "empty key"},
      {"name too long", [](EngineDesc& d) { d.producer.assign(70000, 'p'); }, "more than the limit of 65536"},
  };
  const Engine e = tiny_decoder();
  for (const Case& c : cases) {
    EngineDesc desc = e.desc;
    c.apply(desc);
    const Result<Bytes> bytes = serialize_engine(desc, e.payload);
    ASSERT_FALSE(bytes.ok()) << c.name;
    EXPECT_EQ(bytes.status().code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(bytes.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << bytes.status().message();
  }
  // A tactic table for another device is fine, and so is a second one for the CPU with
  // other library versions.
  EngineDesc desc = e.desc;
  desc.tactic_tables.push_back(desc.tactic_tables[0]);
  desc.tactic_tables.back().device = DeviceKind::kCuda;
  desc.tactic_tables.push_back(desc.tactic_tables[0]);
  desc.tactic_tables.back().library_versions = "gearbox-cpu-tactics v2";
  const Result<Bytes> bytes = serialize_engine(desc, e.payload);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  Result<ParsedEngine> parsed = parse_engine(*bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  expect_same(desc, parsed->desc);
}

}  // namespace
}  // namespace gearbox::format
