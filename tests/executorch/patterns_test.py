#!/usr/bin/env python3
"""Unit tests of gearbox.patterns: each rewrite on the graph it rewrites, and a near miss
of each that must stay as it is (with the reason in Rewriter.misses). No engine is built.
"""
import math
import os
import sys
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from executorch.exir import EdgeCompileConfig, to_edge  # noqa: E402

from gearbox.capability import KEEP_WHOLE  # noqa: E402
from gearbox.fx_util import op_key  # noqa: E402
from gearbox.converters import supported  # noqa: E402
from gearbox.fx_util import ProgramState  # noqa: E402
from gearbox.patterns import rewrite  # noqa: E402

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, ROWS = 32, 4, 2, 8, 16


def edge_program(module, *args, seq=True):
    dynamic = None
    if seq:
        dim = torch.export.Dim("seq", min=1, max=ROWS)
        dynamic = tuple({1: dim} if a.dim() >= 2 else {0: dim} for a in args)
    ep = torch.export.export(module.eval(), args, dynamic_shapes=dynamic, strict=False)
    config = EdgeCompileConfig(_check_ir_validity=False, preserve_ops=list(KEEP_WHOLE))
    return to_edge(ep, compile_config=config).exported_program()


def ops(program):
    return [op_key(n.target) for n in program.graph_module.graph.nodes if n.op == "call_function"]


def gearbox_nodes(program, name):
    return [n for n in program.graph_module.graph.nodes if op_key(n.target) == f"gearbox.{name}.default"]


class Norm(torch.nn.Module):
    """x * rsqrt(mean(x^2) + eps) * w, in the variants transformers writes."""

    def __init__(self, variant="plain"):
        super().__init__()
        self.variant = variant
        self.weight = torch.nn.Parameter(torch.randn(HEAD_DIM if variant == "per_head" else HIDDEN))

    def forward(self, x):
        if self.variant == "per_head":
            x = x.view(1, x.shape[1], HEADS, HEAD_DIM)
        if self.variant == "eps_after_sqrt":
            y = x / (x.pow(2).mean(-1, keepdim=True).sqrt() + 1e-6)
        else:
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        w = (1.0 + self.weight) if self.variant == "gemma" else self.weight
        return (y * w).reshape(1, x.shape[1], HIDDEN)


class RmsNormTest(unittest.TestCase):
    def check(self, variant, offset, head_dim):
        x = torch.randn(1, 5, HIDDEN)
        m = Norm(variant)
        p = edge_program(m, x)
        r = rewrite(p)
        (node,) = gearbox_nodes(p, "rms_norm")
        self.assertEqual(r.done.get("rms_norm"), 1)
        self.assertEqual(node.args[3:], (offset, head_dim))
        self.assertAlmostEqual(node.args[2], 1e-6, places=9)
        self.assertNotIn("aten.rsqrt.default", ops(p))
        with torch.no_grad():
            torch.testing.assert_close(p.module()(x), m(x), rtol=1e-5, atol=1e-5)

    def test_plain(self):
        self.check("plain", 0.0, 0)

    def test_gemma_one_plus_weight(self):
        self.check("gemma", 1.0, 0)

    def test_per_head_q_k_norm(self):
        self.check("per_head", 0.0, HEAD_DIM)

    def test_near_miss_eps_after_sqrt_is_not_rewritten(self):
        p = edge_program(Norm("eps_after_sqrt"), torch.randn(1, 5, HIDDEN))
        r = rewrite(p)
        self.assertEqual(gearbox_nodes(p, "rms_norm"), [])
        self.assertNotIn("rms_norm", r.done)


class Mlp(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.act = act
        self.gate = torch.nn.Linear(HIDDEN, 64, bias=False)
        self.up = torch.nn.Linear(HIDDEN, 64, bias=False)
        self.down = torch.nn.Linear(64, HIDDEN, bias=False)

    def forward(self, x):
        return self.down(self.act(self.gate(x)) * self.up(x))


class GatedMlpTest(unittest.TestCase):
    def check(self, act, op):
        x = torch.randn(1, 3, HIDDEN)
        m = Mlp(act)
        p = edge_program(m, x)
        rewrite(p)
        self.assertEqual(len(gearbox_nodes(p, op)), 1, ops(p))
        with torch.no_grad():
            torch.testing.assert_close(p.module()(x), m(x), rtol=1e-5, atol=1e-5)

    def test_silu(self):
        self.check(F.silu, "silu_mul")

    def test_gelu_tanh(self):
        self.check(lambda g: F.gelu(g, approximate="tanh"), "gelu_tanh_mul")

    def test_near_miss_exact_gelu_is_not_rewritten(self):
        p = edge_program(Mlp(F.gelu), torch.randn(1, 3, HIDDEN))
        r = rewrite(p)
        self.assertEqual(gearbox_nodes(p, "gelu_tanh_mul"), [])
        self.assertTrue(any("approximate='none'" in m[2] for m in r.misses), r.misses)


class ScaledEmbedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(50, HIDDEN)
        self.register_buffer("scale", torch.tensor(HIDDEN ** 0.5), persistent=False)

    def forward(self, ids):
        return self.table(ids) * self.scale


class EmbeddingScaleTest(unittest.TestCase):
    def test_scale_folds_into_the_embedding(self):
        ids = torch.tensor([[1, 7, 3]])
        m = ScaledEmbedding()
        p = edge_program(m, ids)
        rewrite(p)
        (node,) = gearbox_nodes(p, "embedding")
        self.assertAlmostEqual(node.args[2], HIDDEN ** 0.5, places=5)
        torch.testing.assert_close(p.module()(ids), m(ids))


def rotate_half(x):
    return torch.cat((-x[..., HEAD_DIM // 2:], x[..., : HEAD_DIM // 2]), dim=-1)


class Block(torch.nn.Module):
    """Attention as transformers writes it over a static cache: q/k/v projections, RoPE
    from an inv_freq buffer, index_copy_ into cache buffers, repeat_kv, SDPA with a mask
    built from the positions. `variant` makes near misses."""

    def __init__(self, variant="causal", window=0):
        super().__init__()
        self.variant, self.window = variant, window
        self.q = torch.nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.k = torch.nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.v = torch.nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.o = torch.nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
        if variant == "llama3_freq":
            inv_freq = llama3_inv_freq()  # not theta^(-2i/d) * scale: read from the buffer
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("k_cache", torch.zeros(1, KV_HEADS, ROWS, HEAD_DIM), persistent=False)
        self.register_buffer("v_cache", torch.zeros(1, KV_HEADS, ROWS, HEAD_DIM), persistent=False)

    def forward(self, x, positions):
        t = x.shape[1]
        freqs = positions[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        q = self.q(x).view(1, t, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k(x).view(1, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v(x).view(1, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        self.k_cache.index_copy_(2, positions[0], k)
        self.v_cache.index_copy_(2, positions[0], v)
        group = HEADS // KV_HEADS
        kf = self.k_cache[:, :, None].expand(1, KV_HEADS, group, ROWS, HEAD_DIM).reshape(1, HEADS, ROWS, HEAD_DIM)
        vf = self.v_cache[:, :, None].expand(1, KV_HEADS, group, ROWS, HEAD_DIM).reshape(1, HEADS, ROWS, HEAD_DIM)
        j = torch.arange(ROWS)[None, :]
        p = positions[0][:, None]
        mask = (j < p) if self.variant == "strict_mask" else (j <= p)
        if self.window:
            mask = mask & (j > p - self.window)
        o = F.scaled_dot_product_attention(q, kf, vf, attn_mask=mask[None, None])
        return self.o(o.transpose(1, 2).reshape(1, t, HEADS * HEAD_DIM))


class AttentionTest(unittest.TestCase):
    def lowered(self, variant="causal", window=0):
        m = Block(variant, window)
        p = edge_program(m, torch.randn(1, 4, HIDDEN), torch.arange(4).unsqueeze(0))
        return p, rewrite(p)

    def test_rope_and_attention_over_the_static_cache(self):
        p, r = self.lowered()
        self.assertEqual(r.done.get("rope"), 2, r.misses)
        (att,) = gearbox_nodes(p, "attention")
        # (q, k, v, positions, state, heads, kv_heads, head_dim, window, scale, context)
        self.assertEqual(att.args[4:9], (0, HEADS, KV_HEADS, HEAD_DIM, 0))
        self.assertAlmostEqual(att.args[9], 1 / math.sqrt(HEAD_DIM))
        rope = gearbox_nodes(p, "rope")[0]
        self.assertEqual(rope.args[2:4], (10000.0, 1.0))
        self.assertNotIn("aten.scaled_dot_product_attention.default", ops(p))
        # The cache writes stay (the delegate owns them), indexed by the positions.
        writes = [n for n in p.graph_module.graph.nodes if op_key(n.target) == "aten.index_put.default"]
        self.assertEqual(len(writes), 2)

    def test_sliding_window(self):
        p, r = self.lowered(window=3)
        (att,) = gearbox_nodes(p, "attention")
        self.assertEqual(att.args[8], 3)

    def test_near_miss_other_mask_is_not_attention(self):
        p, r = self.lowered("strict_mask")
        self.assertEqual(gearbox_nodes(p, "attention"), [])
        self.assertTrue(any(m[0] == "attention" and "neither causal" in m[2] for m in r.misses), r.misses)

    def test_scaled_frequencies_read_the_inv_freq_buffer(self):
        p, r = self.lowered("llama3_freq")
        self.assertEqual(r.done.get("rope"), 2, r.misses)
        for rope in gearbox_nodes(p, "rope"):
            self.assertEqual(rope.args[3], 1.0)
            self.assertEqual(rope.args[6].name, gearbox_nodes(p, "rope")[0].args[6].name)  # the buffer, a weight
        self.assertEqual(len(gearbox_nodes(p, "attention")), 1)


def llama3_inv_freq():
    """Llama-3 style: the low-frequency band divided by 8, a smooth band between."""
    inv = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
    inv[-2] /= 3.0
    inv[-1] /= 8.0
    return inv


class Rope(torch.nn.Module):
    """q projection then rotate-half RoPE, cos/sin from a frequency buffer and positions.
    variant "inv_freq": the [head_dim / 2] inv_freq buffer; "full_layout": the frequencies
    already duplicated in a [head_dim] buffer; "attention_scaled": cos/sin times 0.9."""

    def __init__(self, variant):
        super().__init__()
        self.variant = variant
        self.q = torch.nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        inv = llama3_inv_freq()
        self.register_buffer("inv_freq", torch.cat((inv, inv)) if variant == "full_layout" else inv, persistent=False)

    def forward(self, x, positions):
        t = x.shape[1]
        freqs = positions[..., None].float() * self.inv_freq
        emb = freqs if self.variant == "full_layout" else torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        if self.variant == "attention_scaled":
            cos, sin = cos * 0.9, sin * 0.9
        q = self.q(x).view(1, t, HEADS, HEAD_DIM).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        return q.transpose(1, 2).reshape(1, t, HEADS * HEAD_DIM)


class RopeScalingTest(unittest.TestCase):
    def lowered(self, variant):
        m = Rope(variant)
        x, positions = torch.randn(1, 5, HIDDEN), torch.arange(3, 8).unsqueeze(0)
        p = edge_program(m, x, positions)
        return m, p, rewrite(p), (x, positions)

    def test_llama3_frequencies_become_the_rope_weight(self):
        m, p, r, args = self.lowered("inv_freq")
        (rope,) = gearbox_nodes(p, "rope")
        self.assertEqual(rope.args[3], 1.0)
        weight = rope.args[6]
        self.assertEqual(weight.op, "placeholder")
        self.assertEqual(p.graph_signature.inputs_to_buffers[weight.name], "inv_freq")
        with torch.no_grad():
            torch.testing.assert_close(p.module()(*args), m(*args), rtol=1e-5, atol=1e-5)

    def test_near_miss_frequencies_without_the_inv_freq_layout_are_not_rope(self):
        for variant in ("full_layout", "attention_scaled"):
            m, p, r, args = self.lowered(variant)
            self.assertEqual(gearbox_nodes(p, "rope"), [], variant)
            self.assertTrue(any(m[0] == "rope" and "frequency scaling" in m[2] for m in r.misses), r.misses)


class SoftCap(torch.nn.Module):
    """lm_head then tanh(x / c) * c (Gemma's final_logit_softcapping); `outer` != c is a
    near miss."""

    def __init__(self, cap=30.0, outer=None):
        super().__init__()
        self.cap, self.outer = cap, outer if outer is not None else cap
        self.head = torch.nn.Linear(HIDDEN, 50, bias=False)

    def forward(self, x):
        return torch.tanh(self.head(x) / self.cap) * self.outer


class LogitSoftCapTest(unittest.TestCase):
    """Soft-capping has no pattern: its div, tanh and mul lower as generic unary ops."""

    def test_soft_capping_lowers_through_generic_ops(self):
        p = edge_program(SoftCap(), torch.randn(1, 3, HIDDEN))
        rewrite(p)
        state = ProgramState(p)
        compute = [n for n in p.graph_module.graph.nodes if n.op == "call_function" and "getitem" not in str(n.target)]
        self.assertIn("aten.tanh.default", ops(p))
        self.assertEqual({n.name: supported(n, state) for n in compute}, {n.name: None for n in compute})


if __name__ == "__main__":
    unittest.main()
