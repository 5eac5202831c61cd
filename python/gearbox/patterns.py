"""Pattern rewrites: the idioms of decoder-only transformers in an edge-dialect graph
become gearbox's fused ops (torch.ops.gearbox.*), before the partitioner runs.

    RMSNorm            x * rsqrt(mean(x^2, -1) + eps) * w      (or * (1 + w), Gemma; per head
                       when x is a [1, T, H, D] view and w has D elements: q/k norms)
    gated MLP          silu(g) * u, gelu_tanh(g) * u
    scaled embedding   embedding(W, ids) * c
    rotate-half RoPE   x * cos + cat(-x2, x1) * sin, where cos/sin come from positions
    attention          SDPA over a static KV cache written in place at the positions,
                       with the causal (or sliding-window) mask the graph builds

Structure is matched on the graph; numbers that decide the op (RoPE's theta and scale,
the attention mask, the cache write index) are checked by running the graph's own
subgraph on sample positions and comparing with what the gearbox op computes. A graph
that does something else (eps after the sqrt, another mask, llama3-scaled frequencies)
is left as it is and `Rewriter.misses` says why.

The KV cache writes stay in the graph as writes of the mutable cache buffers; the
partitioner gives them and the buffers to the delegate, whose attention op owns the cache.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import torch
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.fx import Node

from gearbox import ops  # noqa: F401  (registers torch.ops.gearbox)
from gearbox.fx_util import EvaluationError, ProgramState, add_node, bind, cone, evaluate, is_op, op_key, shape, \
    tensor_val
from gearbox.layout import FLAT, HEADS_T, Form, flat_source, form_of, rebuild, strip_identity

G = torch.ops.gearbox
MUL, ADD = "aten.mul.Tensor", "aten.add.Tensor"
SDPA = "aten.scaled_dot_product_attention.default"
ROPE_TOLERANCE = 1e-4  # max |cos/sin difference| accepted, f32 angles up to a few hundred rad
ROPE_SAMPLE_POSITIONS = 256


class Miss(Exception):
    """A near miss: the anchor looked like the pattern but is not it (message says why)."""


def _scalar_arg(state: ProgramState, node) -> Optional[float]:
    return state.scalar(strip_identity(node))


class Rewriter:
    """Rewrites one edge-dialect ExportedProgram in place. `done` counts rewrites per
    pattern; `misses` lists (pattern, node, reason) for anchors that did not match."""

    def __init__(self, program):
        self.program = program
        self.graph = program.graph_module.graph
        self.state = ProgramState(program)
        self.done: Dict[str, int] = {}
        self.misses: List[Tuple[str, str, str]] = []
        self.next_state = 0

    # ---- driver ------------------------------------------------------------------------

    def run(self) -> "Rewriter":
        for name, anchor_ops, fn in (
            ("embedding_scale", (MUL,), self.embedding_scale),
            ("rms_norm", (MUL,), self.rms_norm),
            ("gated_mlp", (MUL,), self.gated_mlp),
            ("rope", (ADD,), self.rope),
            ("attention", (SDPA,), self.attention),
        ):
            for node in list(self.graph.nodes):
                if node.graph is not self.graph or not is_op(node, *anchor_ops) or not node.users:
                    continue
                try:
                    new = fn(node)
                except Miss as e:
                    self.misses.append((name, node.name, str(e)))
                    continue
                if new is not None:
                    node.replace_all_uses_with(new)
                    self.graph.erase_node(node)  # fx keeps seeded ops (SDPA) it thinks impure
                    self.done[name] = self.done.get(name, 0) + 1
            self._cleanup()
        self._rename_outputs()
        return self

    def _rename_outputs(self) -> None:
        # A rewritten node that was a program output gives its place to the new node; the
        # signature names outputs by node, so it follows.
        outputs = self.graph.output_node().args[0]
        for spec, arg in zip(self.program.graph_signature.output_specs, outputs):
            if isinstance(arg, Node) and getattr(spec.arg, "name", None) not in (None, arg.name):
                spec.arg.name = arg.name

    def _cleanup(self) -> None:
        # Layout round trips left by the rewrites (view -> permute -> permute -> view of one
        # IR tensor) collapse to that tensor; what no one reads goes.
        for node in list(self.graph.nodes):
            if node.op == "call_function" and node.users and not op_key(node.target).startswith("gearbox."):
                src = flat_source(node)
                if src is not None and src is not node:
                    node.replace_all_uses_with(src)
        self.graph.eliminate_dead_code()
        self.program.graph_module.recompile()

    def _insert_before(self, anchor: Node):
        return self.graph.inserting_before(anchor)

    # ---- embedding * scale ---------------------------------------------------------------

    def embedding_scale(self, node: Node) -> Optional[Node]:
        for emb, c in (node.args, node.args[::-1]):
            emb = strip_identity(emb)
            if is_op(emb, "aten.embedding.default") and self.state.is_param(emb.args[0]):
                scale = _scalar_arg(self.state, c)
                if scale is None:
                    return None
                with self._insert_before(node):
                    return add_node(self.graph, G.embedding.default, (emb.args[1], emb.args[0], scale), like=node)
        return None

    # ---- RMSNorm -------------------------------------------------------------------------

    def _norm_weight(self, node) -> Optional[Tuple[Node, float]]:
        node = strip_identity(node)
        if self.state.is_param(node) and len(shape(node)) == 1:
            return node, 0.0
        if is_op(node, ADD) and bind(node).get("alpha", 1) == 1:
            for w, c in (node.args, node.args[::-1]):
                w = strip_identity(w)
                offset = _scalar_arg(self.state, c)
                if self.state.is_param(w) and len(shape(w)) == 1 and offset is not None:
                    return w, offset
        return None

    def _normalized(self, node) -> Optional[Tuple[Node, float]]:
        """(x, eps) when node is x * rsqrt(mean(x^2, -1, keepdim) + eps)."""
        node = strip_identity(node)
        if not is_op(node, MUL):
            return None
        for x, r in (node.args, node.args[::-1]):
            r = strip_identity(r)
            if not is_op(r, "aten.rsqrt.default"):
                continue
            s = strip_identity(r.args[0])
            if not is_op(s, ADD) or bind(s).get("alpha", 1) != 1:
                raise Miss("rsqrt of something other than mean(x^2) + eps")
            for m, e in (s.args, s.args[::-1]):
                m = strip_identity(m)
                eps = _scalar_arg(self.state, e)
                if eps is None or not is_op(m, "aten.mean.dim"):
                    continue
                b = bind(m)
                rank = len(shape(m.args[0]))
                if [d % rank for d in (b["dim"] or [])] != [rank - 1] or not b["keepdim"]:
                    raise Miss("the mean is not over the last dim with keepdim")
                p = strip_identity(m.args[0])
                if is_op(p, "aten.pow.Tensor_Scalar") and p.args[1] == 2:
                    base = strip_identity(p.args[0])
                elif is_op(p, MUL) and strip_identity(p.args[0]) is strip_identity(p.args[1]):
                    base = strip_identity(p.args[0])
                else:
                    raise Miss("the mean is not of x^2")
                if base is not strip_identity(x):
                    raise Miss("x^2 and the normalized x are different tensors")
                return strip_identity(x), eps
            raise Miss("rsqrt(mean(x^2) + eps) without a constant eps")
        return None

    def rms_norm(self, node: Node) -> Optional[Node]:
        for w, n in (node.args, node.args[::-1]):
            weight = self._norm_weight(w)
            if weight is None:
                continue
            found = self._normalized(n)
            if found is None:
                continue
            x, eps = found
            param, offset = weight
            length = shape(param)[0]
            form = form_of(x)
            if form is None:
                raise Miss("the normalized tensor is not a [1, T, F] activation or a per-head view of one")
            head_dim = 0 if form.kind == FLAT else form.head_dim
            if length != (shape(form.src)[2] if form.kind == FLAT else form.head_dim):
                raise Miss(f"the weight has {length} elements, the normalized dim does not")
            with self._insert_before(node):
                out = add_node(self.graph, G.rms_norm.default, (form.src, param, eps, offset, head_dim), like=node)
                return rebuild(self.graph, out, form, node)
        return None

    # ---- gated MLP -----------------------------------------------------------------------

    def _activation(self, node) -> Optional[Tuple[str, Node]]:
        node = strip_identity(node)
        if is_op(node, "aten.silu.default"):
            return "silu", node.args[0]
        if is_op(node, "aten.gelu.default"):
            approximate = bind(node).get("approximate", "none")
            if approximate != "tanh":
                raise Miss(f"gelu with approximate={approximate!r}: gearbox fuses the tanh form only")
            return "gelu_tanh", node.args[0]
        if is_op(node, MUL):
            for a, s in (node.args, node.args[::-1]):
                s = strip_identity(s)
                if is_op(s, "aten.sigmoid.default") and strip_identity(s.args[0]) is strip_identity(a):
                    return "silu", a
        return None

    def gated_mlp(self, node: Node) -> Optional[Node]:
        for act, up in (node.args, node.args[::-1]):
            found = self._activation(act)
            if found is None:
                continue
            kind, gate = found
            if shape(gate) != shape(up) or not tensor_val(up).dtype.is_floating_point:
                return None
            op = G.silu_mul.default if kind == "silu" else G.gelu_tanh_mul.default
            with self._insert_before(node):
                return add_node(self.graph, op, (gate, up), like=node)
        return None

    # ---- RoPE ----------------------------------------------------------------------------

    def _rotate_half(self, node) -> Optional[Node]:
        """x when node is cat([-x[..., D/2:], x[..., :D/2]], -1)."""
        node = strip_identity(node)
        if not is_op(node, "aten.cat.default") or len(node.args[0]) != 2:
            return None
        rank = len(shape(node))
        if bind(node).get("dim", 0) % rank != rank - 1:
            return None
        neg, first = (strip_identity(a) for a in node.args[0])
        if not is_op(neg, "aten.neg.default"):
            return None
        second = strip_identity(neg.args[0])
        d = shape(node)[-1]
        if not (is_op(first, "aten.slice_copy.Tensor", "aten.slice.Tensor")
                and is_op(second, "aten.slice_copy.Tensor", "aten.slice.Tensor")):
            return None
        bf, bs = bind(first), bind(second)
        if bf["self"] is not bs["self"] or bf["dim"] % rank != rank - 1 or bs["dim"] % rank != rank - 1:
            return None
        if (bf["start"] or 0) != 0 or bf["end"] != d // 2 or bs["start"] != d // 2 or bs["end"] < d \
                or bf["step"] != 1 or bs["step"] != 1:
            raise Miss("cat(-x2, x1) with halves that are not the two halves of the head")
        return strip_identity(bf["self"])

    def _positions_of(self, table: Node, t_extent) -> Optional[Node]:
        """The [1, T] integer tensor the cos/sin table is computed from."""
        for n in reversed(cone([table])):
            v = tensor_val(n)
            if v is not None and not v.dtype.is_floating_point and v.dtype != torch.bool and v.dim() == 2 \
                    and v.shape[0] == 1 and str(v.shape[1]) == str(t_extent):
                return n
        return None

    def rope(self, node: Node) -> Optional[Node]:
        if bind(node).get("alpha", 1) != 1:
            return None
        for a, b in (node.args, node.args[::-1]):
            a, b = strip_identity(a), strip_identity(b)
            if not (is_op(a, MUL) and is_op(b, MUL)):
                return None
            for rot, sin in (b.args, b.args[::-1]):
                x = self._rotate_half(rot)
                if x is None:
                    continue
                cos = next((c for xx, c in (a.args, a.args[::-1]) if strip_identity(xx) is x), None)
                if cos is None:
                    raise Miss("x * cos and rotate_half(x) * sin read different tensors")
                return self._rope_from(node, x, cos, sin)
        return None

    def _rope_from(self, node: Node, x: Node, cos: Node, sin: Node) -> Node:
        form = form_of(x)
        if form is None or form.kind == FLAT:
            raise Miss("RoPE of a tensor that is not a [1, T, H, D] or [1, H, T, D] view of an activation")
        t_extent = shape(form.src)[1]
        positions = self._positions_of(cos, t_extent)
        if positions is None or self._positions_of(sin, t_extent) is not positions:
            raise Miss("cos/sin are not computed from one [1, T] integer positions tensor")
        d = form.head_dim
        p = torch.arange(ROPE_SAMPLE_POSITIONS, dtype=tensor_val(positions).dtype).unsqueeze(0)
        try:
            got_cos, got_sin = evaluate([cos, sin], self.state, {positions: p})
        except EvaluationError as e:
            raise Miss(f"cos/sin cannot be computed from the positions alone ({e})") from None
        n = ROPE_SAMPLE_POSITIONS
        if got_cos.numel() != n * d or got_sin.numel() != n * d:
            raise Miss(f"cos/sin have {got_cos.numel()} elements for {n} positions of {d}")
        got_cos, got_sin = got_cos.double().reshape(n, d), got_sin.double().reshape(n, d)
        inv = torch.atan2(got_sin[1, : d // 2], got_cos[1, : d // 2])
        if d < 4 or inv[0] <= 0 or inv[1] <= 0:
            raise Miss("cannot read RoPE frequencies from cos/sin")
        scale = float(inv[0])
        theta = float((inv[1] / inv[0]) ** (-d / 2))
        buffer = self._inv_freq_buffer(cos, d)
        if buffer is not None:  # exact f32 values: theta and scale without atan2's rounding
            node_f, inv_freq = buffer
            scale = float(inv_freq[0])
            theta = float((inv_freq[1] / inv_freq[0]) ** (-d / 2))
        if abs(theta - round(theta)) < 1e-4 * theta:
            theta = float(round(theta))
        if abs(scale - 1.0) < 1e-6:
            scale = 1.0
        positions_f = torch.arange(n, dtype=torch.float64).unsqueeze(1)
        err = _table_error(positions_f * (theta ** (-torch.arange(0, d // 2) * 2.0 / d)) * scale, got_cos, got_sin)
        args = (form.src, positions, theta, scale, form.heads, d)
        if not err < ROPE_TOLERANCE and buffer is not None:
            # Scaled frequencies (llama3, ...) are no theta^(-2i/d) * scale: the graph's own
            # inv_freq buffer goes to gearbox as the op's frequency weight.
            err = _table_error(positions_f * inv_freq, got_cos, got_sin)
            if err < ROPE_TOLERANCE:
                if tensor_val(node_f).dtype != torch.float32:
                    raise Miss(f"the inv_freq buffer '{node_f.name}' is {tensor_val(node_f).dtype}; gearbox reads "
                               "f32 frequencies")
                if not (math.isfinite(theta) and theta > 0):
                    theta = 10000.0  # unused with a frequency weight; the IR wants a valid base
                args = (form.src, positions, theta, 1.0, form.heads, d, node_f)
        if not err < ROPE_TOLERANCE:
            raise Miss(f"cos/sin differ from rotate-half RoPE with theta {theta:g}, scale {scale:g}"
                       + (" and from the graph's inv_freq buffer" if buffer is not None else "")
                       + f" by {err:.2g} (frequency scaling not read from an inv_freq [head_dim / 2] buffer, or an "
                       "attention scaling of cos/sin, has no gearbox op)")
        with self._insert_before(node):
            out = add_node(self.graph, G.rope.default, args, like=node)
            return rebuild(self.graph, out, form, node)

    def _inv_freq_buffer(self, table: Node, d: int) -> Optional[Tuple[Node, torch.Tensor]]:
        """The [d / 2] float constant (parameter or buffer the graph never writes) that the
        cos/sin table is computed from, and its values."""
        for n in cone([table]):
            v = self.state.value(n) if n.op == "placeholder" and self.state.is_param(n) else None
            if isinstance(v, torch.Tensor) and v.dtype.is_floating_point and tuple(v.shape) == (d // 2,):
                return n, v.double()
        return None

    # ---- attention over a static KV cache --------------------------------------------------

    def _cache_write(self, node) -> Tuple[Node, Node, Node]:
        """(buffer, index, value) of K/V read through repeat_kv from a cache write."""
        node = strip_identity(node)
        if is_op(node, "aten.view_copy.default", "aten.view.default", "aten.reshape.default"):
            inner = strip_identity(node.args[0])
            if is_op(inner, "aten.expand_copy.default", "aten.expand.default"):
                unsq = strip_identity(inner.args[0])
                if is_op(unsq, "aten.unsqueeze_copy.default", "aten.unsqueeze.default") and unsq.args[1] == 2:
                    node = strip_identity(unsq.args[0])
        if is_op(node, "aten.index_put.default", "aten.index_put_.default"):
            buf, indices, value = node.args[:3]
            if len(indices) != 3 or indices[0] is not None or indices[1] is not None:
                raise Miss("the cache write does not index the sequence dim only")
            if bind(node).get("accumulate", False):
                raise Miss("the cache write accumulates")
            index = indices[2]
        elif is_op(node, "aten.index_copy.default", "aten.index_copy_.default"):
            buf, dim, index, value = node.args[:4]
            if dim != 2:
                raise Miss("the cache write is not along the sequence dim")
        else:
            raise Miss("K/V are not a static cache written in place (index_copy_/index_put_ into a buffer)")
        if not self.state.is_mutable_buffer(buf):
            raise Miss(f"the cache '{getattr(buf, 'name', buf)}' is not a mutable buffer of the program")
        return buf, index, value

    def _samples(self, rows: int) -> List[Tuple[int, int]]:
        """(start, length) of sample calls: a prompt, a decode step after it, a late step."""
        prompt = min(rows, 12)
        out = [(0, prompt)]
        if prompt < rows:
            out.append((prompt, 1))
        if rows - 2 > prompt:
            out.append((rows - 2, 2))
        return out

    def _sample_inputs(self, start: int, length: int, t_extent) -> Dict[Node, torch.Tensor]:
        """Values of the program's user inputs for a call of `length` tokens at `start`:
        integer inputs count up from start, float inputs are zeros."""
        given = {}
        for n in self.graph.nodes:
            if n.op != "placeholder" or n.name not in self.state.user_inputs:
                continue
            v = tensor_val(n)
            if v is None:
                continue
            dims = [length if str(e) == str(t_extent) else int(e) for e in v.shape]
            if v.dtype.is_floating_point:
                given[n] = torch.zeros(dims, dtype=v.dtype)
            else:
                numel = math.prod(dims)
                given[n] = (torch.arange(numel, dtype=v.dtype) % max(length, 1) + start).reshape(dims)
        return given

    def attention(self, node: Node) -> Optional[Node]:
        b = bind(node)
        if b.get("dropout_p", 0.0) != 0.0:
            raise Miss("attention with dropout")
        q_form = form_of(b["query"])
        if q_form is None or q_form.kind != HEADS_T:
            raise Miss("the query is not a [1, H, T, D] view of an activation")
        rope = q_form.src
        if not is_op(rope, "gearbox.rope.default"):
            raise Miss("the query has no RoPE that gives the positions")
        positions = rope.args[1]
        heads, head_dim = q_form.heads, q_form.head_dim
        writes = []
        for which in ("key", "value"):
            buf, index, value = self._cache_write(b[which])
            vf = form_of(value)
            if vf is None or vf.kind != HEADS_T or vf.head_dim != head_dim:
                raise Miss(f"the {which} written to the cache is not a [1, H, T, D] view of an activation")
            writes.append((buf, index, value, vf))
        kv_heads = writes[0][3].heads
        rows = shape(writes[0][0])[2]
        if heads % kv_heads or writes[1][3].heads != kv_heads:
            raise Miss(f"{heads} query heads over {kv_heads} and {writes[1][3].heads} kv heads")
        window = self._check_mask_and_index(node, b, positions, [w[1] for w in writes], rows, shape(rope)[1])
        scale = b.get("scale")
        scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
        slot = self.next_state
        self.next_state += 1
        targets = [self._write_node(w[0]) for w in writes]
        first = min(targets, key=lambda n: list(self.graph.nodes).index(n))
        # The cache writes stay, now written from the IR's own tensors at the positions, so
        # that the delegate takes them (and the buffers) with the attention.
        with self._insert_before(first):
            index = add_node(self.graph, _edge("aten.view_copy.default"), (positions, [-1]), like=node,
                             fake_args=(positions, [positions.meta["val"].shape[1]]))
        for target, (_, _, _, vf) in zip(targets, writes):
            with self._insert_before(target):
                value = rebuild(self.graph, vf.src, vf, node)
            if is_op(target, "aten.index_put.default", "aten.index_put_.default"):
                target.args = (target.args[0], [None, None, index], value) + tuple(target.args[3:])
            else:
                target.args = (target.args[0], target.args[1], index, value) + tuple(target.args[4:])
        with self._insert_before(node):
            out = add_node(self.graph, G.attention.default,
                           (rope, writes[0][3].src, writes[1][3].src, positions, slot, heads, kv_heads, head_dim,
                            window, scale, 0), like=node)
            return rebuild(self.graph, out, Form(out, HEADS_T, heads, head_dim), node)

    def _write_node(self, buf: Node) -> Node:
        writes = [u for u in buf.users if is_op(u, "aten.index_put.default", "aten.index_put_.default",
                                                "aten.index_copy.default", "aten.index_copy_.default")]
        if len(writes) != 1:
            raise Miss(f"the cache '{buf.name}' is written {len(writes)} times")
        return writes[0]

    def _check_mask_and_index(self, node, b, positions, indices, rows, t_extent) -> int:
        """The sliding window (0: none) when the mask is causal over the cache (and the
        window) at the RoPE positions, and the cache is written at those positions."""
        mask = b.get("attn_mask")
        if mask is None:
            raise Miss("attention without a mask over the static cache (is_causal alone is top-left "
                       "aligned and ignores the cache position)")
        if b.get("is_causal"):
            raise Miss("attention with both a mask and is_causal")
        window = None
        # The latest call first: its positions reach past any window shorter than the cache,
        # so the window is read where it binds (an early prompt inside the window looks causal).
        for start, length in reversed(self._samples(rows)):
            given = self._sample_inputs(start, length, t_extent)
            try:
                got = evaluate([mask, positions] + list(indices), self.state, given)
            except EvaluationError as e:
                raise Miss(f"the mask cannot be computed from the inputs ({e})") from None
            m, p = got[0], got[1]
            p = p.reshape(-1).long()
            for idx in got[2:]:
                if not torch.equal(idx.reshape(-1).long(), p):
                    raise Miss("the cache is written at other rows than the RoPE positions")
            if m.dtype == torch.bool:
                allowed = m
            else:
                if not bool(((m == 0) | torch.isneginf(m) | (m <= torch.finfo(m.dtype).min)).all()):
                    raise Miss("an additive mask with values other than 0 and -inf")
                allowed = m == 0
            if allowed.shape[-1] != rows or allowed.shape[-2] != length:
                raise Miss(f"the mask is {tuple(allowed.shape)}, not [.., {length}, {rows}]")
            allowed = allowed.reshape(-1, length, rows)
            if not bool((allowed == allowed[:1]).all()):
                raise Miss("the mask differs between heads")
            allowed = allowed[0]
            j = torch.arange(rows).unsqueeze(0)
            causal = j <= p.unsqueeze(1)
            if window is None:
                counts = allowed.sum(-1)
                full = causal.sum(-1)
                window = 0 if bool((counts == full).all()) else int(counts.max())
            want = causal & (j > p.unsqueeze(1) - window) if window else causal
            if not torch.equal(allowed, want):
                raise Miss("the mask is neither causal nor a causal sliding window over the cache positions")
        return window


def _table_error(angles: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> float:
    """Largest difference between rotate-half cos/sin tables of angles [n, d / 2] and the
    graph's cos/sin [n, d]."""
    want = torch.cat([angles, angles], dim=1)
    return max((want.cos() - cos).abs().max().item(), (want.sin() - sin).abs().max().item())


def _edge(key: str):
    from executorch.exir.dialects._ops import ops as exir_ops

    ns, name, overload = key.split(".")
    return getattr(getattr(getattr(exir_ops.edge, ns), name), overload)


class GearboxRewritePass(ExportedProgramPassBase):
    """The rewrites as an ExecuTorch pass over an edge-dialect ExportedProgram (give it to
    to_edge_transform_and_lower(transform_passes=...); gearbox.to_edge_transform_and_lower
    does). `last` keeps the Rewriter of the latest call for the report."""

    def __init__(self):
        super().__init__()
        self.last: Optional[Rewriter] = None

    def call(self, exported_program) -> ExportedProgramPassResult:
        self.last = Rewriter(exported_program).run()
        # The partitioner's report names what was rewritten and what was not.
        exported_program.graph_module.meta["gearbox_rewrites"] = {"done": dict(self.last.done),
                                                                  "misses": list(self.last.misses)}
        return ExportedProgramPassResult(exported_program, bool(self.last.done))


def rewrite(program) -> Rewriter:
    """Runs the rewrites on an edge-dialect ExportedProgram in place."""
    return Rewriter(program).run()
