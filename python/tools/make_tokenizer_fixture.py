#!/usr/bin/env python3
"""Writes the Hugging Face tokenizer.json fixtures that gearbox's tokenizer tests read
(tests/data/tokenizer/), and the reference cases the HF `tokenizers` library produces on
them (cases.json), which tests/tools/tokenizer_json_test.cpp must reproduce exactly.

  tests/data/tokenizer/<variant>.json    small BPE tokenizers in the Gemma family: one
                                         tiny BPE trained on CORPUS (no download), with
                                         <0x00>..<0xFF> byte tokens and special tokens,
                                         under several normalizer / pre-tokenizer /
                                         decoder set-ups (VARIANTS)
  tests/data/tokenizer/cases.json        per variant: text -> ids (encode without special
                                         tokens added) and ids -> text (decode skipping
                                         special tokens), as `tokenizers` computes them
  tests/data/tokenizer/window_4x/tokenizer.json
                                         tests/data/parity/window_4x/tokenizer.model
                                         converted to tokenizer.json (what transformers'
                                         SentencePiece converters do), for the CLI test
                                         of a checkpoint that has only tokenizer.json
  tests/data/tokenizer/wordpiece/tokenizer.json
                                         a WordPiece tokenizer, which gearbox does not
                                         implement (the CLI's error path)

Run it with `tokenizers` and `sentencepiece` installed (not needed by CI, which only reads
the files):  .venv/bin/python python/tools/make_tokenizer_fixture.py tests/data/tokenizer
"""
import json
import os
import sys

import sentencepiece as spm
import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

CORPUS = """The sky is blue because air scatters short wavelengths of sunlight more than long ones.
Optimization profiles let one engine serve decode and prefill with kernels tuned for each.
A gearbox holds several gears; the engine holds several profiles and one copy of the weights.
Le café est très chaud, mais la crème brûlée est délicieuse. Ça va très bien, merci.
Numbers like 2024, 3.14 and 42 appear in text; so do (brackets), "quotes" and dashes - too.
Hello world! Hello again, world. The world says hello back to the engine.
    indented code:    x = y + 1
"""

# Gemma's layout: pad, eos, bos, unk, then control tokens; the byte tokens follow.
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
BYTES = [f"<0x{b:02X}>" for b in range(256)]
TRAINED_VOCAB = 360  # tokens learned on CORPUS on top of SPECIAL and BYTES

TEXTS = [
    "",
    " ",
    "   ",
    "\n",
    "hello",
    "Hello world",
    " leading space",
    "trailing space ",
    "  both  ",
    "multiple   spaces    between words",
    "line one\nline two\n\nline four",
    "tabs\tand\ttabs",
    "\r\n windows line end",
    "The sky is blue because air scatters short wavelengths.",
    "café au lait, crème brûlée",
    "naïve résumé façade",
    "ß and e\u0301 (combining accent)",
    "日本語のテキスト",
    "中文 and English",
    "emoji 🚀 and 👍🏽 and 🇫🇷",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math letters",
    "zero\u200bwidth and\u00a0nbsp",
    "unseen zyxwvq qwertyuiop jjjjjj",
    "supercalifragilisticexpialidocious",
    "numbers 12345 67.89 0x1F",
    "punctuation!?.,;:'\"()[]{}<>@#$%^&*_+=|\\/~`",
    "▁already▁meta▁spaced",
    "<0x41> looks like a byte token",
    "<bos>hello",
    "text<eos>",
    "<bos><bos>",
    "<start_of_turn>user\nWhy is the sky blue?<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn> spaced <end_of_turn>",
    "a<mask>b <mask> c",
    "<unk>",
    "<notatoken> <start_of_turn",
    "<tool_call>run it</tool_call>",
    "see <image_soft_token> here",
    "left   <lstrip_me> right",
    "left <rstrip_me>    right",
    "both  <strip_both>  sides<strip_both>",
    "say hi  there hi",
    "x" * 64,
    " " * 9 + "nine spaces",
]

# tokenizer.json set-ups of the family gearbox implements. Each: normalizer, pre_tokenizer,
# decoder, BPE options, post_processor.
GEMMA_DECODER = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
LLAMA_DECODER = GEMMA_DECODER + [decoders.Strip(" ", 1, 0)]
VARIANTS = {
    # Gemma-3 as published: Replace normalizer, the (no-op) Split pre-tokenizer, <bos> template.
    "gemma3": dict(normalizer=normalizers.Replace(" ", "▁"),
                   pre_tokenizer=pre_tokenizers.Split(" ", "merged_with_previous"),
                   decoder=decoders.Sequence(GEMMA_DECODER), bpe=dict(byte_fallback=True),
                   post_processor=processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])),
    # Gemma-3 without a pre-tokenizer or post-processor.
    "gemma3_plain": dict(normalizer=normalizers.Replace(" ", "▁"), pre_tokenizer=None,
                         decoder=decoders.Sequence(GEMMA_DECODER), bpe=dict(byte_fallback=True)),
    # Llama-2 / Gemma-1 style: Prepend + Replace normalizer, Strip in the decoder; added tokens
    # with lstrip / rstrip and one matched after normalization.
    "llama_prepend": dict(normalizer=normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]),
                          pre_tokenizer=None, decoder=decoders.Sequence(LLAMA_DECODER),
                          bpe=dict(byte_fallback=True), strip_tokens=True),
    # Metaspace pre-tokenizer, always prepending and splitting; Metaspace decoder; ignore_merges.
    "metaspace_always": dict(normalizer=None,
                             pre_tokenizer=pre_tokenizers.Metaspace(prepend_scheme="always", split=True),
                             decoder=decoders.Metaspace(prepend_scheme="always", split=True),
                             bpe=dict(byte_fallback=True, ignore_merges=True)),
    # Metaspace prepending only at the start of the text, not splitting (Mistral's layout).
    "metaspace_first": dict(normalizer=None,
                            pre_tokenizer=pre_tokenizers.Metaspace(prepend_scheme="first", split=False),
                            decoder=decoders.Sequence(LLAMA_DECODER), bpe=dict(byte_fallback=True)),
    # Metaspace never prepending, inside a pre-tokenizer Sequence; no decoder (tokens joined by spaces).
    "metaspace_never": dict(normalizer=normalizers.Sequence([]),
                            pre_tokenizer=pre_tokenizers.Sequence(
                                [pre_tokenizers.Metaspace(prepend_scheme="never", split=True)]),
                            decoder=None, bpe=dict(byte_fallback=True)),
    # No byte fallback: unknown characters become <unk>, consecutive ones fused.
    "unk_fused": dict(normalizer=normalizers.Replace(" ", "▁"), pre_tokenizer=None,
                      decoder=decoders.Sequence(GEMMA_DECODER), bpe=dict(byte_fallback=False, fuse_unk=True)),
    # No byte fallback, one <unk> per unknown character.
    "unk_unfused": dict(normalizer=normalizers.Replace(" ", "▁"), pre_tokenizer=None,
                        decoder=decoders.Sequence(GEMMA_DECODER), bpe=dict(byte_fallback=False, fuse_unk=False)),
}


def train_bpe():
    """A tiny BPE learned on CORPUS as SentencePiece would see it (spaces as ▁, a ▁ in
    front of each word). Returns (vocab tokens in id order, merges)."""
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.Replace(" ", "▁")
    t.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=TRAINED_VOCAB, min_frequency=2, show_progress=False)
    t.train_from_iterator(CORPUS.splitlines(), trainer)
    model = json.loads(t.to_str())["model"]
    trained = [tok for tok, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return trained, merges


def build_variant(spec, trained, merges):
    vocab = {}
    for tok in SPECIAL + BYTES + trained:
        vocab.setdefault(tok, len(vocab))
    bpe = dict(unk_token="<unk>", fuse_unk=True)
    bpe.update(spec["bpe"])
    t = Tokenizer(models.BPE(vocab, merges, **bpe))
    if spec["normalizer"] is not None:
        t.normalizer = spec["normalizer"]
    if spec["pre_tokenizer"] is not None:
        t.pre_tokenizer = spec["pre_tokenizer"]
    if spec["decoder"] is not None:
        t.decoder = spec["decoder"]
    if spec.get("post_processor") is not None:
        t.post_processor = spec["post_processor"]
    t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL])
    # Not special (kept by decode), and outside the model's vocabulary (ids after it).
    t.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                  AddedToken("</tool_call>", special=False, normalized=False)])
    t.add_special_tokens([AddedToken("<image_soft_token>", special=True, normalized=False)])
    if spec.get("strip_tokens"):
        t.add_tokens([AddedToken("<lstrip_me>", special=False, normalized=False, lstrip=True),
                      AddedToken("<rstrip_me>", special=False, normalized=False, rstrip=True),
                      AddedToken("<strip_both>", special=True, normalized=False, lstrip=True, rstrip=True),
                      # Matched in the normalized text (so against "▁hi", with the ▁ the normalizer writes).
                      AddedToken("hi", special=False, normalized=True)])
    return t


def decode_cases(t):
    """ids -> text beyond the round trips: special tokens skipped, byte tokens that do not
    form UTF-8, a ▁ at the start (Strip / Metaspace), an added token outside the vocab."""
    ids = lambda *toks: [t.token_to_id(x) for x in toks]  # noqa: E731
    lists = [
        [],
        ids("<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>", "<pad>", "<unk>"),
        ids("<0xE6>", "<0x97>", "<0xA5>"),                   # 日 from three byte tokens
        ids("<0xE6>", "<0x97>"),                             # a truncated sequence: one � per byte
        ids("<0xE6>", "<0x97>", "▁", "<0xF0>", "<0x9F>", "<0x9A>", "<0x80>", "<0xFF>"),
        ids("▁", "▁", "<0x41>", "▁"),
        ids("<0x0A>", "<0x20>", "<0x41>"),
        ids("<bos>", "<tool_call>", "▁", "</tool_call>", "<image_soft_token>", "<eos>"),
        list(range(7, 7 + 256, 17)),
        list(range(263, t.get_vocab_size(), 7)),
        ids("<0x41>") + [100000] + ids("<0x42>"),       # an id without a token is skipped
    ]
    return [dict(ids=x, text=t.decode(x, skip_special_tokens=True)) for x in lists]


def sentencepiece_to_json(model_file):
    """transformers' SentencePiece -> tokenizer.json conversion (the Llama converter for a
    BPE model with add_dummy_prefix): the same vocabulary and ids, the merges recovered from
    the pieces (a merge per split of a piece into two pieces, ranked by the piece's id)."""
    sp = spm.SentencePieceProcessor(model_file=model_file)
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    plain = lambda i: not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i))  # noqa: E731
    merges = []
    for piece, pid in sorted(vocab.items(), key=lambda kv: kv[1]):
        if not plain(pid):
            continue
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
        merges.extend(sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]])))
    unk = sp.id_to_piece(sp.unk_id())
    t = Tokenizer(models.BPE(vocab, merges, unk_token=unk, fuse_unk=True, byte_fallback=False))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    t.decoder = decoders.Sequence(LLAMA_DECODER)
    bos = sp.id_to_piece(sp.bos_id())
    t.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, sp.bos_id())])
    t.add_special_tokens([AddedToken(sp.id_to_piece(i), special=True, normalized=False)
                          for i in range(sp.get_piece_size()) if not plain(i)])
    # The conversion reproduces SentencePiece on text its nmt_nfkc normalizer leaves alone
    # (single spaces, no leading or trailing space); check it does on the CLI's prompts.
    for text in ["the sky is blue", "the engine holds", "Optimization profiles let one engine serve decode",
                 "A gearbox holds several gears", "unseen words like zebra"]:
        want, got = sp.encode(text), t.encode(text, add_special_tokens=False).ids
        if want != got:
            raise SystemExit(f"conversion differs from SentencePiece on {text!r}: {got} != {want}")
    return t


def dump_cases(cases):
    """cases.json with one case a line (reads and diffs better than one id a line)."""
    line = lambda x: json.dumps(x, ensure_ascii=False)  # noqa: E731
    variants = []
    for v in cases["variants"]:
        encode = ",\n".join("    " + line(c) for c in v["encode"])
        decode = ",\n".join("    " + line(c) for c in v["decode"])
        variants.append(f'  {{"name": {line(v["name"])}, "file": {line(v["file"])},\n'
                        f'   "encode": [\n{encode}\n   ],\n   "decode": [\n{decode}\n   ]}}')
    return f'{{"tokenizers": {line(cases["tokenizers"])}, "variants": [\n' + ",\n".join(variants) + "\n]}\n"


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    trained, merges = train_bpe()
    cases = {"tokenizers": tokenizers.__version__, "variants": []}
    for name, spec in VARIANTS.items():
        path = os.path.join(out_dir, f"{name}.json")
        build_variant(spec, trained, merges).save(path, pretty=False)
        t = Tokenizer.from_file(path)  # the reference is what was written
        encode = []
        decode = []
        for text in TEXTS:
            ids = t.encode(text, add_special_tokens=False).ids
            encode.append(dict(text=text, ids=ids))
            decode.append(dict(ids=ids, text=t.decode(ids, skip_special_tokens=True)))
        decode += decode_cases(t)
        cases["variants"].append(dict(name=name, file=f"{name}.json", encode=encode, decode=decode))
        print(f"{name}: vocab {t.get_vocab_size()}, {len(encode)} encode and {len(decode)} decode cases -> {path}")
    with open(os.path.join(out_dir, "cases.json"), "w", encoding="utf-8") as f:
        f.write(dump_cases(cases))

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sp_model = os.path.join(root, "tests", "data", "parity", "window_4x", "tokenizer.model")
    os.makedirs(os.path.join(out_dir, "window_4x"), exist_ok=True)
    path = os.path.join(out_dir, "window_4x", "tokenizer.json")
    sentencepiece_to_json(sp_model).save(path, pretty=True)
    print(f"window_4x: {sp_model} -> {path}")

    # A tokenizer gearbox does not implement (WordPiece), for the CLI's error path.
    wordpiece = Tokenizer(models.WordPiece({"[UNK]": 0, "<eos>": 1, "<bos>": 2, "the": 3, "sky": 4}, unk_token="[UNK]"))
    wordpiece.pre_tokenizer = pre_tokenizers.Whitespace()
    os.makedirs(os.path.join(out_dir, "wordpiece"), exist_ok=True)
    path = os.path.join(out_dir, "wordpiece", "tokenizer.json")
    wordpiece.save(path, pretty=True)
    print(f"wordpiece: -> {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/tokenizer")
