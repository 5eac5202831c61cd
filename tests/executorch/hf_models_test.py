#!/usr/bin/env python3
"""transformers' own decoder-only models through the delegate, as a user exports them:
TorchExportableModuleForDecoderOnlyLM(...).export() with a dynamic sequence, lowered by
gearbox.to_edge_transform_and_lower with profiles decode [1,1,1] and prefill [1,8,N].
Every compute node must land in one gearbox delegate (a model with final logit
soft-capping leaves exactly that on ExecuTorch, and the report names it), and a prompt
then decode steps through ExecuTorch's Python runtime must match eager PyTorch within 1e-4
(f32).

Needs $GEARBOX_CLI (the engine build) and $GEARBOX_ET_LIB (libgearbox_executorch).
usage: hf_models_test.py [MODEL ...]   (default: gemma3 llama qwen2 qwen3; the variants
       llama3_rope, linear_rope, gemma3_softcap, mistral run by name)
"""
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
ctypes.CDLL(os.environ["GEARBOX_ET_LIB"], mode=ctypes.RTLD_GLOBAL)  # registers GearboxBackend

import transformers  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402
from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM  # noqa: E402

from gearbox.partitioner import GearboxPartitioner, Profile, to_edge_transform_and_lower  # noqa: E402

ROWS = 32  # the static cache, the engine's context
TOLERANCE = 1e-4
COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64)
MODELS = {
    "llama": lambda: transformers.LlamaConfig(**COMMON),
    "qwen2": lambda: transformers.Qwen2Config(**COMMON),  # q/k/v biases
    "qwen3": lambda: transformers.Qwen3Config(**COMMON, head_dim=16),  # per-head q/k norms
    # Gemma norms (1 + w), GELU-tanh, embedding scale, a sliding window shorter than the prompt
    "gemma3": lambda: transformers.Gemma3TextConfig(**COMMON, head_dim=16, sliding_window=4,
                                                    layer_types=["sliding_attention", "full_attention"]),
    "mistral": lambda: transformers.MistralConfig(**COMMON, sliding_window=None),
    # Llama-3 frequency scaling: RoPE reads the graph's inv_freq buffer as its weight
    "llama3_rope": lambda: transformers.LlamaConfig(**COMMON, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16}),
    "linear_rope": lambda: transformers.LlamaConfig(**COMMON, rope_scaling={"rope_type": "linear", "factor": 4.0}),
    # tanh(x / c) * c after the lm_head: generic unary ops
    "gemma3_softcap": lambda: transformers.Gemma3TextConfig(**COMMON, head_dim=16, sliding_window=4,
                                                            layer_types=["sliding_attention", "full_attention"],
                                                            final_logit_softcapping=3.0),
    # a window longer than the pattern's first sample prompt (12) and shorter than the cache
    "gemma3_wide_window": lambda: transformers.Gemma3TextConfig(**COMMON, head_dim=16, sliding_window=16,
                                                                layer_types=["sliding_attention", "full_attention"]),
}
LEFT_ON_EXECUTORCH = {}  # name: (compute nodes left on ExecuTorch, what the report says)
STEPS = [([3, 17, 42, 9, 100, 5], 0), ([77], 6), ([12], 7), ([1], 8)]  # a prompt, then decode


def check(cond, message):
    if not cond:
        sys.exit(f"FAILED: {message}")
    print(f"ok: {message}")


def run_model(name, runtime):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(MODELS[name]()).eval()
    model.generation_config.cache_implementation = "static"
    wrapper = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=ROWS)
    seq = torch.export.Dim("seq", min=1, max=ROWS)
    ep = wrapper.export(input_ids=torch.ones(1, 4, dtype=torch.long), cache_position=torch.arange(4),
                        dynamic_shapes={"input_ids": {1: seq}, "cache_position": {0: seq}})
    partitioner = GearboxPartitioner([Profile("decode", 1, 1, 1), Profile("prefill", 1, 8, ROWS)],
                                     default_profile="automatic", device="cpu")
    program = to_edge_transform_and_lower(ep, partitioner=[partitioner]).to_executorch()
    report = partitioner.last_report
    left, reason = LEFT_ON_EXECUTORCH.get(name, (0, ""))
    check(report.compute > 0 and report.left_compute == left and report.delegates == 1 and reason in report.text(),
          f"{name}: {report.delegated}/{report.compute} compute nodes in {report.delegates} delegate"
          + (f", {left} left on ExecuTorch for {reason}" if left else ""))
    method = runtime.load_program(program.buffer).load_method("forward")
    # Eager reference: the wrapper's static-cache module, fed the same calls.
    eager = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=ROWS).model
    for ids, start in STEPS:
        tokens = torch.tensor([ids])
        positions = torch.arange(start, start + len(ids))
        with torch.no_grad():
            want = eager(input_ids=tokens, cache_position=positions)
        got = method.execute([tokens, positions])[0]
        err = (got - want).abs().max().item()
        check(got.shape == want.shape and err < TOLERANCE,
              f"{name}: {len(ids)} tokens at {start} match eager (max abs error {err:.2g})")


def main():
    names = sys.argv[1:] or ["gemma3", "llama", "qwen2", "qwen3"]
    runtime = Runtime.get()
    for name in names:
        run_model(name, runtime)
    print("hf models ok")


if __name__ == "__main__":
    main()
