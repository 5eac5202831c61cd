"""Exports a decoder-only language model, transformers' own class for the checkpoint, to an
ExecuTorch .pte delegated to gearbox.

    python -m gearbox.export -o mini.pte                       # mini Gemma-3, method forward
    python -m gearbox.export -o m.pte --weights DIR            # a Hugging Face checkpoint
    python -m gearbox.export -o m.pte --methods prefill,decode # two methods, one engine

The checkpoint's config.json names the architecture (`model_type`); gearbox exports those
whose idioms its pattern rewrites lower fully (SUPPORTED_MODEL_TYPES) and refuses the rest
by name before any work. The mini config is transformers' Gemma3ForCausalLM with a tiny
config and seeded random weights (no download). The model runs through transformers'
static-cache export wrapper (TorchExportableModuleForDecoderOnlyLM), is exported with
torch.export over a dynamic sequence and lowered by GearboxPartitioner, which prints what
it delegated and why the rest was not.

Every method takes tokens [1, seq] and positions [1, seq] (int64, consecutive) and returns
logits [1, 1, vocab] (the last position; --all-logits: [1, seq, vocab]). `forward` picks
the profile automatically; `prefill` (default profile "prefill") and `decode` (default
profile "decode") share one engine and one execution context, so decode continues the
sequence prefill started.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from typing import Dict, List, Optional, Sequence

import torch

from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult

from gearbox.partitioner import GearboxPartitioner, Profile

# config.json model_type -> the engine's "model.family". Each is exported through
# transformers' own class and lowers fully (tests/executorch/hf_models_test.py).
SUPPORTED_MODEL_TYPES = {"gemma3": "gemma3", "gemma3_text": "gemma3", "llama": "llama", "mistral": "mistral",
                         "qwen2": "qwen2", "qwen3": "qwen3"}

# The mini config: the shape of src/models' mini Gemma-3 (two sliding layers, one global).
MINI_CONFIG = dict(vocab_size=2048, hidden_size=320, intermediate_size=640, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=80, sliding_window=512,
                   layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                   query_pre_attn_scalar=256, rope_theta=1e6, rope_local_base_freq=1e4, bos_token_id=2,
                   eos_token_id=[1, 106], max_position_embeddings=32768)

_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


class UnsupportedModelError(ValueError):
    """The checkpoint's architecture is not one gearbox.export lowers."""


def check_architecture(directory: str) -> str:
    """The checkpoint's model_type; raises UnsupportedModelError naming it when gearbox does
    not export it, FileNotFoundError when there is no config.json. Reads config.json only."""
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{directory}: no config.json (a Hugging Face checkpoint directory is expected)")
    with open(path) as f:
        config = json.load(f)
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedModelError(
            f"model_type {model_type!r} is not supported by gearbox.export; supported: "
            f"{', '.join(sorted(SUPPORTED_MODEL_TYPES))}")
    return model_type


def mini_model(seed: int = 1, dtype: torch.dtype = torch.float32):
    """transformers' Gemma3ForCausalLM with the mini config (MINI_CONFIG) and seeded random
    weights: normal with std 0.02, norm weights std 0.1 (so that Gemma's 1 + w is not 1)."""
    import transformers

    model = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**MINI_CONFIG))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.1 if "norm" in name else 0.02))
    return model.to(dtype).eval()


def load_model(directory: str, dtype: torch.dtype = torch.float32):
    """transformers' causal LM for a checkpoint directory (the text model of a multimodal
    Gemma-3), its weights in dtype (f32: what export_program traces)."""
    import transformers

    model_type = check_architecture(directory)
    if model_type == "gemma3":  # multimodal: the language model alone, its weights renamed
        config = transformers.AutoConfig.from_pretrained(directory).get_text_config()
        model = transformers.Gemma3ForCausalLM(config)
        _load_language_model(model, directory)
        return model.to(dtype).eval()
    return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).eval()


def checkpoint_dtype(directory: str) -> Optional[torch.dtype]:
    """The dtype config.json names for the weights (dtype or torch_dtype), if any."""
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    text = config.get("text_config") or {}
    name = config.get("dtype") or config.get("torch_dtype") or text.get("dtype") or text.get("torch_dtype")
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(name)


def _load_language_model(model, directory: str) -> None:
    from safetensors import safe_open

    files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"{directory}: no *.safetensors")
    wanted = model.state_dict()
    found: Dict[str, torch.Tensor] = {}
    prefixes = {"language_model.model.": "model.", "model.language_model.": "model.",
                "language_model.lm_head.": "lm_head.", "lm_head.": "lm_head."}
    for f in files:
        with safe_open(os.path.join(directory, f), framework="pt") as st:
            for key in st.keys():
                for old, new in prefixes.items():
                    if key.startswith(old) and new + key[len(old):] in wanted:
                        found[new + key[len(old):]] = st.get_tensor(key)
    if "lm_head.weight" not in found and model.config.tie_word_embeddings:
        found["lm_head.weight"] = found.get("model.embed_tokens.weight")
    missing = sorted(k for k in wanted if k not in found and not k.endswith("inv_freq"))
    if missing:
        raise KeyError(f"{directory}: the checkpoint has no tensor for {', '.join(missing[:3])}")
    model.load_state_dict(found, strict=False)


def model_metadata(model) -> Dict[str, str]:
    """Engine metadata (what `gearbox generate` reads): family, vocabulary, BOS and EOS."""
    config = model.config.get_text_config()
    eos = config.eos_token_id if config.eos_token_id is not None else []
    eos = eos if isinstance(eos, (list, tuple)) else [eos]
    meta = {"model.family": SUPPORTED_MODEL_TYPES.get(config.model_type, config.model_type),
            "model.vocab": str(config.vocab_size), "tokenizer.eos": ",".join(map(str, eos))}
    if config.bos_token_id is not None:
        meta["tokenizer.bos"] = str(config.bos_token_id)
    return meta


class DecoderLM(torch.nn.Module):
    """forward(tokens [1, T] int64, positions [1, T] int64) -> logits [1, 1, V] (all_logits:
    [1, T, V]) of a transformers causal LM over transformers' static (or hybrid) KV cache,
    the one TorchExportableModuleForDecoderOnlyLM builds. Positions are consecutive; the
    first one says where the call continues the sequence. Stateful: K/V of each call are kept."""

    def __init__(self, model, max_context: int, all_logits: bool = False):
        super().__init__()
        from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

        model.generation_config.cache_implementation = "static"
        self.exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=max_context).model
        self.all_logits = all_logits

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # TorchExportableModuleWithStaticCache names it static_cache, ...WithHybridCache cache.
        cache = self.exportable.static_cache if hasattr(self.exportable, "static_cache") else self.exportable.cache
        for layer in cache.layers:  # where this call continues the sequence, as the wrapper does
            layer.cumulative_length.copy_(positions[0, 0])
        out = self.exportable.model(input_ids=tokens, attention_mask=None, past_key_values=cache, use_cache=True,
                                    logits_to_keep=0 if self.all_logits else 1)
        return out.logits


class StoreWeightsAs(ExportedProgramPassBase):
    """Stores the f32 parameters of an edge program in another dtype (bf16, f16), after the
    graph is traced in f32: gearbox reads weights of that dtype and computes in f32, so the
    engine holds the smaller weights. Every parameter must then go to a delegate."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def call(self, exported_program) -> ExportedProgramPassResult:
        state = exported_program.state_dict
        for name in exported_program.graph_signature.inputs_to_parameters.values():
            if state[name].dtype == torch.float32:
                state[name] = torch.nn.Parameter(state[name].detach().to(self.dtype), requires_grad=False)
        return ExportedProgramPassResult(exported_program, False)


def default_profiles(max_seq: int) -> List[Profile]:
    """decode [1, 1, 1] then prefill [1, min(128, max), max], as `gearbox build`."""
    return [Profile("decode", 1, 1, 1), Profile("prefill", 1, min(128, max_seq), max_seq)]


def export_program(model, profiles: Sequence[Profile], methods: Sequence[str] = ("forward",), device: str = "auto",
                   max_context: Optional[int] = None, all_logits: bool = False, report: bool = True,
                   weight_dtype: Optional[torch.dtype] = None):
    """An ExecutorchProgramManager for a transformers causal LM (f32) with the given methods
    (forward, prefill, decode), each a DecoderLM over a KV cache of max_context rows
    (default: the largest profile max). weight_dtype (bf16, f16): the engine stores the
    weights in it; activations stay f32."""
    from gearbox.partitioner import to_edge_transform_and_lower

    for m in methods:
        if m not in ("forward", "prefill", "decode"):
            raise ValueError(f"unknown method {m!r}: forward, prefill or decode")
    names = [p.name for p in profiles]
    if "decode" in methods and "decode" not in names:
        raise ValueError("method decode needs a profile named decode")
    lo, hi = min(p.min for p in profiles), max(p.max for p in profiles)
    max_context = max_context or hi
    context = f"gearbox-{uuid.uuid4()}" if len(methods) > 1 else None
    metadata = model_metadata(model)
    programs: Dict[str, torch.export.ExportedProgram] = {}
    partitioners: Dict[str, list] = {}
    for m in methods:
        # Every method is exported over the same dynamic sequence, so that they lower to the
        # same network and share one engine; the decode profile takes seq 1 only.
        wrapper = DecoderLM(model, max_context, all_logits).eval()
        n = max(lo, min(hi, 4))
        args = (torch.ones(1, n, dtype=torch.long), torch.arange(n).unsqueeze(0))
        seq = torch.export.Dim("seq", min=lo, max=hi) if lo < hi else None
        dynamic = ({1: seq}, {1: seq}) if seq is not None else None
        with torch.no_grad():
            programs[m] = torch.export.export(wrapper, args, dynamic_shapes=dynamic, strict=True)
        default = {"forward": "automatic", "decode": "decode"}.get(m, "prefill" if "prefill" in names else "automatic")
        partitioners[m] = [GearboxPartitioner(profiles, default_profile=default, max_context=max_context,
                                              context=context, device=device, metadata=metadata, report=report)]
    passes = [StoreWeightsAs(weight_dtype)] if weight_dtype not in (None, torch.float32) else []
    manager = to_edge_transform_and_lower(programs, partitioner=partitioners, transform_passes=passes)
    for name in manager.methods:
        left = manager.exported_program(name).graph_signature.inputs_to_parameters
        if passes and left:
            raise ValueError(f"method {name}: weights {', '.join(sorted(left.values())[:3])} stay on ExecuTorch; "
                             f"weights stored as {weight_dtype} must all go to gearbox (export in f32)")
    return manager.to_executorch()


def parse_profile(text: str) -> Profile:
    parts = text.split(":")
    if len(parts) != 4:
        raise argparse.ArgumentTypeError(f"--profile {text!r}: expected NAME:MIN:OPT:MAX")
    try:
        return Profile(parts[0], int(parts[1]), int(parts[2]), int(parts[3]))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--profile {text!r}: {e}") from None


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gearbox.export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", required=True, help="the .pte to write")
    p.add_argument("--weights", help="a Hugging Face checkpoint directory of a supported architecture "
                   f"({', '.join(sorted(SUPPORTED_MODEL_TYPES))}; default: the mini Gemma-3)")
    p.add_argument("--seed", type=int, default=1, help="seed of the mini model's random weights")
    p.add_argument("--dtype", choices=sorted(_DTYPES),
                   help="the engine's weight dtype; activations are f32 (default: the checkpoint's; f32 mini)")
    p.add_argument("--max-seq", type=int, default=512, help="maximum context, the KV cache length")
    p.add_argument("--profile", type=parse_profile, action="append",
                   help="NAME:MIN:OPT:MAX over the sequence, repeatable (default decode:1:1:1 prefill:1:128:MAX)")
    p.add_argument("--methods", default="forward", help="forward, or prefill,decode")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="the device at run time")
    p.add_argument("--all-logits", action="store_true", help="logits for every position, not just the last")
    a = p.parse_args(argv)
    if a.max_seq < 1:
        p.error("--max-seq must be >= 1")
    profiles = a.profile or default_profiles(a.max_seq)
    if max(pr.max for pr in profiles) > a.max_seq:
        p.error("a profile's max is above --max-seq")
    methods = [m.strip() for m in a.methods.split(",")]
    dtype = _DTYPES.get(a.dtype)
    try:
        if a.weights:
            check_architecture(a.weights)  # refuses an unsupported architecture before any work
            dtype = dtype or checkpoint_dtype(a.weights)
            model = load_model(a.weights)
        else:
            model = mini_model(seed=a.seed)
        program = export_program(model, profiles, methods, a.device, max_context=a.max_seq,
                                 all_logits=a.all_logits, weight_dtype=dtype)
        tmp = f"{a.output}.tmp{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                program.write_to_file(f)
            os.replace(tmp, a.output)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    except (ValueError, KeyError, FileNotFoundError, RuntimeError, OSError) as e:
        print(f"gearbox.export: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.output}: methods {a.methods}, profiles "
          + ", ".join(f"{pr.name}[{pr.min},{pr.opt},{pr.max}]" for pr in profiles), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
