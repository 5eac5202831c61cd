"""gearbox ops as torch.library custom ops, each with an eager reference implementation.

Every op here is one op of gearbox's network IR (src/ir/network.h states the semantics;
the eager code below implements exactly them, in float32). A model written with these ops
runs eagerly in PyTorch, exports with torch.export (each op stays one graph node) and
lowers one-to-one to the IR (gearbox.lowering).

Attention is stateful, as in the engine: it writes K and V at `positions` into the KV
cache of its state slot, then attends over the cache. In eager PyTorch the caches live in
an `EagerContext` (one per model instance, selected by the `context` argument, which the
lowering ignores: in the engine, caches belong to the execution context).
"""

from __future__ import annotations

import itertools
import math
from typing import Dict, Optional, Tuple

import torch

_LIB = "gearbox"


# ---- eager KV caches ----------------------------------------------------------------------


class EagerContext:
    """KV caches of one eager model instance: state slot -> (K, V), each [rows, width]."""

    _ids = itertools.count(1)
    _live: Dict[int, "EagerContext"] = {}

    def __init__(self, rows: int):
        self.id = next(EagerContext._ids)
        self.rows = rows
        self.caches: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}
        EagerContext._live[self.id] = self

    def reset(self) -> None:
        self.caches.clear()

    def cache(self, slot: int, width: int, device) -> Tuple[torch.Tensor, torch.Tensor]:
        if slot not in self.caches:
            zeros = torch.zeros(self.rows, width, dtype=torch.float32, device=device)
            self.caches[slot] = (zeros, zeros.clone())
        return self.caches[slot]

    @staticmethod
    def get(context_id: int) -> "EagerContext":
        try:
            return EagerContext._live[context_id]
        except KeyError:
            raise ValueError(f"gearbox.attention: no eager context {context_id}") from None


def _check_ids(ids: torch.Tensor, limit: int, what: str) -> None:
    if ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{what} must be int32 or int64, not {ids.dtype}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= limit):
        raise ValueError(f"{what} must be in [0, {limit}), got [{int(ids.min())}, {int(ids.max())}]")


# ---- ops ----------------------------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::embedding", mutates_args=())
def embedding(ids: torch.Tensor, table: torch.Tensor, scale: float) -> torch.Tensor:
    """[B, T] ids -> [B, T, H] rows of table [V, H], times scale. Ids outside [0, V) fail."""
    _check_ids(ids, table.shape[0], "token ids")
    return table.float()[ids.long()] * scale


@embedding.register_fake
def _(ids, table, scale):
    return ids.new_empty((*ids.shape, table.shape[1]), dtype=torch.float32)


@torch.library.custom_op(f"{_LIB}::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, weight_offset: float, head_dim: int) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) * (weight + weight_offset), over the last dim, or over
    each head_dim-long chunk of it when head_dim > 0 (per-head q/k norm)."""
    shape = x.shape
    xf = x.float()
    if head_dim > 0:
        xf = xf.reshape(*shape[:-1], shape[-1] // head_dim, head_dim)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (weight.float() + weight_offset)
    return y.reshape(shape)


@rms_norm.register_fake
def _(x, weight, eps, weight_offset, head_dim):
    return torch.empty_like(x, dtype=torch.float32)


@torch.library.custom_op(f"{_LIB}::linear", mutates_args=())
def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [..., K] @ weight [N, K]^T (+ bias [N]), accumulated in float32."""
    y = x.float() @ weight.float().t()
    return y + bias.float() if bias is not None else y


@linear.register_fake
def _(x, weight, bias=None):
    return x.new_empty((*x.shape[:-1], weight.shape[0]), dtype=torch.float32)


def _rope_tables(positions: torch.Tensor, theta: float, scale: float, head_dim: int,
                 inv_freq: Optional[torch.Tensor] = None):
    half = head_dim // 2
    if inv_freq is None:
        inv_freq = theta ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / head_dim)
    inv_freq = inv_freq.double()
    angle = positions.double().unsqueeze(-1) * inv_freq.to(positions.device) * scale
    return torch.cos(angle).float(), torch.sin(angle).float()


@torch.library.custom_op(f"{_LIB}::rope", mutates_args=())
def rope(x: torch.Tensor, positions: torch.Tensor, theta: float, scale: float, heads: int, head_dim: int,
         inv_freq: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Rotate-half RoPE of x [B, T, heads*head_dim] at positions [B, T]:
    angle = position * inv_freq_i * scale, inv_freq_i from inv_freq [head_dim / 2] (f32;
    Llama-3 scaling precomputes them) or theta^(-2i/head_dim)."""
    b, t, _ = x.shape
    xf = x.float().reshape(b, t, heads, head_dim)
    cos, sin = _rope_tables(positions, theta, scale, head_dim, inv_freq)
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    x1, x2 = xf[..., : head_dim // 2], xf[..., head_dim // 2 :]
    out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return out.reshape(b, t, heads * head_dim)


@rope.register_fake
def _(x, positions, theta, scale, heads, head_dim, inv_freq=None):
    return torch.empty_like(x, dtype=torch.float32)


@torch.library.custom_op(f"{_LIB}::attention", mutates_args=())
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
    state: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    window: int,
    scale: float,
    context: int,
) -> torch.Tensor:
    """Writes k, v [1, T, kv_heads*head_dim] at `positions` into the KV cache of `state`,
    then each query at position p attends to cache rows j <= p (and j > p - window when
    window > 0); scores scaled by `scale`; query head h reads kv head h // (heads/kv_heads)."""
    if q.shape[0] != 1:
        raise ValueError("gearbox.attention runs batch 1")
    ctx = EagerContext.get(context)
    _check_ids(positions, ctx.rows, "positions")
    kc, vc = ctx.cache(state, kv_heads * head_dim, q.device)
    pos = positions[0].long()
    kc[pos] = k[0].float()
    vc[pos] = v[0].float()
    t = q.shape[1]
    n = int(pos.max()) + 1
    qh = q[0].float().reshape(t, heads, head_dim).transpose(0, 1)  # [heads, T, hd]
    group = heads // kv_heads
    kh = kc[:n].reshape(n, kv_heads, head_dim).transpose(0, 1).repeat_interleave(group, 0)
    vh = vc[:n].reshape(n, kv_heads, head_dim).transpose(0, 1).repeat_interleave(group, 0)
    scores = (qh @ kh.transpose(1, 2)) * scale  # [heads, T, n]
    j = torch.arange(n, device=q.device).unsqueeze(0)
    allowed = j <= pos.unsqueeze(1)
    if window > 0:
        allowed &= j > (pos.unsqueeze(1) - window)
    scores = scores.masked_fill(~allowed.unsqueeze(0), -math.inf)
    out = torch.softmax(scores, dim=-1) @ vh  # [heads, T, hd]
    return out.transpose(0, 1).reshape(1, t, heads * head_dim)


@attention.register_fake
def _(q, k, v, positions, state, heads, kv_heads, head_dim, window, scale, context):
    return torch.empty_like(q, dtype=torch.float32)


@torch.library.custom_op(f"{_LIB}::gelu_tanh_mul", mutates_args=())
def gelu_tanh_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(gate) * up."""
    return torch.nn.functional.gelu(gate.float(), approximate="tanh") * up.float()


@gelu_tanh_mul.register_fake
def _(gate, up):
    return torch.empty_like(gate, dtype=torch.float32)


@torch.library.custom_op(f"{_LIB}::silu_mul", mutates_args=())
def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up."""
    return torch.nn.functional.silu(gate.float()) * up.float()


@silu_mul.register_fake
def _(gate, up):
    return torch.empty_like(gate, dtype=torch.float32)


@torch.library.custom_op(f"{_LIB}::add", mutates_args=())
def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a + b (same shapes)."""
    return a.float() + b.float()


@add.register_fake
def _(a, b):
    return torch.empty_like(a, dtype=torch.float32)


@torch.library.custom_op(f"{_LIB}::take_last", mutates_args=())
def take_last(x: torch.Tensor) -> torch.Tensor:
    """[B, T, F] -> [B, 1, F], the last position."""
    return x[:, -1:, :].float().clone()


@take_last.register_fake
def _(x):
    return x.new_empty((x.shape[0], 1, x.shape[2]), dtype=torch.float32)


# The IR op name of each gearbox op (torch.ops.gearbox.<name>.default -> IR op).
OP_NAMES = ("embedding", "rms_norm", "linear", "rope", "attention", "gelu_tanh_mul", "silu_mul", "add", "take_last")
