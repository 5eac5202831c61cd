"""Gemma-3 (text) written with gearbox ops: loads a Hugging Face checkpoint directory, or
builds the mini config with seeded random weights (no download).

Parameter names are the checkpoint's ("model.layers.0.self_attn.q_proj.weight", ...), so
the engine's weights keep HF names. The network matches src/models/gemma3.cpp op for op.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import List, Optional

import torch
from torch import nn

from gearbox import ops  # noqa: F401  (registers torch.ops.gearbox)
from gearbox.ops import EagerContext

G = torch.ops.gearbox


@dataclasses.dataclass
class Gemma3Config:
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    layer_is_sliding: List[bool]
    sliding_window: int = 512
    rms_norm_eps: float = 1e-6
    rope_theta_global: float = 1e6
    rope_theta_local: float = 1e4
    rope_linear_factor_global: float = 1.0
    query_pre_attn_scalar: float = 256.0
    tie_embeddings: bool = True
    max_context: int = 2048
    all_logits: bool = False
    bos_token_id: int = 2
    eos_token_ids: tuple = (1, 106)

    @staticmethod
    def mini(max_context: int = 2048) -> "Gemma3Config":
        """The seed's mini config (src/models/gemma3.cpp gemma3_mini_config)."""
        return Gemma3Config(vocab=2048, hidden=320, intermediate=640, layers=3, heads=4, kv_heads=1, head_dim=80,
                            layer_is_sliding=[True, True, False], sliding_window=512, max_context=max_context)

    @staticmethod
    def from_hf(directory: str, max_context: int = 2048) -> "Gemma3Config":
        """Reads config.json (transformers 4.x and 5.x spellings, multimodal text_config).
        Fields gearbox does not implement raise ValueError naming the field."""
        with open(os.path.join(directory, "config.json")) as f:
            c = json.load(f)
        check_architecture(c, directory)
        c = c.get("text_config", c)
        for field, ok in (("attn_logit_softcapping", None), ("final_logit_softcapping", None),
                          ("attention_bias", False)):
            if c.get(field, ok) not in (ok,):
                raise ValueError(f"config.json: {field}={c[field]!r} is not supported by gearbox")
        layers = c["num_hidden_layers"]
        if "layer_types" in c:
            sliding = [t == "sliding_attention" for t in c["layer_types"]]
        else:
            pattern = c.get("sliding_window_pattern", 6)
            sliding = [(i + 1) % pattern != 0 for i in range(layers)]
        theta_global = c.get("rope_theta", 1e6)
        theta_local = c.get("rope_local_base_freq", 1e4)
        factor = 1.0
        scaling = c.get("rope_scaling")
        params = c.get("rope_parameters")
        if params:  # transformers 5.x: per layer type
            full = params.get("full_attention", params)
            local = params.get("sliding_attention", {})
            theta_global = full.get("rope_theta", theta_global)
            theta_local = local.get("rope_theta", theta_local)
            if full.get("rope_type", "default") == "linear":
                factor = float(full["factor"])
            elif full.get("rope_type", "default") != "default":
                raise ValueError(f"config.json: rope_type {full['rope_type']!r} is not supported by gearbox")
        elif scaling:
            if scaling.get("rope_type", scaling.get("type")) != "linear":
                raise ValueError(f"config.json: rope_scaling {scaling!r} is not supported by gearbox")
            factor = float(scaling["factor"])
        eos = c.get("eos_token_id", 1)
        return Gemma3Config(
            vocab=c["vocab_size"], hidden=c["hidden_size"], intermediate=c["intermediate_size"], layers=layers,
            heads=c["num_attention_heads"], kv_heads=c["num_key_value_heads"], head_dim=c.get("head_dim", 256),
            layer_is_sliding=sliding, sliding_window=c.get("sliding_window", 512), rms_norm_eps=c["rms_norm_eps"],
            rope_theta_global=theta_global, rope_theta_local=theta_local, rope_linear_factor_global=factor,
            query_pre_attn_scalar=c.get("query_pre_attn_scalar", 256), tie_embeddings=c.get("tie_word_embeddings", True),
            max_context=max_context, bos_token_id=c.get("bos_token_id", 2),
            eos_token_ids=tuple(eos if isinstance(eos, list) else [eos]))


# config.json model_type values this Gemma-3 reads (text-only and multimodal checkpoints).
SUPPORTED_MODEL_TYPES = ("gemma3", "gemma3_text")


def check_architecture(config: dict, directory: str) -> None:
    """Raises ValueError naming the architecture when config.json is not a Gemma-3."""
    text = config.get("text_config", config)
    model_type = text.get("model_type") or config.get("model_type")
    if model_type in SUPPORTED_MODEL_TYPES:
        return
    architectures = ", ".join(config.get("architectures") or []) or "no architectures listed"
    raise ValueError(f"{directory} is a {model_type or 'model without a model_type'} checkpoint ({architectures}); "
                     f"this export reads Gemma-3 ({', '.join(SUPPORTED_MODEL_TYPES)}). Export other models with "
                     "transformers' TorchExportableModuleForDecoderOnlyLM and gearbox's to_edge_transform_and_lower "
                     "(docs/tutorial.md)")


class _Weight(nn.Module):
    def __init__(self, *shape, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(*shape, dtype=dtype), requires_grad=False)


class _Attention(nn.Module):
    def __init__(self, c: Gemma3Config, dtype):
        super().__init__()
        q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
        self.q_proj = _Weight(q, c.hidden, dtype=dtype)
        self.k_proj = _Weight(kv, c.hidden, dtype=dtype)
        self.v_proj = _Weight(kv, c.hidden, dtype=dtype)
        self.o_proj = _Weight(c.hidden, q, dtype=dtype)
        self.q_norm = _Weight(c.head_dim, dtype=dtype)
        self.k_norm = _Weight(c.head_dim, dtype=dtype)


class _Mlp(nn.Module):
    def __init__(self, c: Gemma3Config, dtype):
        super().__init__()
        self.gate_proj = _Weight(c.intermediate, c.hidden, dtype=dtype)
        self.up_proj = _Weight(c.intermediate, c.hidden, dtype=dtype)
        self.down_proj = _Weight(c.hidden, c.intermediate, dtype=dtype)


class _Layer(nn.Module):
    def __init__(self, c: Gemma3Config, dtype):
        super().__init__()
        self.input_layernorm = _Weight(c.hidden, dtype=dtype)
        self.self_attn = _Attention(c, dtype)
        self.post_attention_layernorm = _Weight(c.hidden, dtype=dtype)
        self.pre_feedforward_layernorm = _Weight(c.hidden, dtype=dtype)
        self.mlp = _Mlp(c, dtype)
        self.post_feedforward_layernorm = _Weight(c.hidden, dtype=dtype)


class _Body(nn.Module):
    def __init__(self, c: Gemma3Config, dtype):
        super().__init__()
        self.embed_tokens = _Weight(c.vocab, c.hidden, dtype=dtype)
        self.layers = nn.ModuleList([_Layer(c, dtype) for _ in range(c.layers)])
        self.norm = _Weight(c.hidden, dtype=dtype)


class Gemma3(nn.Module):
    """forward(tokens [1, T] int64, positions [1, T] int64) -> logits [1, 1, V] (or
    [1, T, V] with all_logits). Stateful like the engine: K/V of each call are kept."""

    def __init__(self, config: Gemma3Config, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.config = config
        self.model = _Body(config, dtype)
        if not config.tie_embeddings:
            self.lm_head = _Weight(config.vocab, config.hidden, dtype=dtype)
        self.eager = EagerContext(config.max_context)
        # Gemma multiplies embeddings by sqrt(hidden) cast to the weight dtype.
        self.embed_scale = float(torch.tensor(math.sqrt(config.hidden), dtype=dtype))

    def reset(self) -> None:
        """Forgets the eager KV caches (a new sequence)."""
        self.eager.reset()

    @staticmethod
    def mini(seed: int = 1, max_context: int = 2048, dtype: torch.dtype = torch.float32,
             all_logits: bool = False) -> "Gemma3":
        """The mini config with seeded random weights (normal, std 0.02; norms 0.1)."""
        config = Gemma3Config.mini(max_context)
        config.all_logits = all_logits
        m = Gemma3(config, dtype)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in m.named_parameters():
                std = 0.1 if "norm" in name else 0.02
                p.copy_(torch.randn(p.shape, generator=gen) * std)
        return m

    @staticmethod
    def from_hf(directory: str, max_context: int = 2048, dtype: Optional[torch.dtype] = None,
                all_logits: bool = False) -> "Gemma3":
        """Loads config.json and the safetensors weights (single or sharded; the
        `language_model.` prefixes of multimodal checkpoints are accepted)."""
        from safetensors import safe_open

        config = Gemma3Config.from_hf(directory, max_context)
        config.all_logits = all_logits
        files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
        if not files:
            raise FileNotFoundError(f"{directory}: no *.safetensors")
        tensors = {}
        for f in files:
            with safe_open(os.path.join(directory, f), framework="pt") as st:
                for k in st.keys():
                    tensors[k] = st.get_tensor(k)
        if dtype is None:
            dtype = tensors[next(k for k in tensors if k.endswith("embed_tokens.weight"))].dtype
        m = Gemma3(config, dtype)
        prefixes = ("", "language_model.", "model.language_model.")
        with torch.no_grad():
            for name, p in m.named_parameters():
                candidates = [name] + [pre + name for pre in prefixes[1:]]
                if name.startswith("model."):
                    candidates.append("model.language_model." + name[len("model."):])
                key = next((k for k in candidates if k in tensors), None)
                if key is None:
                    raise KeyError(f"{directory}: checkpoint has no tensor for '{name}'")
                if tuple(tensors[key].shape) != tuple(p.shape):
                    raise ValueError(f"{directory}: '{key}' is {tuple(tensors[key].shape)}, expected {tuple(p.shape)}")
                p.copy_(tensors[key].to(dtype))
        return m

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        c = self.config
        body = self.model
        h = G.embedding(tokens, body.embed_tokens.weight, self.embed_scale)
        for i, layer in enumerate(body.layers):
            sliding = c.layer_is_sliding[i]
            a = layer.self_attn
            x = G.rms_norm(h, layer.input_layernorm.weight, c.rms_norm_eps, 1.0, 0)
            q = G.linear(x, a.q_proj.weight)
            k = G.linear(x, a.k_proj.weight)
            v = G.linear(x, a.v_proj.weight)
            q = G.rms_norm(q, a.q_norm.weight, c.rms_norm_eps, 1.0, c.head_dim)
            k = G.rms_norm(k, a.k_norm.weight, c.rms_norm_eps, 1.0, c.head_dim)
            theta = c.rope_theta_local if sliding else c.rope_theta_global
            scale = 1.0 if sliding else 1.0 / c.rope_linear_factor_global
            q = G.rope(q, positions, theta, scale, c.heads, c.head_dim)
            k = G.rope(k, positions, theta, scale, c.kv_heads, c.head_dim)
            o = G.attention(q, k, v, positions, i, c.heads, c.kv_heads, c.head_dim,
                            c.sliding_window if sliding else 0, 1.0 / math.sqrt(c.query_pre_attn_scalar),
                            self.eager.id)
            o = G.linear(o, a.o_proj.weight)
            o = G.rms_norm(o, layer.post_attention_layernorm.weight, c.rms_norm_eps, 1.0, 0)
            h = G.add(h, o)
            f = G.rms_norm(h, layer.pre_feedforward_layernorm.weight, c.rms_norm_eps, 1.0, 0)
            gate = G.linear(f, layer.mlp.gate_proj.weight)
            up = G.linear(f, layer.mlp.up_proj.weight)
            d = G.linear(G.gelu_tanh_mul(gate, up), layer.mlp.down_proj.weight)
            d = G.rms_norm(d, layer.post_feedforward_layernorm.weight, c.rms_norm_eps, 1.0, 0)
            h = G.add(h, d)
        if not c.all_logits:
            h = G.take_last(h)
        n = G.rms_norm(h, body.norm.weight, c.rms_norm_eps, 1.0, 0)
        head = body.embed_tokens.weight if c.tie_embeddings else self.lm_head.weight
        return G.linear(n, head)

    def metadata(self) -> dict:
        """Engine metadata (what `gearbox generate` reads)."""
        return {"model.family": "gemma3", "model.vocab": str(self.config.vocab),
                "tokenizer.bos": str(self.config.bos_token_id),
                "tokenizer.eos": ",".join(map(str, self.config.eos_token_ids))}
