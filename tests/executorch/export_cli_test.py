#!/usr/bin/env python3
"""`python -m gearbox.export --weights DIR` on a tiny random checkpoint of every
architecture it supports (transformers' own class, saved with save_pretrained): the CLI
delegates 100% of the compute nodes, and the .pte run by ExecuTorch's Python runtime (a
prompt, then decode steps) matches transformers' eager model within 1e-4 (f32). With
--dtype bf16 the engine holds bf16 weights and computes in f32: it matches the eager model
with bf16-rounded weights. An unsupported architecture is refused by name before any work,
leaving no output file.

Needs $GEARBOX_CLI (the engine build) and $GEARBOX_ET_LIB (libgearbox_executorch).
usage: export_cli_test.py [MODEL_TYPE ...]   (default: every supported model_type; gemma3 is
       the multimodal checkpoint, whose language model is exported)
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile

import torch

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
sys.path.insert(0, PYTHON_DIR)
ctypes.CDLL(os.environ["GEARBOX_ET_LIB"], mode=ctypes.RTLD_GLOBAL)  # registers GearboxBackend

import transformers  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402

from gearbox.export import SUPPORTED_MODEL_TYPES, DecoderLM, load_model  # noqa: E402

ROWS = 32
TOLERANCE = 1e-4
COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64)
GEMMA3_TEXT = dict(COMMON, head_dim=16, sliding_window=4, layer_types=["sliding_attention", "full_attention"])
CONFIGS = {
    "gemma3": lambda: transformers.Gemma3Config(
        text_config=dict(GEMMA3_TEXT, vocab_size=300), mm_tokens_per_image=4, boi_token_index=297,
        eoi_token_index=298, image_token_index=299,
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=28, patch_size=14)),
    "gemma3_text": lambda: transformers.Gemma3TextConfig(**GEMMA3_TEXT),
    "llama": lambda: transformers.LlamaConfig(**COMMON),
    "mistral": lambda: transformers.MistralConfig(**COMMON, sliding_window=None),
    "qwen2": lambda: transformers.Qwen2Config(**COMMON),
    "qwen3": lambda: transformers.Qwen3Config(**COMMON, head_dim=16),
}
STEPS = [([3, 17, 42, 9, 100, 5], 0), ([77], 6), ([12], 7)]


def check(cond, message):
    if not cond:
        sys.exit(f"FAILED: {message}")
    print(f"ok: {message}")


def export(args, env=None):
    return subprocess.run([sys.executable, "-m", "gearbox.export", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=PYTHON_DIR, **(env or {})))


def matches_eager(name, method, model):
    eager = DecoderLM(model, ROWS).eval()
    for ids, start in STEPS:
        tokens = torch.tensor([ids])
        positions = torch.arange(start, start + len(ids)).unsqueeze(0)
        with torch.no_grad():
            want = eager(tokens, positions)
        got = method.execute([tokens, positions])[0]
        err = (got - want).abs().max().item()
        check(got.shape == want.shape and err < TOLERANCE,
              f"{name}: {len(ids)} tokens at {start} match eager (max abs error {err:.2g})")


def export_checkpoint(name, directory, pte, *flags):
    out = export(["-o", pte, "--weights", directory, "--max-seq", str(ROWS), "--device", "cpu",
                  "--profile", "decode:1:1:1", "--profile", f"prefill:1:8:{ROWS}", *flags])
    report = [line for line in out.stderr.splitlines() if line.startswith("gearbox: delegated")]
    check(out.returncode == 0 and report and "(100%) to 1 delegate" in report[0],
          f"{name}: the CLI exports it: {report[0] if report else out.stderr[-2000:]}")


def run_model_type(model_type, runtime, tmp):
    torch.manual_seed(0)
    config = CONFIGS[model_type]()
    if model_type == "gemma3":
        saved = transformers.Gemma3ForConditionalGeneration(config).eval()
    else:
        saved = transformers.AutoModelForCausalLM.from_config(config).eval()
    directory = os.path.join(tmp, model_type)
    saved.save_pretrained(directory)
    model = load_model(directory, torch.float32)  # the class the CLI exports
    ids = torch.tensor([STEPS[0][0]])
    with torch.no_grad():
        err = (saved(input_ids=ids).logits[:, -1:] - model(input_ids=ids).logits[:, -1:]).abs().max().item()
    check(err < 1e-6, f"{model_type}: {type(model).__name__} loads the checkpoint (max abs error {err:.2g})")
    pte = os.path.join(tmp, f"{model_type}.pte")
    export_checkpoint(model_type, directory, pte)
    matches_eager(model_type, runtime.load_program(pte).load_method("forward"), model)
    if model_type == "llama":
        pte = os.path.join(tmp, "llama_bf16.pte")
        export_checkpoint("llama --dtype bf16", directory, pte, "--dtype", "bf16")
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
        matches_eager("llama --dtype bf16", runtime.load_program(pte).load_method("forward"), model)


def main():
    runtime = Runtime.get()
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, f)
        out = export(["-o", os.path.join(tmp, "gpt2.pte"), "--weights", tmp], env={"GEARBOX_CLI": "/nonexistent"})
        check(out.returncode != 0 and "model_type 'gpt2' is not supported by gearbox.export; supported: "
              + ", ".join(sorted(SUPPORTED_MODEL_TYPES)) in out.stderr and not os.path.exists(
                  os.path.join(tmp, "gpt2.pte")) and "Traceback" not in out.stderr,
              "gpt2 is refused by name before any work, no output file")
        for model_type in sys.argv[1:] or sorted(CONFIGS):
            run_model_type(model_type, runtime, tmp)
    print("export cli ok")


if __name__ == "__main__":
    main()
