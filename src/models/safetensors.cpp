#include "models/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <set>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/bounded_json.h"
#include "core/check.h"

namespace gearbox::models {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// Bits per element of every dtype safetensors defines; 0 for a string it does not define.
uint32_t dtype_bits(std::string_view name) {
  struct Entry {
    std::string_view name;
    uint32_t bits;
  };
  static constexpr Entry kTable[] = {
      {"BOOL", 8}, {"U8", 8},   {"I8", 8},    {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},
      {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32},    {"U32", 32},    {"F32", 32},    {"F64", 64},
      {"I64", 64}, {"U64", 64}, {"C64", 64},  {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6},
  };
  for (const Entry& e : kTable) {
    if (e.name == name) return e.bits;
  }
  return 0;
}

bool supported_dtype(std::string_view name, DataType& out) {
  if (name == "F32") {
    out = DataType::kF32;
  } else if (name == "BF16") {
    out = DataType::kBF16;
  } else if (name == "F16") {
    out = DataType::kF16;
  } else {
    return false;
  }
  return true;
}

std::string range(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// A non-negative JSON integer that fits int64 (safetensors writes shapes and offsets as such).
bool read_count(const Json& value, uint64_t& out) {
  if (!value.is_number_unsigned()) return false;
  out = value.get<uint64_t>();
  return out <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

struct Span {
  uint64_t begin;
  uint64_t end;
  const std::string* name;
};

// One header entry -> a tensor (bytes not yet attached) and its data range.
Status parse_entry(const std::string& file_name, const std::string& name, const Json& entry, uint64_t data_size,
                   SafetensorsTensor& tensor, Span& span) {
  const std::string where = file_name + ": tensor '" + name + "'";
  if (!entry.is_object()) return data_loss(where + " is not a JSON object");

  const auto dtype = entry.find("dtype");
  if (dtype == entry.end()) return data_loss(where + " has no dtype");
  if (!dtype->is_string()) return data_loss(where + " has a dtype that is not a string");
  tensor.dtype_name = *dtype->get_ptr<const std::string*>();
  tensor.supported = supported_dtype(tensor.dtype_name, tensor.dtype);

  const auto shape = entry.find("shape");
  if (shape == entry.end()) return data_loss(where + " has no shape");
  if (!shape->is_array()) return data_loss(where + " has a shape that is not a list");
  if (shape->size() > static_cast<size_t>(kMaxDims)) {
    return data_loss(where + " has rank " + std::to_string(shape->size()) + "; gearbox reads up to " +
                     std::to_string(kMaxDims));
  }
  std::vector<int64_t> extents;
  uint64_t volume = 1;
  bool volume_overflows = false;
  for (size_t i = 0; i < shape->size(); ++i) {
    uint64_t extent = 0;
    if (!read_count((*shape)[i], extent)) {
      return data_loss(where + " has shape entry " + std::to_string(i) + " that is not a non-negative integer");
    }
    extents.push_back(static_cast<int64_t>(extent));
    volume_overflows = volume_overflows || __builtin_mul_overflow(volume, extent, &volume);
  }
  tensor.dims = Dims(std::span<const int64_t>(extents));

  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end()) return data_loss(where + " has no data_offsets");
  uint64_t begin = 0;
  uint64_t end = 0;
  if (!offsets->is_array() || offsets->size() != 2 || !read_count((*offsets)[0], begin) ||
      !read_count((*offsets)[1], end)) {
    return data_loss(where + " has data_offsets that are not [begin, end] of non-negative integers");
  }
  if (begin > end) return data_loss(where + " data " + range(begin, end) + " is reversed");
  if (end > data_size) {
    return data_loss(where + " data " + range(begin, end) + " ends past the data section (" +
                     std::to_string(data_size) + " bytes)");
  }

  // Sizes are checked for every dtype safetensors defines, read by gearbox or not; a dtype
  // string it does not define has no known size and is reported when asked for (get()).
  const uint64_t bits = dtype_bits(tensor.dtype_name);
  if (bits != 0) {
    uint64_t total_bits = 0;
    if (volume_overflows || __builtin_mul_overflow(volume, bits, &total_bits)) {
      return data_loss(where + " shape " + tensor.dims.to_string() + " is too large");
    }
    if (total_bits % 8 != 0) {
      return data_loss(where + " " + tensor.dtype_name + " " + tensor.dims.to_string() +
                       " is not a whole number of bytes");
    }
    if (end - begin != total_bits / 8) {
      return data_loss(where + " data " + range(begin, end) + " holds " + std::to_string(end - begin) + " bytes, but " +
                       tensor.dtype_name + " " + tensor.dims.to_string() + " needs " + std::to_string(total_bits / 8));
    }
  }
  tensor.name = name;
  tensor.file = file_name;
  span = {begin, end, nullptr};
  return {};
}

Status check_metadata(const std::string& file_name, const Json& metadata) {
  bool ok = metadata.is_object();
  if (ok) {
    for (const auto& item : metadata.items()) ok = ok && item.value().is_string();
  }
  if (!ok) return data_loss(file_name + ": __metadata__ must map strings to strings");
  return {};
}

// Tensors may share no byte. Empty tensors take no bytes and overlap nothing.
Status check_overlaps(const std::string& file_name, std::vector<Span>& spans) {
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  const Span* furthest = nullptr;  // the span reaching furthest so far
  for (const Span& s : spans) {
    if (s.begin == s.end) continue;
    if (furthest != nullptr && s.begin < furthest->end) {
      return data_loss(file_name + ": tensors '" + *furthest->name + "' " + range(furthest->begin, furthest->end) +
                       " and '" + *s.name + "' " + range(s.begin, s.end) + " overlap");
    }
    if (furthest == nullptr || s.end > furthest->end) furthest = &s;
  }
  return {};
}

Result<std::vector<SafetensorsTensor>> parse_file(std::span<const uint8_t> file, const std::string& file_name) {
  if (file.size() < 8) {
    return data_loss(file_name + ": file is " + std::to_string(file.size()) +
                     " bytes, too short for the 8-byte header length");
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | file[static_cast<size_t>(i)];
  if (header_bytes > internal::kMaxSafetensorsHeaderBytes) {
    return data_loss(file_name + ": header length " + std::to_string(header_bytes) + " exceeds the 100 MiB limit");
  }
  if (header_bytes > file.size() - 8) {
    return data_loss(file_name + ": header length " + std::to_string(header_bytes) +
                     " runs past the end of the file (" + std::to_string(file.size()) + " bytes)");
  }
  const auto* text = reinterpret_cast<const char*>(file.data() + 8);

  // nlohmann keeps the last of two equal keys; a duplicate tensor name is damage, so
  // catch it while parsing.
  std::unordered_set<std::string> seen;
  std::string duplicate;
  const Json::parser_callback_t watch_keys = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && duplicate.empty() && parsed.is_string()) {
      const std::string& key = *parsed.get_ptr<const std::string*>();
      if (!seen.insert(key).second) duplicate = key;
    }
    return true;
  };
  bool too_deep = false;
  const Json header = parse_json_bounded(std::string_view(text, header_bytes), too_deep, watch_keys);
  if (too_deep) return data_loss(file_name + ": header: " + json_too_deep_message());
  if (header.is_discarded()) return data_loss(file_name + ": header is not valid JSON");
  if (!header.is_object()) return data_loss(file_name + ": header is not a JSON object");
  if (!duplicate.empty()) return data_loss(file_name + ": tensor '" + duplicate + "' appears twice in the header");

  const uint64_t data_size = file.size() - 8 - header_bytes;
  const uint8_t* data = file.data() + 8 + header_bytes;
  std::vector<SafetensorsTensor> tensors;
  std::vector<Span> spans;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      GEARBOX_RETURN_IF_ERROR(check_metadata(file_name, item.value()));
      continue;
    }
    SafetensorsTensor tensor;
    Span span{};
    GEARBOX_RETURN_IF_ERROR(parse_entry(file_name, item.key(), item.value(), data_size, tensor, span));
    tensor.bytes = std::span<const uint8_t>(data + span.begin, span.end - span.begin);
    tensors.push_back(std::move(tensor));
    spans.push_back(span);
  }
  for (size_t i = 0; i < spans.size(); ++i) spans[i].name = &tensors[i].name;
  GEARBOX_RETURN_IF_ERROR(check_overlaps(file_name, spans));
  return tensors;
}

bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name.find('\0') == std::string::npos;
}

// "<index> maps tensor '<name>' to <shard>", the start of several index messages.
std::string index_maps(const std::string& index_file, const std::string& name, const std::string& shard) {
  return index_file + " maps tensor '" + name + "' to " + shard;
}

Result<std::map<std::string, std::string>> parse_index(std::string_view text, const std::string& file_name) {
  bool too_deep = false;
  const Json index = parse_json_bounded(text, too_deep);
  if (too_deep) return data_loss(file_name + ": " + json_too_deep_message());
  if (index.is_discarded()) return data_loss(file_name + " is not valid JSON");
  if (!index.is_object()) return data_loss(file_name + " is not a JSON object");
  const auto weight_map = index.find("weight_map");
  if (weight_map == index.end()) return data_loss(file_name + " has no weight_map");
  if (!weight_map->is_object()) return data_loss(file_name + ": weight_map is not a JSON object");
  if (weight_map->empty()) return data_loss(file_name + ": weight_map lists no tensors");
  std::map<std::string, std::string> out;
  for (const auto& item : weight_map->items()) {
    if (!item.value().is_string()) {
      return data_loss(index_maps(file_name, item.key(), "something other than a file name"));
    }
    const std::string& shard = *item.value().get_ptr<const std::string*>();
    if (!plain_file_name(shard)) {
      return data_loss(index_maps(file_name, item.key(), "'" + shard) +
                       "', which is not a file name in the checkpoint directory");
    }
    out.emplace(item.key(), shard);
  }
  return out;
}

// The checkpoint's parts while it is being opened.
struct Parts {
  std::vector<format::MappedFile> files;
  std::map<std::string, SafetensorsTensor, std::less<>> tensors;
};

// Maps and validates `path`, and adds its tensors (named `file_name` in messages).
Status add_file(const fs::path& path, const std::string& file_name, Parts& parts) {
  Result<format::MappedFile> mapped = format::MappedFile::open(path.string(), InputKind::kSafetensors);
  if (!mapped.ok()) return mapped.status();
  Result<std::vector<SafetensorsTensor>> tensors = parse_file(mapped->bytes(), file_name);
  if (!tensors.ok()) return tensors.status();
  parts.files.push_back(std::move(*mapped));  // the mapping stays where it is: the views stay valid
  for (SafetensorsTensor& t : *tensors) {
    const auto it = parts.tensors.find(t.name);
    if (it != parts.tensors.end()) {
      return data_loss("tensor '" + t.name + "' is in both " + it->second.file + " and " + file_name);
    }
    std::string name = t.name;
    parts.tensors.emplace(std::move(name), std::move(t));
  }
  return {};
}

Status add_shards(const fs::path& dir, Parts& parts) {
  const fs::path index_path = dir / kIndexFile;
  Result<format::MappedFile> index_file = format::MappedFile::open(index_path.string(), InputKind::kSafetensorsIndex);
  if (!index_file.ok()) return index_file.status();
  const std::span<const uint8_t> bytes = index_file->bytes();
  Result<std::map<std::string, std::string>> index =
      parse_index(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), kIndexFile);
  if (!index.ok()) return index.status();

  std::set<std::string> shards;
  for (const auto& [name, shard] : *index) shards.insert(shard);
  for (const std::string& shard : shards) {
    const fs::path shard_path = dir / shard;
    std::error_code ec;
    if (!fs::exists(shard_path, ec)) {
      return not_found(std::string(kIndexFile) + " names " + shard + ", which is missing from " + dir.string());
    }
    GEARBOX_RETURN_IF_ERROR(add_file(shard_path, shard, parts));
  }
  for (const auto& [name, shard] : *index) {
    const auto it = parts.tensors.find(name);
    if (it == parts.tensors.end()) {
      return data_loss(index_maps(kIndexFile, name, shard) + ", which has no such tensor");
    }
    if (it->second.file != shard) {
      return data_loss(index_maps(kIndexFile, name, shard).append(", but it is in ").append(it->second.file));
    }
  }
  return {};
}

// The status of `p`; kNotFound when there is nothing there, another error (a symbolic link
// loop, a permission) named as it is rather than as a missing file.
Result<fs::file_status> status_of(const fs::path& p) {
  std::error_code ec;
  const fs::file_status status = fs::status(p, ec);
  if (ec == std::errc::no_such_file_or_directory || (!ec && !fs::exists(status))) {
    return not_found("no such file or directory: " + p.string());
  }
  if (ec) return failed_precondition("cannot open " + p.string() + ": " + ec.message());
  return status;
}

Status open_parts(const std::string& path, Parts& parts) {
  const fs::path p(path);
  Result<fs::file_status> status = status_of(p);
  if (!status.ok()) return status.status();
  if (!fs::is_directory(*status)) return add_file(p, p.filename().string(), parts);
  for (const char* name : {kSingleFile, kIndexFile}) {
    Result<fs::file_status> entry = status_of(p / name);
    if (entry.ok())
      return std::string_view(name) == kSingleFile ? add_file(p / name, name, parts) : add_shards(p, parts);
    if (entry.status().code() != StatusCode::kNotFound) return entry.status();
  }
  return not_found(path + " holds neither " + kSingleFile + " nor " + kIndexFile);
}

}  // namespace

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::string& path) {
  try {
    Parts parts;
    GEARBOX_RETURN_IF_ERROR(open_parts(path, parts));
    SafetensorsCheckpoint checkpoint;
    checkpoint.files_ = std::move(parts.files);
    checkpoint.tensors_ = std::move(parts.tensors);
    return checkpoint;
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory while reading the checkpoint " + path);
  } catch (const std::exception& e) {
    return internal_error("reading the checkpoint " + path + ": " + e.what());
  }
}

const SafetensorsTensor* SafetensorsCheckpoint::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<const SafetensorsTensor*> SafetensorsCheckpoint::get(std::string_view name) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) return not_found("checkpoint has no tensor '" + std::string(name) + "'");
  if (t->supported) return t;
  const std::string where = t->file + ": tensor '" + t->name + "'";
  if (dtype_bits(t->dtype_name) == 0) return data_loss(where + " has unknown dtype '" + t->dtype_name + "'");
  return unimplemented(where + " has dtype " + t->dtype_name + "; gearbox reads F32, BF16 and F16");
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& item : tensors_) out.push_back(item.first);
  return out;
}

}  // namespace gearbox::models

namespace gearbox::internal {

Result<std::vector<models::SafetensorsTensor>> parse_safetensors(std::span<const uint8_t> file,
                                                                 const std::string& file_name) {
  try {
    return models::parse_file(file, file_name);
  } catch (const std::bad_alloc&) {
    return resource_exhausted(file_name + ": out of memory while reading the header");
  } catch (const std::exception& e) {
    return internal_error(file_name + ": " + e.what());
  }
}

Result<std::map<std::string, std::string>> parse_safetensors_index(std::string_view text,
                                                                   const std::string& file_name) {
  try {
    return models::parse_index(text, file_name);
  } catch (const std::bad_alloc&) {
    return resource_exhausted(file_name + ": out of memory while reading the index");
  } catch (const std::exception& e) {
    return internal_error(file_name + ": " + e.what());
  }
}

}  // namespace gearbox::internal
