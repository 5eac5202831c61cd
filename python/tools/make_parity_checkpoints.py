#!/usr/bin/env python3
"""Writes the small checkpoints and HF-transformers reference outputs that gearbox's
parity tests compare against (tests/data/parity/<case>/), one or more per model family.

Each case is a *ForCausalLM (Gemma-3, Llama, Mistral, Qwen2, Qwen3) with seeded random
weights (norm weights and biases too, so that every weight matters), saved with
save_pretrained, its config.json rewritten in the transformers 4.x spelling where the case
says so, plus expected.json:
  prompt_ids        the token ids the tests feed
  token_logprobs    teacher-forced log p(id_i | ids_<i) for i >= 1, fp32 eager attention
  greedy_ids        32 greedily generated ids after the prompt
  min_greedy_margin the smallest top-1 minus top-2 logit gap of those steps (a tiny gap
                    would make the greedy ids fragile)

Run it with torch and transformers installed (not needed by CI, which only reads the
files):  python3 python/tools/make_parity_checkpoints.py tests/data/parity [case ...]
(all cases without names).
"""
import json
import os
import sys

import torch
import transformers
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

MODELS = {
    "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM),
    "llama": (LlamaConfig, LlamaForCausalLM),
    "mistral": (MistralConfig, MistralForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
}

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
    # Llama 3.x: llama3 RoPE scaling whose bands all occur at head_dim 12 (wavelengths 6, 56
    # and 500+ against 16 and 64), head_dim written apart from hidden / heads, GQA 6:2,
    # untied lm_head; as transformers 5.x writes it.
    "llama3_5x": dict(model="llama",
                      config=dict(vocab_size=101, hidden_size=48, intermediate_size=72, num_hidden_layers=2,
                                  num_attention_heads=6, num_key_value_heads=2, head_dim=12, rms_norm_eps=1e-5,
                                  max_position_embeddings=256, tie_word_embeddings=False,
                                  rope_parameters=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                       high_freq_factor=4.0, original_max_position_embeddings=64,
                                                       rope_theta=500000.0)),
                      spelling="5.x", prompt_len=18, seed=33),
    # Llama 2 style in the 4.x spelling (rope_theta, rope_scaling with the old "type" key,
    # no head_dim): linear RoPE scaling by 3, full multi-head attention, tied embeddings,
    # and llama's optional attention and MLP biases.
    "llama2_4x": dict(model="llama",
                      config=dict(vocab_size=89, hidden_size=40, intermediate_size=60, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True,
                                  attention_bias=True, mlp_bias=True, max_position_embeddings=512,
                                  rope_parameters=dict(rope_type="linear", factor=3.0, rope_theta=10000.0)),
                      spelling="4.x", prompt_len=15, seed=4),
    # Qwen2: q/k/v biases, tied embeddings, GQA 6:2, and sliding windows (5) from
    # use_sliding_window + max_window_layers in the 4.x spelling, so layers 1 and 2 slide.
    "qwen2_4x": dict(model="qwen2",
                     config=dict(vocab_size=97, hidden_size=48, intermediate_size=56, num_hidden_layers=3,
                                 num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True,
                                 use_sliding_window=True, sliding_window=5, max_window_layers=1,
                                 max_position_embeddings=1024, rope_parameters=dict(rope_type="default",
                                                                                    rope_theta=1000000.0)),
                     spelling="4.x", prompt_len=16, seed=33),
    # Qwen3: per-head q/k RMSNorm, head_dim 16 while hidden / heads is 10, GQA 4:2, untied;
    # as transformers 5.x writes it (layer_types, flat rope_parameters).
    "qwen3_5x": dict(model="qwen3",
                     config=dict(vocab_size=83, hidden_size=40, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
                                 max_position_embeddings=1024, rope_parameters=dict(rope_type="default",
                                                                                    rope_theta=1000000.0)),
                     spelling="5.x", prompt_len=17, seed=26),
    # Mistral: a sliding window of 6 on every layer, GQA 4:1, untied; 4.x spelling without
    # head_dim.
    "mistral_4x": dict(model="mistral",
                       config=dict(vocab_size=79, hidden_size=32, intermediate_size=68, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=1, sliding_window=6,
                                   tie_word_embeddings=False, max_position_embeddings=2048,
                                   rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
                       spelling="4.x", prompt_len=20, seed=7),
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


def to_4x_decoder_spelling(cfg):
    """transformers 4.x wrote rope_theta and rope_scaling (with "type" before 4.45) beside the
    other fields, and Llama and Mistral configs before 4.45 had no head_dim; Qwen2 configs
    named their windows with use_sliding_window and max_window_layers, not layer_types."""
    params = cfg.pop("rope_parameters")
    cfg["rope_theta"] = params.pop("rope_theta")
    rope_type = params.pop("rope_type")
    cfg["rope_scaling"] = None if rope_type == "default" else {"type": rope_type, **params}
    cfg.pop("layer_types", None)
    if cfg["model_type"] in ("llama", "mistral"):
        assert cfg["head_dim"] == cfg["hidden_size"] // cfg["num_attention_heads"]
        cfg.pop("head_dim")
    return cfg


def main(out_root, names):
    for name in names:
        case = CASES[name]
        family = case.get("model", "gemma3")
        config_class, model_class = MODELS[family]
        torch.manual_seed(case["seed"])
        if family == "gemma3":
            config = config_class(**case["config"], torch_dtype="float32")
        else:
            config = config_class(**case["config"], dtype="float32", attn_implementation="eager")
        model = model_class(config).eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "norm" not in pname:
                    p.copy_(torch.randn_like(p) * 0.05)
                elif family == "gemma3":  # Gemma's norms scale by (1 + w)
                    p.copy_(torch.randn_like(p) * 0.1)
                else:
                    p.copy_(1.0 + torch.randn_like(p) * 0.1)
        out = os.path.join(out_root, name)
        os.makedirs(out, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        cfg_path = os.path.join(out, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        if case["spelling"] == "4.x":
            cfg = to_4x_spelling(cfg) if family == "gemma3" else to_4x_decoder_spelling(cfg)
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
        if name == "window_4x":
            write_tokenizer(out, config.vocab_size)
        gen_cfg = os.path.join(out, "generation_config.json")
        if os.path.exists(gen_cfg):
            os.remove(gen_cfg)

        g = torch.Generator().manual_seed(case["seed"] + 100)
        prompt = torch.randint(3, config.vocab_size, (1, case["prompt_len"]), generator=g)
        prompt[0, 0] = 2 if family == "gemma3" else 1  # bos
        with torch.no_grad():
            logits = model(prompt).logits.float()
            logp = torch.log_softmax(logits, dim=-1)
            token_logprobs = [logp[0, i - 1, prompt[0, i]].item() for i in range(1, prompt.shape[1])]
            ids = prompt.clone()
            greedy = []
            margin = float("inf")
            for _ in range(GREEDY_STEPS):  # full recompute: no cache involved in the reference
                last = model(ids).logits[0, -1]
                top2 = torch.topk(last, 2).values
                margin = min(margin, float(top2[0] - top2[1]))
                nxt = int(last.argmax())
                greedy.append(nxt)
                ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
        result = {"prompt_ids": prompt[0].tolist(), "token_logprobs": token_logprobs, "greedy_ids": greedy}
        if family != "gemma3":
            result["min_greedy_margin"] = margin
        result.update({"transformers": transformers.__version__, "torch": torch.__version__})
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump(result, f, indent=1)
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, greedy margin {margin:.3g} -> {out}")


if __name__ == "__main__":
    root = sys.argv[1] if len(sys.argv) > 1 else "tests/data/parity"
    main(root, sys.argv[2:] or list(CASES))
