#!/usr/bin/env python3
"""Capability-based partitioning and the export report, run through ExecuTorch's Python
runtime against eager PyTorch, and `python -m gearbox.export` refusing a checkpoint of an
architecture it does not read.

Needs $GEARBOX_CLI (the engine build) and $GEARBOX_ET_LIB (libgearbox_executorch).
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
sys.path.insert(0, PYTHON_DIR)
ctypes.CDLL(os.environ["GEARBOX_ET_LIB"], mode=ctypes.RTLD_GLOBAL)  # registers GearboxBackend

from executorch.runtime import Runtime  # noqa: E402

from gearbox import ops  # noqa: E402,F401
from gearbox.partitioner import (GearboxPartitioner, IncompleteDelegationError, Profile,  # noqa: E402
                                 to_edge_transform_and_lower)

G = torch.ops.gearbox
VOCAB, HIDDEN = 64, 32
PROFILES = [Profile("decode", 1, 1, 1), Profile("prefill", 1, 4, 8)]
TOKENS = torch.tensor([[5, 9, 2, 33, 7]])


def param(*shape):
    return torch.nn.Parameter(torch.randn(*shape) * 0.1, requires_grad=False)


class GearboxOpsAroundAdd(torch.nn.Module):
    """gearbox ops with an aten add between two of them (one delegate, not a cycle)."""

    def __init__(self):
        super().__init__()
        self.table, self.norm, self.head = param(VOCAB, HIDDEN), param(HIDDEN), param(VOCAB, HIDDEN)

    def forward(self, tokens):
        h = G.embedding(tokens, self.table, 1.0)
        return G.linear(G.rms_norm(h, self.norm, 1e-6, 0.0, 0) + h, self.head)


class ArgmaxBetween(torch.nn.Module):
    """gearbox ops, an op no converter accepts (argmax), gearbox ops: two delegates."""

    def __init__(self):
        super().__init__()
        self.t1, self.w1, self.t2, self.w2 = param(VOCAB, HIDDEN), param(VOCAB, HIDDEN), param(VOCAB, HIDDEN), \
            param(VOCAB, HIDDEN)

    def forward(self, tokens):
        ids = torch.argmax(G.linear(G.embedding(tokens, self.t1, 1.0), self.w1), dim=-1)
        return G.linear(G.embedding(ids, self.t2, 1.0), self.w2)


class CumsumBetween(torch.nn.Module):
    """aten ops only: embedding and linear delegate; cumsum has no converter and stays
    outside; the linear after it is a delegate of its own."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, HIDDEN)
        self.lin1 = torch.nn.Linear(HIDDEN, HIDDEN)
        self.lin2 = torch.nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, tokens):
        return self.lin2(torch.cumsum(self.lin1(self.emb(tokens)), dim=1))


def export(model):
    seq = torch.export.Dim("seq", min=1, max=8)
    with torch.no_grad():
        return torch.export.export(model.eval(), (TOKENS,), dynamic_shapes=({1: seq},), strict=False)


class PartitionTest(unittest.TestCase):
    runtime = None

    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        cls.runtime = Runtime.get()

    def lower(self, model, **options):
        partitioner = GearboxPartitioner(PROFILES, default_profile="automatic", device="cpu", **options)
        program = to_edge_transform_and_lower(export(model), partitioner=[partitioner]).to_executorch()
        return program, partitioner.last_report

    def check_runs(self, program, model):
        method = self.runtime.load_program(program.buffer).load_method("forward")
        for tokens in (TOKENS, TOKENS[:, :1]):
            with torch.no_grad():
                want = model(tokens)
            got = method.execute([tokens])[0]
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)

    def test_aten_op_between_gearbox_ops_joins_one_delegate(self):
        model = GearboxOpsAroundAdd()
        program, report = self.lower(model)
        self.assertEqual((report.delegates, report.left_compute), (1, 0), report.text())
        self.check_runs(program, model)

    def test_unsupported_op_between_gives_two_delegates(self):
        model = ArgmaxBetween()
        program, report = self.lower(model)
        self.assertEqual((report.delegates, report.left_compute), (2, 0), report.text())
        self.assertIn("aten.argmax.default x1: no converter", report.text())
        self.check_runs(program, model)

    def test_report_names_what_stays_on_executorch(self):
        model = CumsumBetween()
        program, report = self.lower(model)
        text = report.text()
        self.assertEqual(report.delegates, 2, text)
        self.assertEqual(report.left_compute, 1, text)
        self.assertIn("aten.cumsum.default x1: no converter", text)
        self.check_runs(program, model)

    def test_require_full_raises(self):
        with self.assertRaisesRegex(IncompleteDelegationError, "aten.cumsum.default"):
            self.lower(CumsumBetween(), require_full=True, report=False)


class ExportCliTest(unittest.TestCase):
    def test_refuses_an_unsupported_architecture_by_name(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "config.json"), "w") as f:
                json.dump({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 8}, f)
            out = subprocess.run([sys.executable, "-m", "gearbox.export", "-o", os.path.join(tmp, "m.pte"),
                                  "--weights", tmp], capture_output=True, text=True,
                                 env=dict(os.environ, PYTHONPATH=PYTHON_DIR))
            self.assertFalse(os.path.exists(os.path.join(tmp, "m.pte")))
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("model_type 'gpt2' is not supported by gearbox.export; supported: gemma3,", out.stderr)
        self.assertNotIn("Traceback", out.stderr)


if __name__ == "__main__":
    unittest.main()
