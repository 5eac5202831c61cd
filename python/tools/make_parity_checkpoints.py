#!/usr/bin/env python3
"""Writes the small Gemma-3 checkpoints and HF-transformers reference outputs that
gearbox's parity tests compare against (tests/data/parity/<case>/).

Each case is a Gemma3ForCausalLM with seeded random weights (norm weights too, so that
every weight matters), saved with save_pretrained, plus expected.json:
  prompt_ids        the token ids the tests feed
  token_logprobs    teacher-forced log p(id_i | ids_<i) for i >= 1, fp32 eager attention
  greedy_ids        32 greedily generated ids after the prompt

Run it with torch and transformers installed (not needed by CI, which only reads the
files):  python3 python/tools/make_parity_checkpoints.py tests/data/parity
"""
import json
import os
import sys

import torch
import transformers
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

CASES = {
    # A context longer than the sliding window; one KV head; query_pre_attn_scalar differs
    # from head_dim; the config rewritten in the transformers 4.x spelling.
    "window_4x": dict(config=dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                  num_attention_heads=4, num_key_value_heads=1, head_dim=16, sliding_window=8,
                                  layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                                  query_pre_attn_scalar=24),
                      spelling="4.x", prompt_len=20, seed=1),
    # More than one KV head, untied embeddings, the transformers 5.x spelling as written.
    "gqa_5x": dict(config=dict(vocab_size=96, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=12, sliding_window=6,
                               layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=12,
                               tie_word_embeddings=False),
                   spelling="5.x", prompt_len=14, seed=2),
}
GREEDY_STEPS = 32

TOKENIZER_TEXT = """The sky is blue because air scatters short wavelengths of sunlight more than long ones.
Optimization profiles let one engine serve decode and prefill with kernels tuned for each.
A gearbox holds several gears; the engine holds several profiles and one copy of the weights.
"""


def write_tokenizer(out_dir, vocab_size):
    """A small SentencePiece model with Gemma's special ids (pad 0, eos 1, bos 2, unk 3),
    so the text path of the CLI is tested on a real tokenizer.model."""
    import sentencepiece as spm
    corpus = os.path.join(out_dir, "corpus.txt")
    with open(corpus, "w") as f:
        f.write(TOKENIZER_TEXT * 20)
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(out_dir, "tokenizer"),
                                   vocab_size=vocab_size, model_type="bpe", character_coverage=1.0, pad_id=0,
                                   eos_id=1, bos_id=2, unk_id=3, hard_vocab_limit=True, minloglevel=2)
    os.remove(corpus)
    os.remove(os.path.join(out_dir, "tokenizer.vocab"))


def to_4x_spelling(cfg):
    """transformers 4.x wrote rope_theta / rope_local_base_freq and a sliding-window pattern."""
    params = cfg.pop("rope_parameters")
    cfg["rope_theta"] = params["full_attention"]["rope_theta"]
    cfg["rope_local_base_freq"] = params["sliding_attention"]["rope_theta"]
    cfg["rope_scaling"] = None
    types = cfg.pop("layer_types")
    pattern = types.index("full_attention") + 1
    assert all((t == "full_attention") == ((i + 1) % pattern == 0) for i, t in enumerate(types))
    cfg["sliding_window_pattern"] = pattern
    cfg.pop("_sliding_window_pattern", None)
    return cfg


def main(out_root):
    for name, case in CASES.items():
        torch.manual_seed(case["seed"])
        config = Gemma3TextConfig(**case["config"], torch_dtype="float32")
        model = Gemma3ForCausalLM(config).eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():
                p.copy_(torch.randn_like(p) * (0.1 if "norm" in pname else 0.05))
        out = os.path.join(out_root, name)
        os.makedirs(out, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        cfg_path = os.path.join(out, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        if case["spelling"] == "4.x":
            cfg = to_4x_spelling(cfg)
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
        if name == "window_4x":
            write_tokenizer(out, config.vocab_size)
        gen_cfg = os.path.join(out, "generation_config.json")
        if os.path.exists(gen_cfg):
            os.remove(gen_cfg)

        g = torch.Generator().manual_seed(case["seed"] + 100)
        prompt = torch.randint(3, config.vocab_size, (1, case["prompt_len"]), generator=g)
        prompt[0, 0] = 2  # bos
        with torch.no_grad():
            logits = model(prompt).logits.float()
            logp = torch.log_softmax(logits, dim=-1)
            token_logprobs = [logp[0, i - 1, prompt[0, i]].item() for i in range(1, prompt.shape[1])]
            ids = prompt.clone()
            greedy = []
            for _ in range(GREEDY_STEPS):  # full recompute: no cache involved in the reference
                nxt = int(model(ids).logits[0, -1].argmax())
                greedy.append(nxt)
                ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump({"prompt_ids": prompt[0].tolist(), "token_logprobs": token_logprobs, "greedy_ids": greedy,
                       "transformers": transformers.__version__, "torch": torch.__version__}, f, indent=1)
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters -> {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/parity")
