// The CLI's tokenizer.json tokenizer against the Hugging Face `tokenizers` library: every
// case in tests/data/tokenizer/cases.json (python/tools/make_tokenizer_fixture.py wrote
// them with `tokenizers` itself, on small BPE tokenizers in the Gemma family) must come
// out exactly, for each fixture variant; malformed files and features gearbox does not
// implement get errors that name the field; and the SentencePiece model of the window_4x
// checkpoint and its tokenizer.json conversion agree.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer.h"
#include "tokenizer_json.h"

namespace gearbox::cli {
namespace {

using Json = nlohmann::json;

const std::string kData = GEARBOX_TEST_DATA;  // tests/data
const std::string kTokenizerData = kData + "/tokenizer";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Escapes control characters and non-ASCII bytes, so that a failing case reads clearly.
std::string printable(const std::string& s) {
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7F) {
      out += c;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += std::string("\\x") + kHex[b >> 4] + kHex[b & 15];
    }
  }
  return out;
}

// ---- the reference cases, one test per fixture variant ---------------------------------------

struct Variant {
  std::string name;
  std::string file;
  Json encode;  // [{"text", "ids"}]
  Json decode;  // [{"ids", "text"}]
};

// cases.json (the SentencePiece-style layouts) and bytelevel_cases.json (Llama 3, Qwen2, GPT-2;
// python/tools/make_bytelevel_tokenizer_fixture.py).
std::vector<Variant> load_variants() {
  std::vector<Variant> out;
  for (const char* file : {"cases.json", "bytelevel_cases.json"}) {
    const Json cases = Json::parse(read_file(kTokenizerData + "/" + file), nullptr, /*allow_exceptions=*/false);
    if (cases.is_discarded() || !cases.contains("variants")) {
      out.push_back({"missing_cases_json", "", Json::array(), Json::array()});  // fails below, visibly
      continue;
    }
    for (const Json& v : cases["variants"]) {
      out.push_back({v["name"].get<std::string>(), v["file"].get<std::string>(), v["encode"], v["decode"]});
    }
  }
  return out;
}

class ReferenceCases : public testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(GetParam().file.empty()) << kTokenizerData << "/cases.json is missing or malformed";
    const std::string text = read_file(kTokenizerData + "/" + GetParam().file);
    ASSERT_FALSE(text.empty()) << "cannot read " << GetParam().file;
    Result<HfTokenizer> t = HfTokenizer::from_json(text);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tokenizer_.emplace(std::move(*t));
  }
  std::optional<HfTokenizer> tokenizer_;
};

TEST_P(ReferenceCases, EncodeMatchesTokenizersLibrary) {
  ASSERT_GE(GetParam().encode.size(), 40u);
  for (const Json& c : GetParam().encode) {
    const auto text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<int64_t>>();
    Result<std::vector<int64_t>> got = tokenizer_->encode(text);
    ASSERT_TRUE(got.ok()) << "'" << printable(text) << "': " << got.status().to_string();
    EXPECT_EQ(*got, want) << "encoding '" << printable(text) << "'";
  }
}

TEST_P(ReferenceCases, DecodeMatchesTokenizersLibrary) {
  ASSERT_GE(GetParam().decode.size(), 40u);
  for (const Json& c : GetParam().decode) {
    const auto ids = c["ids"].get<std::vector<int64_t>>();
    const auto want = c["text"].get<std::string>();
    Result<std::string> got = tokenizer_->decode(ids);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(printable(*got), printable(want)) << "decoding " << c["ids"].dump();
  }
}

// The CLI's facade gives what HfTokenizer gives.
TEST_P(ReferenceCases, CliTokenizerFacadeAgrees) {
  Result<Tokenizer> t = Tokenizer::from_hf_json(read_file(kTokenizerData + "/" + GetParam().file));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  for (const Json& c : GetParam().encode) {
    const auto text = c["text"].get<std::string>();
    Result<std::vector<int64_t>> ids = t->encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int64_t>>()) << "encoding '" << printable(text) << "'";
    Result<std::string> back = t->decode(*ids);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, *tokenizer_->decode(*ids));
  }
}

// What `gearbox build` stores (minified JSON) tokenizes the same.
TEST_P(ReferenceCases, MinifiedJsonTokenizesTheSame) {
  Result<std::string> compact = compact_hf_json(read_file(kTokenizerData + "/" + GetParam().file));
  ASSERT_TRUE(compact.ok()) << compact.status().to_string();
  Result<HfTokenizer> t = HfTokenizer::from_json(*compact);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  for (const Json& c : GetParam().encode) {
    EXPECT_EQ(*t->encode(c["text"].get<std::string>()), c["ids"].get<std::vector<int64_t>>());
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, ReferenceCases, testing::ValuesIn(load_variants()),
                         [](const testing::TestParamInfo<Variant>& p) { return p.param.name; });

// ---- behaviour outside the reference cases --------------------------------------------------

std::string gemma3_text() { return read_file(kTokenizerData + "/gemma3.json"); }

HfTokenizer load(const std::string& text) {
  Result<HfTokenizer> t = HfTokenizer::from_json(text);
  if (!t.ok()) ADD_FAILURE() << t.status().to_string();
  return std::move(t).value();
}

TEST(TokenizerJson, SpecialTokensAreMatchedLiterallyAndSkippedInDecode) {
  const HfTokenizer t = load(gemma3_text());
  const int64_t start = t.token_to_id("<start_of_turn>");
  const int64_t end = t.token_to_id("<end_of_turn>");
  ASSERT_EQ(start, 5);
  ASSERT_EQ(end, 6);
  Result<std::vector<int64_t>> ids = t.encode("<start_of_turn>user\nhi<end_of_turn>");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), start);
  EXPECT_EQ(ids->back(), end);
  EXPECT_EQ(*t.decode(*ids), "user\nhi");
  EXPECT_EQ(t.token_to_id("<0x41>"), 7 + 0x41);
  EXPECT_EQ(t.token_to_id("no such token"), -1);
  EXPECT_EQ(t.vocab_size(), 399);
}

// The token the post_processor's template puts first: Gemma's <bos>, Llama 3's
// <|begin_of_text|> (inside a Sequence after ByteLevel), none for Qwen2 (ByteLevel only).
TEST(TokenizerJson, BosIdComesFromThePostProcessorTemplate) {
  EXPECT_EQ(load(gemma3_text()).bos_id(), 2);
  const HfTokenizer llama3 = load(read_file(kTokenizerData + "/llama3.json"));
  EXPECT_EQ(llama3.bos_id(), llama3.token_to_id("<|begin_of_text|>"));
  EXPECT_GT(llama3.bos_id(), 255);
  EXPECT_EQ(load(read_file(kTokenizerData + "/qwen2.json")).bos_id(), -1);
  EXPECT_EQ(load(read_file(kTokenizerData + "/gemma3_plain.json")).bos_id(), -1);
}

// A regex that backtracks past PCRE2's match limit is an error, not a different split.
TEST(TokenizerJson, RegexMatchLimitIsAnError) {
  Json j = Json::parse(read_file(kTokenizerData + "/qwen2.json"));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?:a|a)+[bc]|.";
  const HfTokenizer t = load(j.dump());
  EXPECT_TRUE(t.encode("ab").ok());
  Result<std::vector<int64_t>> ids = t.encode(std::string(40, 'a') + "d");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(ids.status().message().find("PCRE2"), std::string::npos) << ids.status().message();
}

TEST(TokenizerJson, RejectsTextThatIsNotUtf8) {
  const HfTokenizer t = load(gemma3_text());
  for (const std::string bad : {"\xff", "ok \xc3", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80"}) {
    Result<std::vector<int64_t>> ids = t.encode(bad);
    ASSERT_FALSE(ids.ok()) << printable(bad);
    EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(ids.status().message().find("not valid UTF-8"), std::string::npos) << ids.status().message();
  }
}

TEST(TokenizerJson, MissingUnkTokenIsAnErrorOnlyWhenNeeded) {
  Json j = Json::parse(read_file(kTokenizerData + "/unk_fused.json"));
  j["model"]["unk_token"] = "<nope>";
  const HfTokenizer t = load(j.dump());
  EXPECT_TRUE(t.encode("hello world").ok());
  Result<std::vector<int64_t>> ids = t.encode("日本");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("'<nope>'"), std::string::npos) << ids.status().message();
}

// ---- errors: each names what is wrong -------------------------------------------------------

struct ErrorCase {
  const char* name;
  std::function<std::string()> text;  // the tokenizer.json to read
  StatusCode code;
  const char* message;  // a part of the message
};

std::string edited(const std::function<void(Json&)>& edit) {
  Json j = Json::parse(gemma3_text());
  edit(j);
  return j.dump();
}

const ErrorCase kErrorCases[] = {
    {"not_json", [] { return std::string("{\"model\": {\"type\": \"BPE\""); }, StatusCode::kDataLoss, "not valid JSON"},
    {"not_an_object", [] { return std::string("[1, 2]"); }, StatusCode::kDataLoss, "must be an object"},
    {"no_model", [] { return edited([](Json& j) { j.erase("model"); }); }, StatusCode::kDataLoss, "model is missing"},
    {"model_wordpiece", [] { return edited([](Json& j) { j["model"]["type"] = "WordPiece"; }); },
     StatusCode::kUnimplemented, "model.type 'WordPiece' is not supported"},
    {"model_unigram", [] { return edited([](Json& j) { j["model"]["type"] = "Unigram"; }); },
     StatusCode::kUnimplemented, "model.type 'Unigram' is not supported"},
    {"model_unknown_field", [] { return edited([](Json& j) { j["model"]["frobnicate"] = 1; }); },
     StatusCode::kUnimplemented, "model.frobnicate is not supported"},
    {"model_dropout", [] { return edited([](Json& j) { j["model"]["dropout"] = 0.1; }); }, StatusCode::kUnimplemented,
     "model.dropout 0.1 is not supported"},
    {"model_subword_prefix", [] { return edited([](Json& j) { j["model"]["continuing_subword_prefix"] = "##"; }); },
     StatusCode::kUnimplemented, "model.continuing_subword_prefix '##' is not supported"},
    {"model_suffix", [] { return edited([](Json& j) { j["model"]["end_of_word_suffix"] = "</w>"; }); },
     StatusCode::kUnimplemented, "model.end_of_word_suffix '</w>' is not supported"},
    {"merge_outside_vocab", [] { return edited([](Json& j) {
                                   j["model"]["merges"][0] = {"\xe2\x96\x81", "qqq"};
                                 }); },
     StatusCode::kDataLoss, "model.merges[0] names 'qqq', which is not in model.vocab"},
    {"merge_malformed", [] { return edited([](Json& j) { j["model"]["merges"][3] = "nospace"; }); },
     StatusCode::kDataLoss, "model.merges[3] must be two tokens separated by a space"},
    {"vocab_repeats_id", [] { return edited([](Json& j) { j["model"]["vocab"]["zzz"] = 10; }); }, StatusCode::kDataLoss,
     "gives the id 10 to both"},
    {"vocab_negative_id", [] { return edited([](Json& j) { j["model"]["vocab"]["zzz"] = -4; }); },
     StatusCode::kDataLoss, "model.vocab['zzz'] must be a token id"},
    // Entries that are objects or lists: the reader takes them out of the document as the
    // parser meets them, and names them by kind.
    {"vocab_id_is_an_object", [] { return edited([](Json& j) {
                                     j["model"]["vocab"]["zzz"] = {{"id", 4}};
                                   }); },
     StatusCode::kDataLoss, "model.vocab['zzz'] must be a token id in [0, 2^31), got an object"},
    {"vocab_id_is_a_list", [] { return edited([](Json& j) { j["model"]["vocab"]["zzz"] = {4}; }); },
     StatusCode::kDataLoss, "model.vocab['zzz'] must be a token id in [0, 2^31), got a list"},
    {"vocab_not_an_object", [] { return edited([](Json& j) {
                                   j["model"]["vocab"] = {1, 2};
                                 }); }, StatusCode::kDataLoss,
     "model.vocab must be an object"},
    {"merge_is_an_object", [] { return edited([](Json& j) {
                                  j["model"]["merges"][2] = {{"a", "b"}};
                                }); },
     StatusCode::kDataLoss, "model.merges[2] must be \"left right\" or [\"left\", \"right\"], got an object"},
    {"merge_nests_a_list", [] { return edited([](Json& j) {
                                  j["model"]["merges"][1] = {{"a"}, "b"};
                                }); },
     StatusCode::kDataLoss, "model.merges[1] must be \"left right\" or [\"left\", \"right\"], got a list"},
    {"merge_of_three", [] { return edited([](Json& j) {
                              j["model"]["merges"][0] = {"a", "b", "c"};
                            }); },
     StatusCode::kDataLoss, "model.merges[0] must be \"left right\" or [\"left\", \"right\"], got a list"},
    {"merges_not_a_list", [] { return edited([](Json& j) {
                                 j["model"]["merges"] = {{"a", "b"}};
                               }); },
     StatusCode::kDataLoss, "model.merges must be a list"},
    {"normalizer_nfkc", [] { return edited([](Json& j) {
                               j["normalizer"] = {{"type", "NFKC"}};
                             }); },
     StatusCode::kUnimplemented, "normalizer.type 'NFKC' is not supported"},
    {"normalizer_in_sequence",
     [] {
       return edited([](Json& j) {
         j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {j["normalizer"], {{"type", "Lowercase"}}}}};
       });
     },
     StatusCode::kUnimplemented, "normalizer.normalizers[1].type 'Lowercase' is not supported"},
    {"normalizer_regex", [] { return edited([](Json& j) {
                                j["normalizer"]["pattern"] = {{"Regex", "\\s+"}};
                              }); },
     StatusCode::kUnimplemented, "normalizer.pattern.Regex (a regular expression) is not supported"},
    {"pre_tokenizer_whitespace", [] { return edited([](Json& j) {
                                        j["pre_tokenizer"] = {{"type", "Whitespace"}};
                                      }); },
     StatusCode::kUnimplemented, "pre_tokenizer.type 'Whitespace' is not supported"},
    {"pre_tokenizer_byte_level_unknown_field",
     [] {
       return edited([](Json& j) {
         j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"frobnicate", 1}};
       });
     },
     StatusCode::kUnimplemented, "pre_tokenizer.frobnicate is not supported"},
    {"pre_tokenizer_split_bad_regex",
     [] { return edited([](Json& j) {
            j["pre_tokenizer"]["pattern"] = {{"Regex", "(\\p{L}"}};
          }); },
     StatusCode::kUnimplemented, "pre_tokenizer.pattern.Regex is not a regular expression gearbox can compile"},
    // \w, \h, \b... mean other things in Oniguruma (the library's engine) than in PCRE2.
    {"pre_tokenizer_split_regex_word",
     [] { return edited([](Json& j) {
            j["pre_tokenizer"]["pattern"] = {{"Regex", "\\w+|\\s+"}};
          }); },
     StatusCode::kUnimplemented, "pre_tokenizer.pattern.Regex uses \\w"},
    {"pre_tokenizer_split_regex_nested_class",
     [] { return edited([](Json& j) {
            j["pre_tokenizer"]["pattern"] = {{"Regex", "[a-z&&[^c]]"}};
          }); },
     StatusCode::kUnimplemented, "nests a character class"},
    {"metaspace_bad_scheme",
     [] {
       return edited([](Json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}};
       });
     },
     StatusCode::kUnimplemented, "pre_tokenizer.prepend_scheme 'sometimes' is not supported"},
    {"metaspace_long_replacement",
     [] { return edited([](Json& j) {
            j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "__"}};
          }); },
     StatusCode::kDataLoss, "pre_tokenizer.replacement must be one character"},
    {"decoder_wordpiece", [] { return edited([](Json& j) {
                                 j["decoder"] = {{"type", "WordPiece"}};
                               }); },
     StatusCode::kUnimplemented, "decoder.type 'WordPiece' is not supported"},
    {"decoder_in_sequence", [] { return edited([](Json& j) {
                                   j["decoder"]["decoders"][2] = {{"type", "CTC"}};
                                 }); },
     StatusCode::kUnimplemented, "decoder.decoders[2].type 'CTC' is not supported"},
    {"post_processor_roberta",
     [] { return edited([](Json& j) {
            j["post_processor"] = {{"type", "RobertaProcessing"}};
          }); },
     StatusCode::kUnimplemented, "post_processor.type 'RobertaProcessing' is not supported"},
    {"post_processor_in_sequence",
     [] {
       return edited([](Json& j) {
         j["post_processor"] = {{"type", "Sequence"},
                                {"processors", {{{"type", "ByteLevel"}}, {{"type", "BertProcessing"}}}}};
       });
     },
     StatusCode::kUnimplemented, "post_processor.processors[1].type 'BertProcessing' is not supported"},
    {"post_processor_undefined_token",
     [] { return edited([](Json& j) { j["post_processor"]["special_tokens"] = Json::object(); }); },
     StatusCode::kDataLoss, "post_processor.special_tokens[\"<bos>\"] is missing"},
    {"post_processor_eos",
     [] {
       return edited([](Json& j) {
         j["post_processor"]["single"].push_back({{"SpecialToken", {{"id", "<eos>"}, {"type_id", 0}}}});
       });
     },
     StatusCode::kUnimplemented, "post_processor.single"},
    {"single_word_token", [] { return edited([](Json& j) { j["added_tokens"][4]["single_word"] = true; }); },
     StatusCode::kUnimplemented, "added_tokens[4].single_word true is not supported"},
    {"added_token_wrong_id", [] { return edited([](Json& j) { j["added_tokens"][1]["id"] = 9; }); },
     StatusCode::kDataLoss, "added_tokens[1] gives '<eos>' the id 9"},
    {"added_token_repeated", [] { return edited([](Json& j) { j["added_tokens"].push_back(j["added_tokens"][0]); }); },
     StatusCode::kDataLoss, "repeats the added token '<pad>'"},
    {"truncation", [] { return edited([](Json& j) {
                          j["truncation"] = {{"max_length", 8}};
                        }); },
     StatusCode::kUnimplemented, "truncation an object is not supported"},
    {"padding", [] { return edited([](Json& j) {
                       j["padding"] = {{"length", 8}};
                     }); }, StatusCode::kUnimplemented,
     "padding an object is not supported"},
    {"unknown_top_level_field", [] { return edited([](Json& j) { j["frobnicate"] = true; }); },
     StatusCode::kUnimplemented, "the field frobnicate is not supported"},
    {"version", [] { return edited([](Json& j) { j["version"] = "2.0"; }); }, StatusCode::kUnimplemented,
     "version '2.0' is not supported"},
};

class Errors : public testing::TestWithParam<ErrorCase> {};

TEST_P(Errors, NameWhatIsWrong) {
  const ErrorCase& c = GetParam();
  Result<HfTokenizer> t = HfTokenizer::from_json(c.text());
  ASSERT_FALSE(t.ok()) << c.name;
  EXPECT_EQ(t.status().code(), c.code) << t.status().to_string();
  EXPECT_NE(t.status().message().find(c.message), std::string::npos)
      << "message: " << t.status().message() << "\nexpected to contain: " << c.message;
  EXPECT_EQ(t.status().message().rfind("tokenizer.json", 0), 0u) << t.status().message();
  // The CLI's facade reports the same.
  Result<Tokenizer> cli = Tokenizer::from_hf_json(c.text());
  ASSERT_FALSE(cli.ok());
  EXPECT_EQ(cli.status().to_string(), t.status().to_string());
}

INSTANTIATE_TEST_SUITE_P(TokenizerJson, Errors, testing::ValuesIn(kErrorCases),
                         [](const testing::TestParamInfo<ErrorCase>& p) { return std::string(p.param.name); });

// A key written twice in model.vocab, or a second "model", means what it does in the
// document: the last one. The reader takes the vocabulary and the merges out of the
// document while parsing, so it must keep to that itself.
TEST(TokenizerJson, RepeatedKeysKeepTheirLastValue) {
  // zzz: a bad id, then a good one; yyy: first the id xxx keeps, then its own.
  const std::string model =
      R"({"type": "BPE", "merges": ["a b"], "vocab": {"zzz": -4, "a": 0, "b": 1, "ab": 2, "xxx": 3, "yyy": 3,)"
      R"( "zzz": 4, "yyy": 5}})";
  Result<HfTokenizer> t = HfTokenizer::from_json(R"({"model": )" + model + "}");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->token_to_id("zzz"), 4);
  EXPECT_EQ(t->token_to_id("xxx"), 3);
  EXPECT_EQ(t->token_to_id("yyy"), 5);
  EXPECT_EQ(t->vocab_size(), 6);
  EXPECT_EQ(t->encode("ab").value(), std::vector<int64_t>{2});
  EXPECT_EQ(t->decode(std::vector<int64_t>{3, 5}).value(), "xxx yyy");
  // Two tokens that keep the same id are still an error.
  Result<HfTokenizer> clash =
      HfTokenizer::from_json(R"({"model": {"type": "BPE", "merges": [], "vocab": {"xxx": 3, "yyy": -1, "yyy": 3}}})");
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find("gives the id 3 to both"), std::string::npos) << clash.status().message();
  // A second "model" replaces the first, its vocabulary and merges included.
  Result<HfTokenizer> last = HfTokenizer::from_json(
      R"({"model": {"type": "BPE", "merges": ["q q"], "vocab": {"q": 7, "qq": 8}}, "model": )" + model + "}");
  ASSERT_TRUE(last.ok()) << last.status().to_string();
  EXPECT_EQ(last->token_to_id("q"), -1);
  EXPECT_EQ(last->token_to_id("zzz"), 4);
  EXPECT_EQ(last->vocab_size(), 6);
}

TEST(TokenizerJson, EmptyMetadataMeansNoTokenizer) {
  Result<Tokenizer> t = Tokenizer::from_hf_json("");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("carries no tokenizer"), std::string::npos);
}

TEST(TokenizerJson, CompactRejectsInvalidJson) {
  Result<std::string> compact = compact_hf_json("{\"model\": ");
  ASSERT_FALSE(compact.ok());
  EXPECT_EQ(compact.status().code(), StatusCode::kDataLoss);
  Result<std::string> ok = compact_hf_json("{ \"a\" :  [1, 2] }");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "{\"a\":[1,2]}");
}

// ---- the BOS and EOS ids `gearbox build --hf` stores ------------------------------------------

struct PromptTokensCase {
  const char* name;
  const char* checkpoint;  // a directory of data/parity; its tokenizer files are read
  int64_t config_bos;
  std::vector<int64_t> config_eos;
  int64_t bos;
  std::vector<int64_t> eos;
};

// The parity checkpoints' tokenizers (python/tools/make_bytelevel_tokenizer_fixture.py):
// Llama 3 adds <|begin_of_text|> through its post_processor template, Qwen2/3 add nothing and
// stop at <|endoftext|> (tokenizer_config.json's eos_token, which their configs lack),
// Mistral adds <s> (add_bos_token). window_4x has only tokenizer.model: the config's ids.
const PromptTokensCase kPromptTokensCases[] = {
    {"llama3", "llama3_5x", 1, {2}, 1, {2}},
    {"llama3_eos_list", "llama3_5x", 1, {7, 9}, 1, {7, 9, 2}},
    {"qwen2", "qwen2_4x", -1, {}, -1, {91}},
    {"qwen2_config_bos", "qwen2_4x", 91, {91}, -1, {91}},
    {"qwen3", "qwen3_5x", -1, {}, -1, {75}},
    {"mistral", "mistral_4x", 1, {2}, 1, {2}},
    {"sentencepiece_only", "window_4x", 2, {1, 106}, 2, {1, 106}},
};

class PromptTokensOfCheckpoints : public testing::TestWithParam<PromptTokensCase> {};

TEST_P(PromptTokensOfCheckpoints, FollowTheTokenizerFiles) {
  const PromptTokensCase& c = GetParam();
  const std::string dir = kData + "/parity/" + c.checkpoint;
  std::optional<HfTokenizer> hf;
  if (const std::string text = read_file(dir + "/tokenizer.json"); !text.empty()) hf.emplace(load(text));
  Result<PromptTokens> got =
      prompt_tokens(c.config_bos, c.config_eos, hf ? &*hf : nullptr, read_file(dir + "/tokenizer_config.json"));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->bos, c.bos);
  EXPECT_EQ(got->eos, c.eos);
}

INSTANTIATE_TEST_SUITE_P(TokenizerJson, PromptTokensOfCheckpoints, testing::ValuesIn(kPromptTokensCases),
                         [](const testing::TestParamInfo<PromptTokensCase>& p) { return std::string(p.param.name); });

TEST(TokenizerJson, PromptTokensAddBosTokenWinsOverTheTemplate) {
  const HfTokenizer llama3 = load(read_file(kData + "/parity/llama3_5x/tokenizer.json"));
  Result<PromptTokens> off = prompt_tokens(1, {2}, &llama3, R"({"add_bos_token": false, "bos_token": null})");
  ASSERT_TRUE(off.ok()) << off.status().to_string();
  EXPECT_EQ(off->bos, -1);
  const HfTokenizer qwen2 = load(read_file(kData + "/parity/qwen2_4x/tokenizer.json"));
  Result<PromptTokens> on = prompt_tokens(
      -1, {}, &qwen2, R"({"add_bos_token": true, "bos_token": {"__type": "AddedToken", "content": "<|im_start|>"}})");
  ASSERT_TRUE(on.ok()) << on.status().to_string();
  EXPECT_EQ(on->bos, 92);
  // Without a tokenizer.json gearbox reads, the names stay unresolved: the config's ids.
  Result<PromptTokens> unread =
      prompt_tokens(5, {6}, nullptr, R"({"add_bos_token": true, "bos_token": "[CLS]", "eos_token": "x"})");
  ASSERT_TRUE(unread.ok()) << unread.status().to_string();
  EXPECT_EQ(unread->bos, 5);
  EXPECT_EQ(unread->eos, std::vector<int64_t>{6});
}

TEST(TokenizerJson, PromptTokensRejectMalformedTokenizerConfig) {
  const HfTokenizer qwen2 = load(read_file(kData + "/parity/qwen2_4x/tokenizer.json"));
  const std::pair<const char*, const char*> cases[] = {
      {"[1]", "tokenizer_config.json is not a JSON object"},
      {"{\"add_bos_token\": ", "tokenizer_config.json is not a JSON object"},
      {R"({"add_bos_token": "yes"})", "add_bos_token must be true or false, got 'yes'"},
      {R"({"eos_token": 3})", "eos_token must be a token"},
      {R"({"eos_token": "<|nope|>"})", "eos_token '<|nope|>' is not a token of tokenizer.json"},
      {R"({"add_bos_token": true, "bos_token": "<s>"})", "bos_token '<s>' is not a token of tokenizer.json"},
  };
  for (const auto& [config, message] : cases) {
    Result<PromptTokens> got = prompt_tokens(-1, {}, &qwen2, config);
    ASSERT_FALSE(got.ok()) << config;
    EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(got.status().message().find(message), std::string::npos) << got.status().message();
  }
}

// The CLI test builds window_4x with tokenizer.json in place of tokenizer.model: the two
// tokenize its prompts alike (text the SentencePiece normalizer leaves unchanged).
TEST(TokenizerJson, Window4xConversionMatchesSentencePiece) {
  Result<Tokenizer> sp = Tokenizer::from_sentencepiece(read_file(kData + "/parity/window_4x/tokenizer.model"));
  ASSERT_TRUE(sp.ok()) << sp.status().to_string();
  Result<Tokenizer> hf = Tokenizer::from_hf_json(read_file(kTokenizerData + "/window_4x/tokenizer.json"));
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  for (const std::string text : {"the sky is blue", "the engine holds", "Optimization profiles let one engine serve",
                                 "A gearbox holds several gears; one copy"}) {
    Result<std::vector<int64_t>> want = sp->encode(text);
    Result<std::vector<int64_t>> got = hf->encode(text);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(*got, *want) << text;
    EXPECT_EQ(*hf->decode(*got), *sp->decode(*want)) << text;
  }
  EXPECT_EQ(*hf->encode("the sky is blue"), (std::vector<int64_t>{46, 5, 64, 97, 29, 89}));
}

}  // namespace
}  // namespace gearbox::cli
