#!/usr/bin/env python3
"""Writes the byte-level tokenizer.json fixtures of gearbox's tokenizer tests: the layouts of
Llama 3 and Qwen2/2.5/3 (a regex Split pre-tokenizer, ByteLevel pre-tokenizer and decoder,
no byte fallback) and of GPT-2, and the tokenizers of the parity checkpoints of those
families, with the reference cases the HF `tokenizers` library produces on them.

  tests/data/tokenizer/<variant>.json       small byte-level BPE tokenizers (VARIANTS), each
                                            trained on make_tokenizer_fixture.CORPUS (no
                                            download) with the variant's own normalizer and
                                            pre-tokenizer, and the special / added tokens of
                                            its family
  tests/data/tokenizer/bytelevel_cases.json per variant: text -> ids (encode without special
                                            tokens added) and ids -> text (decode skipping
                                            special tokens), as `tokenizers` computes them
  tests/data/parity/<case>/tokenizer.json, tokenizer_config.json
                                            a tokenizer of the case's family that fits its
                                            vocabulary (PARITY), for `gearbox generate
                                            --prompt` on those checkpoints; the prompt ids a
                                            transformers tokenizer gives (BOS included) are
                                            printed for tests/CMakeLists.txt

Run it with `tokenizers` installed (transformers too, to check the prompt ids; not needed
by CI, which only reads the files):
  .venv/bin/python python/tools/make_bytelevel_tokenizer_fixture.py tests/data
"""
import json
import os
import sys

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_fixture import CORPUS, TEXTS, dump_cases  # noqa: E402  (one corpus and text list)

# The Split patterns of the published tokenizer.json files.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# What the regexes and the byte-level mapping are sensitive to, on top of the shared texts.
BYTE_LEVEL_TEXTS = [
    "I'm sure it's theirs; THEY'LL say WE'D, you'VE, 'tis",
    "don't DON'T Don’t",
    "1 12 123 1234 12345 1234567 ٣٤٥ ½",
    "x=1+2*3; y -= 4 // 5",
    "  two leading, two trailing  ",
    "a  \n  b\n\n\nc \t d",
    "tail spaces   \n",
    "\n\n\n",
    "a\r\nb\rc",
    "mixed 混合 текст ελληνικά عربى",
    "emoji👍🏽in words🚀!",
    "<|begin_of_text|>hello<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nWhy is the sky blue?<|eot_id|>",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><|endoftext|>",
    "<think>\nok\n</think>",
    "ÿ þ ā Ā Ġ ġ",
    "e\u0301\u0327 A\u030a \u212b \uac00 \u1100\u1161",
    "nel\u0085 \u0085next\u2028line \u00a0\u3000 wide\u000b\u000c",
    "it'\u017f HE'\u212aL 'S 'Re",
]

LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                  "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
QWEN2_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN2_ADDED = ["<tool_call>", "</tool_call>"]  # added, not special: decode keeps them
QWEN3_ADDED = ["<think>", "</think>"]


def llama3_layout(t):
    t.normalizer = None
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), "isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    t.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)


def llama3_post(t, bos, bos_id):
    t.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1",
                                      special_tokens=[(bos, bos_id)])])


def qwen2_layout(t):
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), "isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    t.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    t.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)


def gpt2_layout(t):
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=True)


def splits_layout(t):
    """Split behaviours and invert that the published layouts do not use."""
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\S+"), "removed", invert=True),
        pre_tokenizers.Split(Regex(r"[\p{P}\p{S}]"), "merged_with_previous"),
        pre_tokenizers.Split(Regex(r"\p{N}"), "contiguous"),
        pre_tokenizers.Split(Regex(r"\p{Lu}"), "merged_with_next"),
        pre_tokenizers.Split("é", "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()


def train(layout, corpus, vocab_size, special=(), full_alphabet=True):
    """A byte-level BPE trained on `corpus` with the layout's normalizer and pre-tokenizer;
    `special` tokens come first in the vocabulary (ids 0, 1, ...)."""
    t = Tokenizer(models.BPE())
    layout(t)
    alphabet = pre_tokenizers.ByteLevel.alphabet() if full_alphabet else []
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, show_progress=False,
                                  initial_alphabet=alphabet, special_tokens=list(special))
    t.train_from_iterator(corpus, trainer)
    return t


def with_model(t, **bpe):
    """`t` with its BPE rebuilt with the given options (ignore_merges...)."""
    model = json.loads(t.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    t.model = models.BPE(model["vocab"], merges, **bpe)
    return t


def byte_level(text):
    """`text` in the GPT-2 byte-to-unicode alphabet, as vocabulary entries spell it."""
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(text)[0][0]


def build_llama3():
    t = with_model(train(llama3_layout, CORPUS.splitlines(), 600), ignore_merges=True)
    # Whole words that no merge sequence builds: only ignore_merges finds them.
    vocab = json.loads(t.to_str())["model"]
    extra = [byte_level(w) for w in [" zyxwvq", "jjjjjj", " 🚀", "supercalifragilisticexpialidocious"]]
    extended = dict(vocab["vocab"])
    for w in extra:
        extended.setdefault(w, len(extended))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in vocab["merges"]]
    t.model = models.BPE(extended, merges, ignore_merges=True)
    t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in LLAMA3_SPECIAL])
    llama3_post(t, "<|begin_of_text|>", t.token_to_id("<|begin_of_text|>"))
    return t


def build_qwen2():
    t = train(qwen2_layout, CORPUS.splitlines(), 600)
    t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in QWEN2_SPECIAL])
    t.add_tokens([AddedToken(s, special=False, normalized=False) for s in QWEN2_ADDED + QWEN3_ADDED])
    return t


def build_gpt2():
    t = train(gpt2_layout, CORPUS.splitlines(), 500)
    t.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    t.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                  AddedToken("hello", special=False, normalized=True)])
    return t


def build_splits():
    t = train(splits_layout, CORPUS.splitlines(), 450)
    t.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    return t


VARIANTS = {"llama3": build_llama3, "qwen2": build_qwen2, "gpt2": build_gpt2, "byte_level_splits": build_splits}


def decode_cases(t):
    """ids -> text beyond the round trips: special tokens skipped, byte tokens that do not
    form UTF-8 (one U+FFFD per maximal ill-formed part), ids without a token."""
    ids = lambda *toks: [t.token_to_id(byte_level(x) if len(x) == 1 else x) for x in toks]  # noqa: E731
    byte = lambda b: t.token_to_id(BYTE_CHARACTERS[b])  # noqa: E731
    specials = [i for i in range(t.get_vocab_size(with_added_tokens=True))
                if t.id_to_token(i) and t.id_to_token(i).startswith("<|")]
    lists = [
        [],
        specials,
        [byte(0xE6), byte(0x97), byte(0xA5)],                    # 日 from three byte tokens
        [byte(0xE6), byte(0x97)],                                # truncated: one U+FFFD
        [byte(0xE6), byte(0x41), byte(0xFF), byte(0xC0), byte(0xAF), byte(0xED), byte(0xA0), byte(0x80)],
        [byte(0xF0), byte(0x9F), byte(0x9A), byte(0x80), byte(0xF4), byte(0x90)],
        ids(" ", " ", "A", "\n") + specials[:1] + ids("b"),
        list(range(0, t.get_vocab_size(with_added_tokens=True), 7)),
        ids("A") + [100000] + ids("B"),                          # an id without a token is skipped
    ]
    return [dict(ids=x, text=t.decode(x, skip_special_tokens=True)) for x in lists]


def byte_level_characters():
    """GPT-2's byte-to-character map: the printable Latin-1 bytes stand for themselves, the
    others take U+0100, U+0101, ... in byte order."""
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, n = [], 0
    for b in range(256):
        table.append(chr(b) if b in keep else chr(256 + n))
        n += b not in keep
    return table


BYTE_CHARACTERS = byte_level_characters()


# ---- the parity checkpoints' tokenizers --------------------------------------------------------

PARITY_CORPUS = """the sky is blue because the air scatters the light of the sun.
the engine holds the weights and the profiles; the engine runs the model.
a gearbox holds gears and the gears turn the shaft.
is the sky blue at night? the stars say it is not.
""".splitlines()
PARITY_PROMPT = "the sky is blue"


def parity_llama3(vocab_size):
    # The checkpoint's config says bos 1, eos 2: the specials open the vocabulary.
    special = ["<|reserved_special_token_0|>", "<|begin_of_text|>", "<|end_of_text|>"]
    t = with_model(train(llama3_layout, PARITY_CORPUS, vocab_size - 2, special, full_alphabet=False),
                   ignore_merges=True)
    t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special + ["<|eot_id|>"]])
    llama3_post(t, "<|begin_of_text|>", 1)
    config = dict(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>", clean_up_tokenization_spaces=True,
                  model_max_length=256, tokenizer_class="PreTrainedTokenizerFast")
    return t, config


def parity_qwen(vocab_size, added):
    t = train(qwen2_layout, PARITY_CORPUS, vocab_size - len(QWEN2_SPECIAL) - len(added) - 1, full_alphabet=False)
    t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in QWEN2_SPECIAL])
    t.add_tokens([AddedToken(s, special=False, normalized=False) for s in added])
    config = dict(bos_token=None, eos_token="<|endoftext|>", pad_token="<|endoftext|>", errors="replace",
                  add_prefix_space=False, model_max_length=1024, split_special_tokens=False,
                  tokenizer_class="Qwen2Tokenizer")
    return t, config


def parity_mistral(vocab_size):
    # Mistral 7B v0.1's layout (the Llama-2 SentencePiece conversion): <unk> <s> </s> first.
    special = ["<unk>", "<s>", "</s>"]
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.Replace(" ", "▁")
    t.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=True)
    t.train_from_iterator(PARITY_CORPUS, trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                                             show_progress=False, special_tokens=special))
    t = with_model(t, unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    t.pre_tokenizer = None
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special])
    t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                     special_tokens=[("<s>", 1)])
    config = dict(add_bos_token=True, add_eos_token=False, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                  legacy=True, model_max_length=2048, tokenizer_class="LlamaTokenizer")
    return t, config


PARITY = {"llama3_5x": lambda v: parity_llama3(v), "qwen2_4x": lambda v: parity_qwen(v, QWEN2_ADDED),
          "qwen3_5x": lambda v: parity_qwen(v, QWEN2_ADDED + QWEN3_ADDED), "mistral_4x": parity_mistral}


def write_parity(data_dir):
    for case, make in PARITY.items():
        out = os.path.join(data_dir, "parity", case)
        vocab_size = json.load(open(os.path.join(out, "config.json")))["vocab_size"]
        t, config = make(vocab_size)
        if t.get_vocab_size(with_added_tokens=True) > vocab_size:
            raise SystemExit(f"{case}: the tokenizer has {t.get_vocab_size()} ids, the model {vocab_size}")
        t.save(os.path.join(out, "tokenizer.json"), pretty=True)
        with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        ids = t.encode(PARITY_PROMPT).ids
        try:
            from transformers import AutoTokenizer
            hf = AutoTokenizer.from_pretrained(out)(PARITY_PROMPT)["input_ids"]
            if hf != ids:
                raise SystemExit(f"{case}: transformers gives {hf}, tokenizers {ids}")
        except ImportError:
            print("transformers is not installed: the prompt ids are not checked against it")
        print(f"{case}: vocab {t.get_vocab_size(with_added_tokens=True)} of {vocab_size}; "
              f"'{PARITY_PROMPT}' -> {ids}; eos '{config['eos_token']}' = {t.token_to_id(config['eos_token'])}")


def main(data_dir):
    out_dir = os.path.join(data_dir, "tokenizer")
    cases = {"tokenizers": tokenizers.__version__, "variants": []}
    for name, build in VARIANTS.items():
        path = os.path.join(out_dir, f"{name}.json")
        build().save(path, pretty=False)
        t = Tokenizer.from_file(path)  # the reference is what was written
        encode = []
        decode = []
        for text in TEXTS + BYTE_LEVEL_TEXTS:
            ids = t.encode(text, add_special_tokens=False).ids
            encode.append(dict(text=text, ids=ids))
            decode.append(dict(ids=ids, text=t.decode(ids, skip_special_tokens=True)))
        decode += decode_cases(t)
        cases["variants"].append(dict(name=name, file=f"{name}.json", encode=encode, decode=decode))
        print(f"{name}: vocab {t.get_vocab_size()}, {len(encode)} encode and {len(decode)} decode cases -> {path}")
    with open(os.path.join(out_dir, "bytelevel_cases.json"), "w", encoding="utf-8") as f:
        f.write(dump_cases(cases))
    write_parity(data_dir)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data")
