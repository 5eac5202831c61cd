#!/usr/bin/env python3
"""A Gemma-3-1B-shaped checkpoint with seeded random bf16 weights, and HF transformers'
teacher-forced log-probs for a prompt on it (bf16 and fp32, on the GPU when there is one):
the reference gearbox's CUDA device is compared with on the 1B shape.

  python3 python/tools/hf_gpu_reference.py OUT_DIR [--prompt-len 64] [--seed 0]
writes OUT_DIR/{config.json, model.safetensors, reference.json}
"""
import argparse
import json
import os
import time

import torch
import transformers
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

GEMMA3_1B = dict(vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
                 num_attention_heads=4, num_key_value_heads=1, head_dim=256, rms_norm_eps=1e-6,
                 sliding_window=512, query_pre_attn_scalar=256, max_position_embeddings=32768,
                 layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(26)],
                 rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                  "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
                 bos_token_id=2, eos_token_id=[1, 106], tie_word_embeddings=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(a.seed)
    config = Gemma3TextConfig(**GEMMA3_1B)
    t0 = time.time()
    with torch.device(dev):
        model = Gemma3ForCausalLM(config).to(torch.bfloat16).eval()
        with torch.no_grad():
            for name, w in model.named_parameters():
                w.copy_(torch.randn_like(w, dtype=torch.float32).mul_(0.1 if "norm" in name else 0.02))
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out, safe_serialization=True)
    g = torch.Generator().manual_seed(a.seed + 1)
    prompt = torch.randint(3, config.vocab_size, (1, a.prompt_len), generator=g)
    prompt[0, 0] = 2
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
