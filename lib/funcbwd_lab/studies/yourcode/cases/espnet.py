"""ESPnet (espnet/espnet, espnet/nets/pytorch_backend/transformer/embedding.py at 029365d): the
sinusoidal positional encodings, which grow their table inside ``forward`` when an input is
longer than the table (``extend_pe``: ``pe = torch.zeros(...)``, ``pe[:, 0::2] = torch.sin(...)``,
``pe[:, 1::2] = torch.cos(...)``, then ``self.pe = ...``).

Re-created from the upstream modules and trimmed (docstrings, the state-dict hook); built with a
short ``max_len`` so that the call's input extends the table; dropout rate 0. The in-place lines
are upstream's as written.
"""

from __future__ import annotations

import math

import torch

from funcbwd_lab.studies.yourcode.case import Case, randn

_D_MODEL, _TIME = 4, 5


# espnet/espnet espnet/nets/pytorch_backend/transformer/embedding.py, class PositionalEncoding
# (029365d)
class PositionalEncoding(torch.nn.Module):
    def __init__(self, d_model, dropout_rate, max_len=5000, reverse=False):
        """Construct an PositionalEncoding object."""
        super(PositionalEncoding, self).__init__()
        self.d_model = d_model
        self.reverse = reverse
        self.xscale = math.sqrt(self.d_model)
        self.dropout = torch.nn.Dropout(p=dropout_rate)
        self.pe = None
        self.extend_pe(torch.tensor(0.0).expand(1, max_len))

    def extend_pe(self, x):
        """Reset the positional encodings."""
        if self.pe is not None:
            if self.pe.size(1) >= x.size(1):
                if self.pe.dtype != x.dtype or self.pe.device != x.device:
                    self.pe = self.pe.to(dtype=x.dtype, device=x.device)
                return
        pe = torch.zeros(x.size(1), self.d_model)
        if self.reverse:
            position = torch.arange(
                x.size(1) - 1, -1, -1.0, dtype=torch.float32
            ).unsqueeze(1)
        else:
            position = torch.arange(0, x.size(1), dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(
            torch.arange(0, self.d_model, 2, dtype=torch.float32)
            * -(math.log(10000.0) / self.d_model)
        )
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0)
        self.pe = pe.to(device=x.device, dtype=x.dtype)

    def forward(self, x: torch.Tensor):
        self.extend_pe(x)
        x = x * self.xscale + self.pe[:, : x.size(1)]
        return self.dropout(x)


def _table(positions):
    div = torch.exp(torch.arange(0, _D_MODEL, 2, dtype=torch.float32)
                    * -(math.log(10000.0) / _D_MODEL))
    arg = positions[:, None] * div
    return torch.stack([torch.sin(arg), torch.cos(arg)], dim=-1).reshape(len(positions), _D_MODEL)


def _abs_build(decorate):
    enc = PositionalEncoding(_D_MODEL, 0.0, max_len=2)  # shorter than the input: forward extends
    return decorate(enc.forward)


def abs_rewrite(x):
    return x * math.sqrt(_D_MODEL) + _table(torch.arange(x.size(1), dtype=torch.float32))


CASES = [
    Case("espnet:PositionalEncoding.forward", "espnet",
         "espnet/espnet espnet/nets/pytorch_backend/transformer/embedding.py: "
         "PositionalEncoding.forward, extend_pe (029365d)",
         "forward extends the table: pe = torch.zeros(T, d); pe[:, 0::2] = sin; pe[:, 1::2] = "
         "cos; self.pe = pe (unbatched values; the input batched)",
         ("factory", "state"), _abs_build, abs_rewrite,
         lambda g: (randn(g, 2, _TIME, _D_MODEL),), batched=(0,), diff=0),
]
