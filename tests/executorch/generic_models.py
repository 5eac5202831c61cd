"""Small models of plain aten ops that no pattern rewrites, for the generic IR ops: an MLP,
attention blocks over F.scaled_dot_product_attention, an encoder layer, and a graph with
aten.cumsum between supported ops. Shared by generic_test.py and make_generic_programs.py."""

import torch
import torch.nn.functional as F
from torch import nn

WIDTH, HEADS = 32, 4
MAX_SEQ = 16


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def _heads(x, b, t):
    return x.view(b, t, HEADS, -1).transpose(1, 2)


class Attention(nn.Module):
    """Self-attention through F.scaled_dot_product_attention: causal, or with a mask input."""

    def __init__(self, causal: bool):
        super().__init__()
        self.causal = causal
        self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        a = F.scaled_dot_product_attention(_heads(q, b, t), _heads(k, b, t), _heads(v, b, t), attn_mask=mask,
                                           is_causal=self.causal)
        return self.out(a.transpose(1, 2).reshape(b, t, d))


class SdpaBlock(nn.Module):
    """A pre-norm transformer block with causal attention (RMSNorm written out, SiLU MLP)."""

    def __init__(self, causal: bool = True):
        super().__init__()
        self.attn = Attention(causal)
        self.norm1, self.norm2 = nn.Parameter(torch.rand(WIDTH) + 0.5), nn.Parameter(torch.rand(WIDTH) + 0.5)
        self.up, self.down = nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)

    @staticmethod
    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def forward(self, x, mask=None):
        x = x + self.attn(self.rms(x, self.norm1), mask)
        return x + self.down(F.silu(self.up(self.rms(x, self.norm2))))


class EncoderLayer(nn.Module):
    """A post-norm encoder layer: bidirectional attention, LayerNorm, GELU MLP, residuals."""

    def __init__(self):
        super().__init__()
        self.attn = Attention(causal=False)
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.fc1, self.fc2 = nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x):
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x), approximate="tanh")))


class CumsumBetween(nn.Module):
    """Supported ops, aten.cumsum (no converter), supported ops: a delegate on each side.
    (aten.sort, the other op without a converter, has no kernel in the ExecuTorch
    runtime's portable library, so the program would not load.)"""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        return self.fc2(torch.cumsum(h, dim=-1)) * torch.sigmoid(h)


def causal_mask(t: int) -> torch.Tensor:
    """[1, 1, t, t] bool, true where a query may see a key (here: the previous 3 and itself)."""
    i = torch.arange(t)
    return ((i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < 4))[None, None]


def inputs(name: str, t: int):
    torch.manual_seed(t)
    x = torch.randn(1, t, WIDTH)
    return (x, causal_mask(t)) if name == "masked" else (x,)


class Scalars(nn.Module):
    """0-d tensors made in the graph (a full of shape []) broadcast into an activation."""

    def forward(self, x):
        return torch.where(x > 0, x, torch.full((), -2.0)) * 3.0


class DynamicFull(nn.Module):
    """Tensors made in the graph whose size is the dynamic sequence length."""

    def forward(self, x):
        t = x.shape[1]
        return x * torch.full((1, t, 1), 0.5) + torch.ones(t, WIDTH) - torch.zeros(1, t, WIDTH)


MODELS = {"scalars": Scalars, "dynamic_full": DynamicFull, "mlp": Mlp, "causal": lambda: SdpaBlock(True),
          "masked": lambda: SdpaBlock(False), "encoder": EncoderLayer, "cumsum": CumsumBetween}


def export(name: str, model: nn.Module, lo: int = 1, hi: int = MAX_SEQ):
    seq = torch.export.Dim("seq", min=lo, max=hi)
    shapes = ({1: seq}, {2: seq, 3: seq}) if name == "masked" else ({1: seq},)
    with torch.no_grad():
        return torch.export.export(model.eval(), inputs(name, 5), dynamic_shapes=shapes, strict=False)
