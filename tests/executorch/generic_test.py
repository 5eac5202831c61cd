#!/usr/bin/env python3
"""The generic IR ops from the Python side: every converter on a tiny graph (the network
description it writes, and near misses refused with their reason), then models of plain
aten ops (an MLP, attention blocks over F.scaled_dot_product_attention, an encoder
layer, a graph with an op no converter takes in the middle) lowered with two profiles and run through
ExecuTorch's Python runtime against eager PyTorch.

Needs $GEARBOX_CLI (the engine build) and $GEARBOX_ET_LIB (libgearbox_executorch) for
the end-to-end part; the converter tests need neither.
"""
import ctypes
import os
import sys
import unittest

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

import generic_models as gm  # noqa: E402
from gearbox.converters import supported  # noqa: E402
from gearbox.fx_util import ProgramState  # noqa: E402
from gearbox.lowering import describe  # noqa: E402
from gearbox.partitioner import (GearboxPartitioner, IncompleteDelegationError, Profile,  # noqa: E402
                                 to_edge_transform_and_lower)

PROFILES = [Profile("short", 1, 2, 4), Profile("long", 5, 8, gm.MAX_SEQ)]
LENGTHS = (1, 3, 4, 5, 9, gm.MAX_SEQ)  # both profiles, their bounds included


class Fn(nn.Module):
    def __init__(self, fn, **params):
        super().__init__()
        self.fn = fn
        self.params = nn.ParameterDict({k: nn.Parameter(v, requires_grad=False) for k, v in params.items()
                                        if v.dtype.is_floating_point})
        for k, v in params.items():
            if not v.dtype.is_floating_point:
                self.register_buffer(k, v)

    def forward(self, a, b=None, c=None):
        return self.fn(self, *[t for t in (a, b, c) if t is not None])


def export_fn(fn, *args, dims=None, **params):
    """torch.export of fn(module, *args); dims: {arg index: {dim: Dim}} (default: dim 1 of
    the first argument is the dynamic 'seq')."""
    seq = torch.export.Dim("seq", min=1, max=gm.MAX_SEQ)
    shapes = [None] * len(args)
    for i, spec in (dims if dims is not None else {0: {1: seq}}).items():
        shapes[i] = {d: seq for d in spec} if isinstance(spec, (list, tuple)) else spec
    return torch.export.export(Fn(fn, **params), args, dynamic_shapes=tuple(shapes), strict=False)


def nodes_of(program):
    desc, weights = describe(program, gm.MAX_SEQ)
    return [n for n in desc["nodes"] if n["op"] != "constant"], desc, weights


def reasons(program):
    state = ProgramState(program)
    return {str(n.target): supported(n, state) for n in program.graph.nodes if n.op == "call_function"}


X = torch.randn(1, 5, 8)


class ConverterTest(unittest.TestCase):
    def op(self, fn, *args, **kw):
        nodes, desc, weights = nodes_of(export_fn(fn, *args, **kw))
        return nodes, desc, weights

    def test_unary(self):
        nodes, _, _ = self.op(lambda m, x: F.gelu(torch.rsqrt(x.exp()), approximate="tanh").neg(), X)
        self.assertEqual([(n["op"], n["attrs"]["code"]) for n in nodes],
                         [("unary", "exp"), ("unary", "rsqrt"), ("unary", "gelu_tanh"), ("unary", "neg")])

    def test_scalar_arithmetic_is_affine(self):
        nodes, _, _ = self.op(lambda m, x: (1 - (x * 2 + 1) / 4) ** 3, X)
        self.assertEqual([n["attrs"] for n in nodes],
                         [{"code": "affine", "alpha": 2.0, "beta": 0.0}, {"code": "affine", "alpha": 1.0, "beta": 1.0},
                          {"code": "affine", "alpha": 0.25, "beta": 0.0},
                          {"code": "affine", "alpha": -1.0, "beta": 1.0}, {"code": "pow_scalar", "alpha": 3.0}])

    def test_broadcasting_binary_reads_a_constant(self):
        nodes, desc, weights = self.op(lambda m, x: x * m.params["w"] - x.amax(-1, keepdim=True), X,
                                       w=torch.randn(8))
        consts = [n for n in desc["nodes"] if n["op"] == "constant"]
        self.assertEqual(consts[0]["weights"], ["params.w"])
        self.assertEqual(nodes[0]["op"], "binary")
        self.assertEqual(nodes[0]["attrs"], {"code": "mul"})
        self.assertIn(consts[0]["outputs"][0], nodes[0]["inputs"])
        self.assertEqual(nodes[1]["attrs"], {"code": "amax", "axes": [2], "keepdim": True})
        self.assertEqual(nodes[2]["attrs"], {"code": "sub"})

    def test_comparison_where_and_bool_output(self):
        nodes, desc, _ = self.op(lambda m, x: (torch.where(x > 0, x, 0.5), (x <= 1) & (x != 0)), X)
        ops = [(n["op"], n.get("attrs", {}).get("code"), n.get("dtypes")) for n in nodes]
        self.assertIn(("binary", "gt", ["bool"]), ops)
        self.assertIn(("where", None, None), ops)
        self.assertIn(("binary", "logical_and", ["bool"]), ops)
        self.assertEqual(len(desc["outputs"]), 2)

    def test_reductions_and_softmax(self):
        nodes, _, _ = self.op(lambda m, x: torch.softmax(x, -1).sum(-1) + x.mean((0, 2)) +
                              torch.log_softmax(x, 1).amin(-1), X)
        attrs = [n.get("attrs") for n in nodes if n["op"] in ("softmax", "reduce")]
        self.assertEqual(attrs, [{"code": "softmax", "axis": 2}, {"code": "sum", "axes": [2], "keepdim": False},
                                 {"code": "mean", "axes": [0, 2], "keepdim": False},
                                 {"code": "log_softmax", "axis": 1}, {"code": "amin", "axes": [2], "keepdim": False}])

    def test_matmul_of_a_vector_reshapes(self):
        nodes, _, _ = self.op(lambda m, x: x @ m.params["v"], X, w=torch.randn(1), v=torch.randn(8))
        self.assertEqual([n["op"] for n in nodes], ["reshape", "matmul", "reshape"])
        self.assertEqual(nodes[0]["attrs"], {"shape": [-2, 1]})
        self.assertEqual(nodes[2]["attrs"], {"shape": [-2, -3]})

    def test_views_keep_the_dynamic_extent(self):
        nodes, _, _ = self.op(lambda m, x: x.view(1, x.shape[1], 2, 4).transpose(1, 2).reshape(-1, 4), X)
        self.assertEqual([(n["op"], n["attrs"]) for n in nodes],
                         [("reshape", {"shape": [1, -3, 2, 4]}), ("permute", {"perm": [0, 2, 1, 3]}),
                          ("reshape", {"shape": [-1, 4]})])

    def test_slices_split_cat_expand(self):
        def fn(m, x):
            a, b = x.split(4, dim=-1)
            return torch.cat([b[:, :, ::2], a[:, :, 1:3]], dim=-1).unsqueeze(0).expand(3, -1, -1, -1), x[:, :, 5:], \
                x[:, :, :-1]

        nodes, _, _ = self.op(fn, X)
        slices = [n["attrs"] for n in nodes if n["op"] == "slice"]
        self.assertIn({"axis": 2, "start": 0, "end": 4, "step": 1}, slices)
        self.assertIn({"axis": 2, "start": 4, "end": 8, "step": 1}, slices)
        self.assertIn({"axis": 2, "start": 0, "step": 2}, slices)
        self.assertIn({"axis": 2, "start": 5, "step": 1}, slices)
        self.assertIn({"axis": 2, "start": 0, "end": -1, "step": 1}, slices)
        self.assertEqual([n["attrs"] for n in nodes if n["op"] == "concat"], [{"axis": 2}])
        self.assertEqual([n["attrs"] for n in nodes if n["op"] == "expand"], [{"shape": [3, 1, -1, 4]}])

    def test_casts_gathers_and_integer_constants(self):
        def fn(m, x, ids, where):
            return torch.index_select(x, 1, ids), torch.gather(x, 2, where), x.to(torch.int32), \
                F.embedding(ids, m.params["table"]) * m.scale

        nodes, desc, weights = self.op(fn, X, torch.tensor([0, 2, 1]), torch.randint(0, 8, (1, 5, 2)),
                                       dims={0: [1], 2: [1]}, scale=torch.tensor([1, 0, 2, 3]), table=torch.randn(6, 4))
        ops = [n["op"] for n in nodes]
        self.assertIn("index_select", ops)
        self.assertIn("gather", ops)
        self.assertIn(("cast", ["i32"]), [(n["op"], n.get("dtypes")) for n in nodes])
        self.assertEqual(weights["scale"].dtype, torch.int64)
        self.assertEqual({i["name"]: i["dtype"] for i in desc["inputs"]}["b"], "i64")

    def test_full_of_a_dynamic_size_broadcasts_a_constant(self):
        nodes, desc, weights = self.op(lambda m, x: x + torch.full((x.shape[1], 8), 0.5), X)
        self.assertEqual([n["op"] for n in nodes], ["slice", "reshape", "binary", "where", "binary"])
        self.assertEqual(nodes[0]["attrs"], {"axis": 2, "start": 0, "end": 1, "step": 1})
        self.assertEqual(nodes[1]["attrs"], {"shape": [-3, 1]})  # x's extent 1 as the rows
        self.assertEqual((nodes[2]["attrs"], nodes[2]["dtypes"]), ({"code": "eq"}, ["bool"]))
        const = next(n for n in desc["nodes"] if n["op"] == "constant")["outputs"][0]
        self.assertEqual(nodes[3]["inputs"][1:], [const, const])
        torch.testing.assert_close(weights[const], torch.full((1, 8), 0.5))

        r = reasons(export_fn(lambda m, x: x + torch.arange(x.shape[1]).unsqueeze(-1), X))
        self.assertIn("range of dynamic length", r["aten.arange.default"])
        r = reasons(export_fn(lambda m, x: x + torch.full((x.shape[1] * 2, 8), 0.5)[:x.shape[1]], X))
        self.assertIn("no tensor's extent", r["aten.full.default"])

    def test_sdpa_with_grouped_kv_heads(self):
        q, kv = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)
        nodes, _, _ = self.op(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                               enable_gqa=True),
                              q, kv, kv.clone(), dims={0: [2], 1: [2], 2: [2]})
        self.assertEqual([n["op"] for n in nodes].count("expand"), 2)
        sdpa = nodes[-1]
        self.assertEqual((sdpa["op"], sdpa["attrs"]["causal"]), ("sdpa", True))
        self.assertAlmostEqual(sdpa["attrs"]["scale"], 8 ** -0.5)

    def test_layer_norm(self):
        ln = nn.LayerNorm(8)
        nodes, _, _ = self.op(lambda m, x: F.layer_norm(x, (8,), m.params["w"], m.params["b"], 1e-3), X,
                              w=ln.weight.detach(), b=ln.bias.detach())
        self.assertEqual((nodes[0]["op"], nodes[0]["weights"], nodes[0]["attrs"]),
                         ("layer_norm", ["params.w", "params.b"], {"eps": 1e-3, "has_bias": 1}))

    def test_near_misses_are_refused_with_the_reason(self):
        r = reasons(export_fn(lambda m, x: x.to(torch.bfloat16).exp(), X))
        self.assertIn("bfloat16 activation; gearbox's float math is f32", r["aten.exp.default"])
        self.assertIsNone(r["aten.to.dtype"])  # the cast itself converts

        r = reasons(export_fn(lambda m, a: a.reshape(-1).reshape(a.shape[0], a.shape[1]), torch.randn(5, 5),
                              dims={0: [0, 1]}))
        view_reasons = [v for k, v in r.items() if "view" in k or "reshape" in k]
        self.assertTrue(any(v and "cannot express" in v for v in view_reasons), r)

        r = reasons(export_fn(lambda m, x: m.params["idx"].expand(1, x.shape[1], 2) + x[..., :2], X,
                              idx=torch.ones(1, 1, 2)))
        self.assertIn("cannot express from the input's [1, 1, 2]", r["aten.expand.default"])

        r = reasons(export_fn(lambda m, x, ids: x[0, 0, 0] + (ids * 2).to(torch.float32), X, torch.tensor([1, 2]),
                              dims={0: [1]}))
        self.assertIn("index arithmetic", r["aten.mul.Tensor"])
        self.assertIn("index arithmetic", r["aten.to.dtype"])

        r = reasons(export_fn(lambda m, x: torch.sum(x, -1, dtype=torch.float64), X))
        self.assertTrue(any(v and "float64" in v for v in r.values()), r)

    def test_fast_paths_win(self):
        lin = nn.Linear(8, 8)
        nodes, _, _ = self.op(lambda m, x: F.linear(x, m.params["w"], m.params["b"]) + x, X,
                              w=lin.weight.detach(), b=lin.bias.detach())
        self.assertEqual([n["op"] for n in nodes], ["linear", "add"])


class ProfileTest(unittest.TestCase):
    def test_profile_outside_the_dim_range_raises_naming_both(self):
        ep = gm.export("mlp", gm.Mlp(), hi=8)
        partitioner = GearboxPartitioner([Profile("huge", 1, 4, 32)], report=False)
        with self.assertRaisesRegex(ValueError, r"profile 'huge' \[1, 32\].*Dim 'seq'.*\[1, 8\]"):
            to_edge_transform_and_lower(ep, partitioner=[partitioner])

    def test_several_dynamic_extents_raise(self):
        a, b = torch.export.Dim("a", min=1, max=8), torch.export.Dim("b", min=1, max=8)
        ep = torch.export.export(Fn(lambda m, x, y: x.sum() + y.sum()), (torch.randn(1, 3), torch.randn(4, 1)),
                                 dynamic_shapes=({1: a}, {0: b}), strict=False)
        with self.assertRaisesRegex(ValueError, "one dynamic extent per program"):
            to_edge_transform_and_lower(ep, partitioner=[GearboxPartitioner(PROFILES[:1], report=False)])


@unittest.skipUnless(os.environ.get("GEARBOX_ET_LIB") and os.environ.get("GEARBOX_CLI"),
                     "needs $GEARBOX_ET_LIB and $GEARBOX_CLI")
class ModelTest(unittest.TestCase):
    runtime = None

    @classmethod
    def setUpClass(cls):
        ctypes.CDLL(os.environ["GEARBOX_ET_LIB"], mode=ctypes.RTLD_GLOBAL)  # registers GearboxBackend
        from executorch.runtime import Runtime

        cls.runtime = Runtime.get()

    def lower(self, name, **options):
        torch.manual_seed(0)
        model = gm.MODELS[name]().eval()
        partitioner = GearboxPartitioner(PROFILES, default_profile="automatic", device="cpu", **options)
        program = to_edge_transform_and_lower(gm.export(name, model), partitioner=[partitioner]).to_executorch()
        return model, program, partitioner.last_report

    def check_runs(self, name, model, program):
        method = self.runtime.load_program(program.buffer).load_method("forward")
        for t in LENGTHS:
            args = gm.inputs(name, t)
            with torch.no_grad():
                want = model(*args)
            got = method.execute(list(args))[0]
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=lambda m: f"{name} at length {t}: {m}")

    def test_models_lower_fully_and_match_eager(self):
        for name in ("scalars", "dynamic_full", "mlp", "causal", "masked", "encoder"):
            with self.subTest(name):
                model, program, report = self.lower(name)
                self.assertEqual(report.left_compute, 0, report.text())
                self.assertEqual(report.delegates, 1, report.text())
                self.assertGreater(report.compute, 0)
                self.check_runs(name, model, program)

    def test_unsupported_op_between_gives_several_delegates(self):
        model, program, report = self.lower("cumsum")
        text = report.text()
        self.assertGreaterEqual(report.delegates, 2, text)
        self.assertIn("aten.cumsum.default x1: no converter", text)
        self.assertEqual(report.left_compute, 1, text)
        self.check_runs("cumsum", model, program)

    def test_require_full_raises(self):
        with self.assertRaisesRegex(IncompleteDelegationError, "aten.cumsum.default"):
            self.lower("cumsum", require_full=True, report=False)

    def test_sort_is_reported(self):
        partitioner = GearboxPartitioner(PROFILES, device="cpu", report=False)
        to_edge_transform_and_lower(export_fn(lambda m, x: torch.tanh(torch.sort(F.gelu(x), dim=-1)[0]), X),
                                    partitioner=[partitioner])
        report = partitioner.last_report
        self.assertEqual((report.delegates, report.left_compute), (2, 1), report.text())
        self.assertIn("aten.sort.default x1: no converter", report.text())


if __name__ == "__main__":
    unittest.main()
