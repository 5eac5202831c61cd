#!/usr/bin/env python3
"""A checkpoint of a real model's shape (Gemma-3-1B, Llama-3.2-1B, Qwen3-0.6B) with seeded
random bf16 weights, and HF transformers' teacher-forced log-probs for a prompt on it (bf16
and fp32, on the GPU when there is one): the reference gearbox's CUDA device is compared with.

  python3 python/tools/hf_gpu_reference.py OUT_DIR [--arch gemma3-1b] [--prompt-len 64] [--seed 0]
writes OUT_DIR/{config.json, model.safetensors, reference.json}
"""
import argparse
import json
import os
import time

import torch
import transformers
from transformers import (AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, Qwen3Config)

GEMMA3_1B = dict(vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
                 num_attention_heads=4, num_key_value_heads=1, head_dim=256, rms_norm_eps=1e-6,
                 sliding_window=512, query_pre_attn_scalar=256, max_position_embeddings=32768,
                 layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(26)],
                 rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                  "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
                 bos_token_id=2, eos_token_id=[1, 106], tie_word_embeddings=True)

# The published configs' shapes and math (rope, norms, tying); weights are random.
LLAMA32_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                  num_attention_heads=32, num_key_value_heads=8, head_dim=64, rms_norm_eps=1e-5,
                  max_position_embeddings=131072, tie_word_embeddings=True, bos_token_id=128000,
                  eos_token_id=[128001, 128008, 128009],
                  rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192})
QWEN3_06B = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                 max_position_embeddings=40960, tie_word_embeddings=True, bos_token_id=151643,
                 eos_token_id=151645, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
ARCHS = {"gemma3-1b": (Gemma3TextConfig, GEMMA3_1B), "llama3.2-1b": (LlamaConfig, LLAMA32_1B),
         "qwen3-0.6b": (Qwen3Config, QWEN3_06B)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--arch", choices=sorted(ARCHS), default="gemma3-1b")
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(a.seed)
    config_class, fields = ARCHS[a.arch]
    config = config_class(**fields)
    t0 = time.time()
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16).eval()
        with torch.no_grad():
            for name, w in model.named_parameters():
                w.copy_(torch.randn_like(w, dtype=torch.float32).mul_(0.1 if "norm" in name else 0.02))
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out, safe_serialization=True)
    g = torch.Generator().manual_seed(a.seed + 1)
    prompt = torch.randint(3, config.vocab_size, (1, a.prompt_len), generator=g)
    prompt[0, 0] = config.bos_token_id
    ref = {"prompt_ids": prompt[0].tolist(), "transformers": transformers.__version__, "torch": torch.__version__,
           "device": dev}
    with torch.no_grad():
        for dtype in (torch.bfloat16, torch.float32):
            m = model.to(dtype)
            logp = torch.log_softmax(m(prompt.to(dev)).logits.float(), dim=-1)[0]
            ref[str(dtype).split(".")[1]] = [logp[i - 1, prompt[0, i]].item() for i in range(1, a.prompt_len)]
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(ref, f)
    print(f"wrote {a.out} in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
