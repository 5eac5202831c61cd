#!/usr/bin/env python3
"""Writes the .pte programs and eager-PyTorch references the delegate tests use. The model
is transformers' Gemma3ForCausalLM with the mini config (gearbox.export.mini_model: random
weights, two sliding-window layers and a global one), exported as `python -m gearbox.export`
does (gearbox.export.DecoderLM: tokens [1, seq], positions [1, seq] -> last logits):

  mini.pte         method forward: profiles decode [1,1,1], prefill [1,16,32]; automatic
  mini_pd.pte      methods prefill + decode sharing one engine and one context
  two_engines.pte  method forward with two models, one engine each: A lists [decode,
                   prefill], B lists [prefill, decode] (an index means different regimes)
  llama.pte        transformers' LlamaForCausalLM (tiny, random) exported by its own
                   TorchExportableModuleForDecoderOnlyLM(...).export(): input_ids [1, seq],
                   cache_position [seq], logits of every position
  qwen2.pte        the same for Qwen2ForCausalLM (q/k/v biases)
  qwen3.pte        the same for Qwen3ForCausalLM (per-head q/k norms)
  reference.json   eager logits of transformers' model for the scenarios the tests run

usage: make_test_programs.py OUTDIR [--dtype f32|bf16]   (GEARBOX_CLI names the gearbox CLI)
       bf16: the engines hold bf16 weights (activations f32); the references use the
       same bf16-rounded weights in f32
"""
import json
import os
import sys

import torch
import transformers
from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from gearbox.export import DecoderLM, StoreWeightsAs, export_program, mini_model  # noqa: E402
from gearbox.partitioner import GearboxPartitioner, Profile, to_edge_transform_and_lower  # noqa: E402

MAX_CONTEXT = 64
PROFILES = [Profile("decode", 1, 1, 1), Profile("prefill", 1, 16, 32)]
PROMPT = [2, 651, 1974, 563, 1000]
NEXT = [77, 1500]
HF_COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)
HF_MODELS = {
    "llama": lambda: transformers.LlamaConfig(**HF_COMMON),
    "qwen2": lambda: transformers.Qwen2Config(**HF_COMMON),
    "qwen3": lambda: transformers.Qwen3Config(**HF_COMMON, head_dim=16),
}
HF_ROWS = 32  # their static cache
HF_STEPS = [([3, 17, 42, 9, 100, 5], 0), ([77], 6), ([12], 7)]  # a prompt, then decode


def eager_logits(model, steps):
    """Logits of transformers' model for each call of `steps` [(ids, start)], one sequence
    over a fresh static cache."""
    lm = DecoderLM(model, MAX_CONTEXT).eval()
    out = []
    with torch.no_grad():
        for ids, start in steps:
            t = torch.tensor([ids])
            p = torch.arange(start, start + len(ids)).unsqueeze(0)
            out.append(lm(t, p).float().flatten().tolist())
    return out


class TwoEngines(torch.nn.Module):
    def __init__(self, a, b):
        super().__init__()
        self.a = DecoderLM(a, MAX_CONTEXT)
        self.b = DecoderLM(b, MAX_CONTEXT)

    def forward(self, tokens, positions):
        return self.a(tokens, positions), self.b(tokens, positions)


def in_submodule(name):
    def claim(node):
        return any(path == name for path, _ in node.meta.get("nn_module_stack", {}).values())
    return claim


def rounded_mini(seed, dtype):
    """The mini model in f32 with its weights rounded to dtype (what the engine holds)."""
    model = mini_model(seed=seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).float())
    return model


def export_hf(name, out_dir, reference):
    """NAME.pte as a user exports transformers' model of HF_MODELS[name], and its eager
    logits of HF_STEPS in reference[name]."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(HF_MODELS[name]()).eval()
    model.generation_config.cache_implementation = "static"
    seq = torch.export.Dim("seq", min=1, max=HF_ROWS)
    ep = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=HF_ROWS).export(
        input_ids=torch.ones(1, 4, dtype=torch.long), cache_position=torch.arange(4),
        dynamic_shapes={"input_ids": {1: seq}, "cache_position": {0: seq}})
    partitioner = GearboxPartitioner(PROFILES, default_profile="automatic")
    program = to_edge_transform_and_lower(ep, partitioner=[partitioner]).to_executorch()
    report = partitioner.last_report
    if report.left_compute or report.delegates != 1:
        sys.exit(f"{name}.pte: {report.delegated} of {report.compute} compute nodes in {report.delegates} "
                 f"delegates:\n{report.text()}")
    with open(os.path.join(out_dir, f"{name}.pte"), "wb") as f:
        program.write_to_file(f)
    eager = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=HF_ROWS).model
    with torch.no_grad():
        reference[name] = [eager(input_ids=torch.tensor([ids]), cache_position=torch.arange(start, start + len(ids)))
                           .flatten().tolist() for ids, start in HF_STEPS]


def main():
    out_dir = sys.argv[1]
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[sys.argv[3] if len(sys.argv) > 3 else "f32"]
    os.makedirs(out_dir, exist_ok=True)
    model = rounded_mini(1, dtype)
    steps = [(PROMPT, 0), ([NEXT[0]], len(PROMPT)), ([NEXT[1]], len(PROMPT) + 1)]
    reference = {"prompt": PROMPT, "next": NEXT, "vocab": model.config.vocab_size,
                 "max_context": MAX_CONTEXT, "mini": eager_logits(model, steps)}

    for name, methods in (("mini.pte", ["forward"]), ("mini_pd.pte", ["prefill", "decode"])):
        program = export_program(model, PROFILES, methods, device="auto", max_context=MAX_CONTEXT, weight_dtype=dtype)
        with open(os.path.join(out_dir, name), "wb") as f:
            program.write_to_file(f)

    a, b = model, rounded_mini(2, dtype)
    two = TwoEngines(a, b).eval()
    seq = torch.export.Dim("seq", min=1, max=32)
    args = (torch.ones(1, 4, dtype=torch.long), torch.arange(4).unsqueeze(0))
    ep = torch.export.export(two, args, dynamic_shapes=({1: seq}, {1: seq}), strict=True)
    pa = GearboxPartitioner(PROFILES, default_profile="automatic", max_context=MAX_CONTEXT, claim=in_submodule("a"))
    pb = GearboxPartitioner(list(reversed(PROFILES)), default_profile="automatic", max_context=MAX_CONTEXT,
                            claim=in_submodule("b"))
    passes = [StoreWeightsAs(dtype)] if dtype != torch.float32 else []
    program = to_edge_transform_and_lower(ep, partitioner=[pa, pb], transform_passes=passes).to_executorch()
    for which, p in (("A", pa), ("B", pb)):
        report = p.last_report
        if report.left_compute or report.delegates != 1:
            sys.exit(f"two_engines.pte: engine {which} took {report.delegated} of {report.compute} compute nodes "
                     f"in {report.delegates} delegates:\n{report.text()}")
    with open(os.path.join(out_dir, "two_engines.pte"), "wb") as f:
        program.write_to_file(f)
    reference["two_engines_a"] = eager_logits(a, [([NEXT[0]], 0)])[0]
    reference["two_engines_b"] = eager_logits(b, [([NEXT[0]], 0)])[0]
    reference["hf_steps"] = [{"ids": ids, "start": start} for ids, start in HF_STEPS]
    for name in HF_MODELS:
        export_hf(name, out_dir, reference)
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(reference, f)
    hf = ", ".join(f"{n}.pte" for n in HF_MODELS)
    print(f"wrote mini.pte, mini_pd.pte, two_engines.pte, {hf}, reference.json to {out_dir}")


if __name__ == "__main__":
    main()
