// Reading tokenizer.json: every field is checked, and one this reader does not implement
// is an error naming it, never ignored.
#include <initializer_list>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/bounded_json.h"
#include "core/check.h"
#include "models/json_describe.h"
#include "tokenizer_json_internal.h"

namespace gearbox::cli::hf_json {
namespace {

using Json = nlohmann::json;
using models::describe_json;

Status malformed(const std::string& field, const std::string& what) {
  return data_loss("tokenizer.json: " + field + " " + what);
}

Status unsupported(const std::string& field, const std::string& value, const std::string& hint) {
  return unimplemented("tokenizer.json: " + field + " " + value + " is not supported" +
                       (hint.empty() ? "" : " (" + hint + ")"));
}

// One JSON object of the file and where it is ("normalizer.normalizers[1]"), for messages.
class Node {
 public:
  Node(const Json& json, std::string path) : json_(json), path_(std::move(path)) {}

  std::string field(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  const std::string& path() const { return path_; }

  // An object whose keys are all in `known`: any other field is one this reader does not
  // implement, and is reported rather than ignored.
  Status expect_object(std::initializer_list<std::string_view> known) const {
    if (!json_.is_object()) return malformed(path_, "must be an object, got " + describe_json(json_));
    for (const auto& [key, value] : json_.items()) {
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        return unimplemented("tokenizer.json: the field " + field(key) +
                             " is not supported (gearbox does not implement it)");
      }
    }
    return {};
  }
  // The value of `key`, or null when absent or null.
  const Json* find(std::string_view key) const {
    const auto it = json_.find(key);
    return it == json_.end() || it->is_null() ? nullptr : &*it;
  }
  Result<std::string> string(std::string_view key) const {
    const Json* v = find(key);
    if (v == nullptr) return malformed(field(key), "is missing");
    if (!v->is_string()) return malformed(field(key), "must be a string, got " + describe_json(*v));
    return *v->get_ptr<const std::string*>();
  }
  // A string of exactly one character (Metaspace's replacement, Strip's content).
  Result<std::string> character(std::string_view key) const {
    Result<std::string> s = string(key);
    if (!s.ok()) return s;
    if (s->empty() || count_chars(*s) != 1) return malformed(field(key), "must be one character, got '" + *s + "'");
    return s;
  }
  Status boolean(std::string_view key, bool& out) const {
    const Json* v = find(key);
    if (v == nullptr) return {};
    if (!v->is_boolean()) return malformed(field(key), "must be true or false, got " + describe_json(*v));
    out = v->get<bool>();
    return {};
  }
  Status unsigned_integer(std::string_view key, uint64_t& out) const {
    const Json* v = find(key);
    if (v == nullptr) return malformed(field(key), "is missing");
    if (!v->is_number_unsigned()) return malformed(field(key), "must be a whole number >= 0, got " + describe_json(*v));
    out = v->get<uint64_t>();
    return {};
  }
  // {"String": s} ({"Regex": r} is not implemented).
  Result<std::string> string_pattern(std::string_view key) const {
    const Json* v = find(key);
    if (v == nullptr) return malformed(field(key), "is missing");
    const Node pattern(*v, field(key));
    if (v->is_object() && v->size() == 1 && v->contains("Regex")) {
      return unsupported(pattern.field("Regex"), "(a regular expression)", "only String patterns are implemented");
    }
    GEARBOX_RETURN_IF_ERROR(pattern.expect_object({"String"}));
    return pattern.string("String");
  }
  Result<std::string> type() const {
    if (!json_.is_object()) return malformed(path_, "must be an object, got " + describe_json(json_));
    return string("type");
  }

 private:
  const Json& json_;
  std::string path_;
};

constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();

// Whether v is a token id, and then which.
bool token_id(const Json& v, int64_t& out) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > static_cast<uint64_t>(kMaxId)) return false;
  out = static_cast<int64_t>(v.get<uint64_t>());
  return true;
}

Status bad_id(const std::string& field, const Json& v) {
  return malformed(field, "must be a token id in [0, 2^31), got " + describe_json(v));
}

Status read_id(const Json& v, const std::string& field, int64_t& out) {
  return token_id(v, out) ? Status() : bad_id(field, v);
}

// model.vocab and model.merges, the bulk of a tokenizer.json (Llama 3's: 128k tokens and 280k
// merges), as the parser meets them: kept out of the parsed document, where a map node per
// token and a list per merge would cost most of the load. What is left in their place is an
// empty object and an empty list, so the document's checks still see their kinds.
struct BpeEntries {
  bool has_vocab = false;                           // model.vocab is an object: its entries
  std::vector<std::pair<std::string, Json>> vocab;  // token, its id as written
  bool has_merges = false;                          // model.merges is a list: its entries
  std::vector<Json> merges;                         // "left right" or ["left", "right"] as written
};

// The parser callback (parse_json_bounded's `inner`) that moves the entries of the root's
// model.vocab and model.merges into `entries`. Depths are nlohmann's: the root's keys are at
// 1, model's at 2, the entries at 3. A later duplicate key replaces an earlier one, as in
// the document. A malformed entry that is an object or a list is kept by kind only (error
// messages name containers by kind).
nlohmann::json::parser_callback_t collect_bpe_entries(BpeEntries& entries) {
  enum class In { kNone, kVocab, kMerges };
  struct State {
    std::string root_key, model_key, token;
    bool in_model = false;
    In in = In::kNone;
  };
  auto state = std::make_shared<State>();
  return [state, &entries](int depth, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    State& st = *state;
    if (depth == 3 && st.in == In::kVocab) {
      switch (event) {
        case E::key: st.token = std::move(*parsed.get_ptr<std::string*>()); return false;
        case E::value: entries.vocab.emplace_back(std::move(st.token), std::move(parsed)); return false;
        case E::object_start: entries.vocab.emplace_back(std::move(st.token), Json::object()); return false;
        case E::array_start: entries.vocab.emplace_back(std::move(st.token), Json::array()); return false;
        default: return true;
      }
    }
    if (depth == 3 && st.in == In::kMerges) {
      switch (event) {
        case E::value:
        case E::array_end: entries.merges.push_back(std::move(parsed)); return false;
        case E::object_start: entries.merges.emplace_back(Json::object()); return false;
        default: return true;  // a list's start: its strings are built, then taken at its end
      }
    }
    if (depth == 1) {
      if (event == E::key) st.root_key = *parsed.get_ptr<const std::string*>();
      if (event == E::key && st.root_key == "model") entries = BpeEntries();
      if (event == E::object_start) st.in_model = st.root_key == "model";
      if (event == E::object_end) st.in_model = false;
    } else if (depth == 2 && st.in_model) {
      if (event == E::key) {
        st.model_key = *parsed.get_ptr<const std::string*>();
        if (st.model_key == "vocab") entries.has_vocab = false, entries.vocab.clear();
        if (st.model_key == "merges") entries.has_merges = false, entries.merges.clear();
      } else if (event == E::object_start && st.model_key == "vocab") {
        st.in = In::kVocab;
        entries.has_vocab = true;
      } else if (event == E::array_start && st.model_key == "merges") {
        st.in = In::kMerges;
        entries.has_merges = true;
      } else if (event == E::object_end || event == E::array_end) {
        st.in = In::kNone;
      }
    }
    return true;
  };
}

Result<PrependScheme> read_prepend_scheme(const Node& node) {
  // prepend_scheme, or (files before tokenizers 0.19) add_prefix_space: false means never.
  PrependScheme scheme = PrependScheme::kAlways;
  const Json* v = node.find("prepend_scheme");
  if (v != nullptr) {
    if (!v->is_string()) return malformed(node.field("prepend_scheme"), "must be a string, got " + describe_json(*v));
    const std::string& s = *v->get_ptr<const std::string*>();
    if (s == "always") {
      scheme = PrependScheme::kAlways;
    } else if (s == "first") {
      scheme = PrependScheme::kFirst;
    } else if (s == "never") {
      scheme = PrependScheme::kNever;
    } else {
      return unsupported(node.field("prepend_scheme"), describe_json(*v), "known: always, first, never");
    }
  }
  bool add_prefix_space = true;
  GEARBOX_RETURN_IF_ERROR(node.boolean("add_prefix_space", add_prefix_space));
  if (!add_prefix_space) {
    if (v != nullptr && scheme != PrependScheme::kNever) {
      return malformed(node.field("add_prefix_space"), "false contradicts prepend_scheme " + describe_json(*v));
    }
    scheme = PrependScheme::kNever;
  }
  return scheme;
}

// A Metaspace's replacement; str_rep (older files) must repeat it.
Result<std::string> read_replacement(const Node& node) {
  Result<std::string> replacement = node.character("replacement");
  if (!replacement.ok()) return replacement;
  if (node.find("str_rep") != nullptr) {
    Result<std::string> rep = node.string("str_rep");
    if (!rep.ok()) return rep.status();
    if (*rep != *replacement) {
      return unsupported(node.field("str_rep"), "'" + *rep + "'",
                         "it must equal the replacement '" + *replacement + "'");
    }
  }
  return replacement;
}

// A "Sequence" step: reads each entry of the list under `key` with `read`, in order.
template <typename Step>
Status read_sequence(const Node& node, const char* key, Status (*read)(const Node&, std::vector<Step>&),
                     std::vector<Step>& steps) {
  GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", key}));
  const Json* list = node.find(key);
  if (list == nullptr || !list->is_array()) return malformed(node.field(key), "must be a list");
  for (size_t i = 0; i < list->size(); ++i) {
    GEARBOX_RETURN_IF_ERROR(read(Node((*list)[i], node.field(key) + "[" + std::to_string(i) + "]"), steps));
  }
  return {};
}

/// A "Metaspace" step (pre-tokenizer or decoder): its replacement, prepend scheme and split.
Status read_metaspace(const Node& node, std::string& replacement, PrependScheme& scheme, bool& split) {
  GEARBOX_RETURN_IF_ERROR(
      node.expect_object({"type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"}));
  Result<std::string> r = read_replacement(node);
  if (!r.ok()) return r.status();
  Result<PrependScheme> s = read_prepend_scheme(node);
  if (!s.ok()) return s.status();
  GEARBOX_RETURN_IF_ERROR(node.boolean("split", split));
  replacement = std::move(*r);
  scheme = *s;
  return {};
}

/// A "Replace" step (normalizer or decoder): a non-empty string pattern and its replacement.
Status read_replace(const Node& node, std::string& pattern, std::string& content) {
  GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", "pattern", "content"}));
  Result<std::string> p = node.string_pattern("pattern");
  if (!p.ok()) return p.status();
  if (p->empty()) return unsupported(node.field("pattern.String"), "''", "an empty pattern");
  Result<std::string> c = node.string("content");
  if (!c.ok()) return c.status();
  pattern = std::move(*p);
  content = std::move(*c);
  return {};
}

/// A "ByteLevel" step (pre-tokenizer, decoder or post-processor): add_prefix_space, and
/// GPT-2's regex when use_regex (the default). trim_offsets changes offsets only, not ids.
Status read_byte_level(const Node& node, bool& add_prefix_space, std::shared_ptr<const Regex>& regex) {
  GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", "add_prefix_space", "trim_offsets", "use_regex"}));
  add_prefix_space = true;
  bool trim_offsets = true;
  bool use_regex = true;
  GEARBOX_RETURN_IF_ERROR(node.boolean("add_prefix_space", add_prefix_space));
  GEARBOX_RETURN_IF_ERROR(node.boolean("trim_offsets", trim_offsets));
  GEARBOX_RETURN_IF_ERROR(node.boolean("use_regex", use_regex));
  regex = use_regex ? gpt2_regex() : nullptr;
  return {};
}

Status read_normalizer(const Node& node, std::vector<NormalizerStep>& steps) {
  Result<std::string> type = node.type();
  if (!type.ok()) return type.status();
  if (*type == "Sequence") return read_sequence(node, "normalizers", &read_normalizer, steps);
  NormalizerStep step;
  if (*type == "Replace") {
    GEARBOX_RETURN_IF_ERROR(read_replace(node, step.pattern, step.content));
    step.kind = NormalizerKind::kReplace;
  } else if (*type == "Prepend") {
    GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", "prepend"}));
    Result<std::string> prepend = node.string("prepend");
    if (!prepend.ok()) return prepend.status();
    step.kind = NormalizerKind::kPrepend;
    step.content = std::move(*prepend);
  } else if (*type == "NFC") {
    GEARBOX_RETURN_IF_ERROR(node.expect_object({"type"}));
    step.kind = NormalizerKind::kNfc;
  } else {
    return unsupported(node.field("type"), "'" + *type + "'",
                       "gearbox implements the normalizers Sequence, Replace, Prepend and NFC");
  }
  steps.push_back(std::move(step));
  return {};
}

Status read_pre_tokenizer(const Node& node, std::vector<PreTokenizerStep>& steps) {
  Result<std::string> type = node.type();
  if (!type.ok()) return type.status();
  if (*type == "Sequence") return read_sequence(node, "pretokenizers", &read_pre_tokenizer, steps);
  PreTokenizerStep step;
  if (*type == "Metaspace") {
    GEARBOX_RETURN_IF_ERROR(read_metaspace(node, step.pattern, step.prepend, step.split));
    step.kind = PreTokenizerKind::kMetaspace;
  } else if (*type == "ByteLevel") {
    GEARBOX_RETURN_IF_ERROR(read_byte_level(node, step.add_prefix_space, step.regex));
    step.kind = PreTokenizerKind::kByteLevel;
  } else if (*type == "Split") {
    GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", "pattern", "behavior", "invert"}));
    if (const Json* p = node.find("pattern");
        p != nullptr && p->is_object() && p->size() == 1 && p->contains("Regex")) {
      const Node regex(*p, node.field("pattern"));
      Result<std::string> source = regex.string("Regex");
      if (!source.ok()) return source.status();
      Result<std::shared_ptr<const Regex>> compiled = Regex::compile(*source, regex.field("Regex"));
      if (!compiled.ok()) return compiled.status();
      step.regex = std::move(*compiled);
    } else {
      Result<std::string> pattern = node.string_pattern("pattern");
      if (!pattern.ok()) return pattern.status();
      step.pattern = std::move(*pattern);
    }
    Result<std::string> behavior = node.string("behavior");
    if (!behavior.ok()) return behavior.status();
    static const std::pair<std::string_view, SplitBehavior> kBehaviors[] = {
        {"Removed", SplitBehavior::kRemoved},
        {"Isolated", SplitBehavior::kIsolated},
        {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
        {"MergedWithNext", SplitBehavior::kMergedWithNext},
        {"Contiguous", SplitBehavior::kContiguous}};
    const auto* known =
        std::find_if(std::begin(kBehaviors), std::end(kBehaviors), [&](const auto& b) { return b.first == *behavior; });
    if (known == std::end(kBehaviors)) {
      return unsupported(node.field("behavior"), "'" + *behavior + "'",
                         "known: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
    }
    GEARBOX_RETURN_IF_ERROR(node.boolean("invert", step.invert));
    step.kind = PreTokenizerKind::kSplit;
    step.behavior = known->second;
  } else {
    return unsupported(node.field("type"), "'" + *type + "'",
                       "gearbox implements the pre-tokenizers Sequence, Metaspace, Split and ByteLevel");
  }
  steps.push_back(std::move(step));
  return {};
}

Status read_decoder(const Node& node, std::vector<DecoderStep>& steps) {
  Result<std::string> type = node.type();
  if (!type.ok()) return type.status();
  if (*type == "Sequence") return read_sequence(node, "decoders", &read_decoder, steps);
  DecoderStep step;
  if (*type == "Replace") {
    GEARBOX_RETURN_IF_ERROR(read_replace(node, step.pattern, step.content));
    step.kind = DecoderKind::kReplace;
  } else if (*type == "ByteFallback") {
    GEARBOX_RETURN_IF_ERROR(node.expect_object({"type"}));
    step.kind = DecoderKind::kByteFallback;
  } else if (*type == "Fuse") {
    GEARBOX_RETURN_IF_ERROR(node.expect_object({"type"}));
    step.kind = DecoderKind::kFuse;
  } else if (*type == "Strip") {
    GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", "content", "start", "stop"}));
    Result<std::string> content = node.character("content");
    if (!content.ok()) return content.status();
    step.kind = DecoderKind::kStrip;
    step.pattern = std::move(*content);
    GEARBOX_RETURN_IF_ERROR(node.unsigned_integer("start", step.start));
    GEARBOX_RETURN_IF_ERROR(node.unsigned_integer("stop", step.stop));
  } else if (*type == "Metaspace") {
    PrependScheme scheme = PrependScheme::kAlways;
    bool split = true;  // decoding does not depend on it
    GEARBOX_RETURN_IF_ERROR(read_metaspace(node, step.pattern, scheme, split));
    step.kind = DecoderKind::kMetaspace;
    step.drop_first = scheme != PrependScheme::kNever;
  } else if (*type == "ByteLevel") {
    // Decoding maps characters back to bytes whatever the options say.
    bool add_prefix_space = false;
    std::shared_ptr<const Regex> regex;
    GEARBOX_RETURN_IF_ERROR(read_byte_level(node, add_prefix_space, regex));
    step.kind = DecoderKind::kByteLevel;
  } else {
    return unsupported(
        node.field("type"), "'" + *type + "'",
        "gearbox implements the decoders Sequence, Replace, ByteFallback, Fuse, Strip, Metaspace and ByteLevel");
  }
  steps.push_back(std::move(step));
  return {};
}

// The post-processor adds special tokens around a sequence. gearbox's callers add the BOS
// themselves (`gearbox build` stores the template's as "tokenizer.bos", which `gearbox
// generate` puts before a text prompt), so only the templates that add nothing else are
// accepted; ByteLevel changes offsets only.
Status read_post_processor(const Node& node, int64_t& bos_id) {
  Result<std::string> type = node.type();
  if (!type.ok()) return type.status();
  if (*type == "Sequence") {
    GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", "processors"}));
    const Json* list = node.find("processors");
    if (list == nullptr || !list->is_array()) return malformed(node.field("processors"), "must be a list");
    for (size_t i = 0; i < list->size(); ++i) {
      GEARBOX_RETURN_IF_ERROR(
          read_post_processor(Node((*list)[i], node.field("processors") + "[" + std::to_string(i) + "]"), bos_id));
    }
    return {};
  }
  if (*type == "ByteLevel") {
    bool add_prefix_space = false;
    std::shared_ptr<const Regex> regex;
    return read_byte_level(node, add_prefix_space, regex);
  }
  if (*type != "TemplateProcessing") {
    return unsupported(node.field("type"), "'" + *type + "'",
                       "gearbox implements TemplateProcessing with [BOS] $A, ByteLevel and Sequence");
  }
  GEARBOX_RETURN_IF_ERROR(node.expect_object({"type", "single", "pair", "special_tokens"}));
  const Json* single = node.find("single");
  if (single == nullptr || !single->is_array()) return malformed(node.field("single"), "must be a list");
  const auto is_sequence_a = [](const Json& piece) {
    return piece.is_object() && piece.contains("Sequence") && piece["Sequence"].is_object() &&
           piece["Sequence"].value("id", "") == "A";
  };
  const bool with_bos = single->size() == 2 && (*single)[0].is_object() && (*single)[0].contains("SpecialToken") &&
                        (*single)[0]["SpecialToken"].is_object() && is_sequence_a((*single)[1]);
  if (!with_bos && !(single->size() == 1 && is_sequence_a((*single)[0]))) {
    return unsupported(node.field("single"), single->dump(),
                       "gearbox adds the BOS itself: only the templates [BOS] $A and $A are implemented");
  }
  if (!with_bos) return {};
  if (bos_id >= 0) return unsupported(node.path(), "(a second template)", "one TemplateProcessing at most");
  // The template names the token; special_tokens gives its id.
  const Json& name = (*single)[0]["SpecialToken"]["id"];
  const Json* specials = node.find("special_tokens");
  const std::string field = node.field("special_tokens") + "[" + name.dump() + "]";
  if (!name.is_string() || specials == nullptr || !specials->is_object() ||
      !specials->contains(name.get<std::string>())) {
    return malformed(field, "is missing: the template names a special token it does not define");
  }
  const Json& entry = (*specials)[name.get<std::string>()];
  if (!entry.is_object() || !entry.contains("ids") || !entry["ids"].is_array() || entry["ids"].size() != 1) {
    return unsupported(field, describe_json(entry), "a template token must be one id");
  }
  return read_id(entry["ids"][0], field + ".ids[0]", bos_id);
}

// model.vocab's entries into bpe.vocab and bpe.tokens. A token written twice keeps its last
// entry, as a JSON object's key does. Every token once with a valid and unique id (any
// tokenizer.json `tokenizers` writes) takes one pass; otherwise a second pass finds each
// token's last entry first and checks only those, so the outcome is the document's.
Status read_vocab(const Node& node, BpeEntries& entries, Bpe& bpe) {
  const auto fast = [&] {
    for (const auto& [token, value] : entries.vocab) {
      int64_t id = 0;
      if (!token_id(value, id) || !bpe.vocab.try_emplace(token, id).second ||
          !bpe.tokens.try_emplace(id, token).second) {
        return false;
      }
    }
    return true;
  };
  if (fast()) return {};
  bpe.vocab.clear();
  bpe.tokens.clear();
  for (size_t i = 0; i < entries.vocab.size(); ++i) bpe.vocab[entries.vocab[i].first] = static_cast<int64_t>(i);
  for (size_t i = 0; i < entries.vocab.size(); ++i) {
    const auto& [token, value] = entries.vocab[i];
    const auto last = bpe.vocab.find(token);
    if (last->second != static_cast<int64_t>(i)) continue;
    int64_t id = 0;
    if (!token_id(value, id)) return bad_id(node.field("vocab") + "['" + token + "']", value);
    last->second = id;
    if (const auto [it, inserted] = bpe.tokens.try_emplace(id, token); !inserted) {
      return malformed(node.field("vocab"),
                       "gives the id " + std::to_string(id) + " to both '" + it->second + "' and '" + token + "'");
    }
  }
  return {};
}

Status read_model(const Node& node, BpeEntries& entries, Bpe& bpe) {
  Result<std::string> type = node.type();
  if (!type.ok()) return type.status();
  if (*type != "BPE") {
    return unsupported(node.field("type"), "'" + *type + "'",
                       "gearbox implements BPE, the model of Gemma, Llama-2 and Mistral tokenizers");
  }
  GEARBOX_RETURN_IF_ERROR(
      node.expect_object({"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                          "byte_fallback", "ignore_merges", "vocab", "merges"}));
  if (const Json* dropout = node.find("dropout"); dropout != nullptr) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      return unsupported(node.field("dropout"), describe_json(*dropout), "only null: encoding must be deterministic");
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const Json* v = node.find(key); v != nullptr && !(v->is_string() && v->get_ref<const std::string&>().empty())) {
      return unsupported(node.field(key), describe_json(*v), "only null is implemented");
    }
  }
  if (node.find("unk_token") != nullptr) {
    Result<std::string> unk = node.string("unk_token");
    if (!unk.ok()) return unk.status();
    bpe.unk_token = std::move(*unk);
  }
  GEARBOX_RETURN_IF_ERROR(node.boolean("fuse_unk", bpe.fuse_unk));
  GEARBOX_RETURN_IF_ERROR(node.boolean("byte_fallback", bpe.byte_fallback));
  GEARBOX_RETURN_IF_ERROR(node.boolean("ignore_merges", bpe.ignore_merges));

  const Json* vocab = node.find("vocab");
  if (vocab == nullptr || !vocab->is_object()) return malformed(node.field("vocab"), "must be an object {token: id}");
  GEARBOX_CHECK_MSG(entries.has_vocab && vocab->empty(), "model.vocab's entries are collected while parsing");
  bpe.vocab.reserve(entries.vocab.size());
  bpe.tokens.reserve(entries.vocab.size());
  GEARBOX_RETURN_IF_ERROR(read_vocab(node, entries, bpe));
  entries.vocab = {};
  for (size_t b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const std::string name = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
    const auto it = bpe.vocab.find(name);
    bpe.byte_ids[b] = it == bpe.vocab.end() ? -1 : it->second;
  }

  const Json* merges = node.find("merges");
  if (merges == nullptr || !merges->is_array()) return malformed(node.field("merges"), "must be a list");
  GEARBOX_CHECK_MSG(entries.has_merges && merges->empty(), "model.merges' entries are collected while parsing");
  const size_t count = entries.merges.size();
  if (count > std::numeric_limits<uint32_t>::max()) return malformed(node.field("merges"), "has too many entries");
  bpe.merges.reserve(count);
  std::string merged;
  for (size_t rank = 0; rank < count; ++rank) {
    const Json& m = entries.merges[rank];
    const auto field = [&] { return node.field("merges") + "[" + std::to_string(rank) + "]"; };
    std::string_view left;
    std::string_view right;
    if (m.is_string()) {  // "left right"
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == kNpos) return malformed(field(), "must be two tokens separated by a space, got " + describe_json(m));
      left = std::string_view(s).substr(0, space);
      right = std::string_view(s).substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["left", "right"]
      left = m[0].get_ref<const std::string&>();
      right = m[1].get_ref<const std::string&>();
    } else {
      return malformed(field(), "must be \"left right\" or [\"left\", \"right\"], got " + describe_json(m));
    }
    merged.assign(left).append(right);
    const auto l = bpe.vocab.find(left);
    const auto r = bpe.vocab.find(right);
    const auto to = bpe.vocab.find(std::string_view(merged));
    for (const auto& [it, token] : {std::pair(l, left), std::pair(r, right), std::pair(to, std::string_view(merged))}) {
      if (it == bpe.vocab.end()) {
        return malformed(field(), "names '" + std::string(token) + "', which is not in model.vocab");
      }
    }
    // Later entries replace earlier ones, as in `tokenizers` (a HashMap collected in order).
    bpe.merges[Bpe::pair_key(l->second, r->second)] = {static_cast<uint32_t>(rank), to->second};
  }
  entries.merges = {};
  return {};
}

Status read_added_tokens(const Json* list, HfTokenizer::Impl& t) {
  if (list == nullptr) return {};
  if (!list->is_array()) return malformed("added_tokens", "must be a list");
  // The ids `tokenizers` gives (AddedVocabulary::add_tokens): the vocabulary's own for a
  // token in it, else the next one after the model's. A file that says otherwise would
  // tokenize differently there than it claims, so it is refused.
  const auto model_size = static_cast<int64_t>(t.bpe.vocab.size());
  int64_t max_added = -1;
  for (size_t i = 0; i < list->size(); ++i) {
    const Node node((*list)[i], "added_tokens[" + std::to_string(i) + "]");
    GEARBOX_RETURN_IF_ERROR(
        node.expect_object({"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}));
    AddedToken token;
    Result<std::string> content = node.string("content");
    if (!content.ok()) return content.status();
    token.content = std::move(*content);
    const Json* id = node.find("id");
    if (id == nullptr) return malformed(node.field("id"), "is missing");
    GEARBOX_RETURN_IF_ERROR(read_id(*id, node.field("id"), token.id));
    bool single_word = false;
    GEARBOX_RETURN_IF_ERROR(node.boolean("single_word", single_word));
    if (single_word) return unsupported(node.field("single_word"), "true", "tokens matched only as whole words");
    GEARBOX_RETURN_IF_ERROR(node.boolean("lstrip", token.lstrip));
    GEARBOX_RETURN_IF_ERROR(node.boolean("rstrip", token.rstrip));
    GEARBOX_RETURN_IF_ERROR(node.boolean("special", token.special));
    token.normalized = !token.special;  // the default, as in AddedToken::from
    GEARBOX_RETURN_IF_ERROR(node.boolean("normalized", token.normalized));
    if (token.content.empty()) continue;  // `tokenizers` ignores these too: they cannot match
    if (t.added_by_content.count(token.content) != 0) {
      return malformed(node.path(), "repeats the added token '" + token.content + "'");
    }
    int64_t expected = 0;
    if (const auto it = t.bpe.vocab.find(token.content); it != t.bpe.vocab.end()) {
      expected = it->second;
    } else {
      expected = max_added < 0 ? model_size : (max_added >= model_size || model_size == 0 ? max_added + 1 : model_size);
    }
    if (token.id != expected) {
      return malformed(node.path(), "gives '" + token.content + "' the id " + std::to_string(token.id) +
                                        ", but the tokenizers library would give it " + std::to_string(expected) +
                                        " (the vocabulary's id, or the next id after the model's)");
    }
    max_added = std::max(max_added, token.id);
    if (t.added_by_id.count(token.id) != 0) return malformed(node.path(), "repeats the id " + std::to_string(token.id));
    t.added_by_content.emplace(token.content, t.added.size());
    t.added_by_id.emplace(token.id, t.added.size());
    if (token.special) t.special.insert(token.content);
    t.added.push_back(std::move(token));
  }
  return {};
}

}  // namespace

Status read_tokenizer(std::string_view json_text, HfTokenizer::Impl& t) {
  bool too_deep = false;
  BpeEntries entries;
  const Json root = parse_json_bounded(json_text, too_deep, collect_bpe_entries(entries));
  if (too_deep) return data_loss("tokenizer.json: " + json_too_deep_message());
  if (root.is_discarded()) return data_loss("tokenizer.json is not valid JSON");
  const Node top(root, "");
  GEARBOX_RETURN_IF_ERROR(top.expect_object({"version", "truncation", "padding", "added_tokens", "normalizer",
                                             "pre_tokenizer", "post_processor", "decoder", "model"}));
  if (const Json* version = top.find("version"); version != nullptr && *version != "1.0") {
    return unsupported("version", describe_json(*version), "gearbox reads version 1.0");
  }
  for (const char* key : {"truncation", "padding"}) {
    if (const Json* v = top.find(key); v != nullptr) {
      return unsupported(key, describe_json(*v), "gearbox never truncates or pads; only null is implemented");
    }
  }
  const Json* model = top.find("model");
  if (model == nullptr) return malformed("model", "is missing");
  GEARBOX_RETURN_IF_ERROR(read_model(Node(*model, "model"), entries, t.bpe));
  if (const Json* v = top.find("normalizer"); v != nullptr) {
    GEARBOX_RETURN_IF_ERROR(read_normalizer(Node(*v, "normalizer"), t.normalizer));
  }
  if (const Json* v = top.find("pre_tokenizer"); v != nullptr) {
    GEARBOX_RETURN_IF_ERROR(read_pre_tokenizer(Node(*v, "pre_tokenizer"), t.pre_tokenizer));
  }
  if (const Json* v = top.find("decoder"); v != nullptr) {
    t.has_decoder = true;
    GEARBOX_RETURN_IF_ERROR(read_decoder(Node(*v, "decoder"), t.decoder));
  }
  if (const Json* v = top.find("post_processor"); v != nullptr) {
    GEARBOX_RETURN_IF_ERROR(read_post_processor(Node(*v, "post_processor"), t.bos_id));
  }
  GEARBOX_RETURN_IF_ERROR(read_added_tokens(top.find("added_tokens"), t));

  // Normalized tokens match, and decode from, their normalized form (`tokenizers` 0.22+).
  for (size_t i = 0; i < t.added.size(); ++i) {
    AddedToken& token = t.added[i];
    token.decoded = token.normalized ? t.normalize(token.content) : token.content;
    if (token.normalized) {
      t.normalized_matcher.add(token.decoded, i);
    } else {
      t.raw_matcher.add(token.content, i);
    }
  }
  t.raw_matcher.finish();
  t.normalized_matcher.finish();
  for (const auto& [id, token] : t.bpe.tokens) t.vocab_size = std::max(t.vocab_size, id + 1);
  for (const AddedToken& token : t.added) t.vocab_size = std::max(t.vocab_size, token.id + 1);
  return {};
}

}  // namespace gearbox::cli::hf_json
