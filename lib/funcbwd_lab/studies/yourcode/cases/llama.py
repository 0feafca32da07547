"""LLaMA (meta-llama/llama, llama/model.py at 0504cf4): attention with a key/value cache, a
``torch.zeros`` tensor kept on the module and written in place inside ``forward``
(``self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk``), then read back up to the current
position; a prefill call followed by a one-token decoding call reads what the first one wrote.

Re-created from the upstream ``Attention`` (and its rotary-embedding helpers) and trimmed: the
fairscale ``ColumnParallelLinear``/``RowParallelLinear`` layers are plain bias-free ``nn.Linear``
with fixed weights (one model-parallel rank), the cache stays on the CPU (``is_gpu=False``), sizes
are tiny. The in-place lines are upstream's as written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from funcbwd_lab.studies.yourcode.case import Case, randn


@dataclass
class ModelArgs:
    dim: int = 8
    n_layers: int = 1
    n_heads: int = 2
    vocab_size: int = -1
    multiple_of: int = 256
    norm_eps: float = 1e-5

    max_batch_size: int = 2
    max_seq_len: int = 6

    is_gpu: bool = False


_ARGS = ModelArgs()
_gen = torch.Generator().manual_seed(2023)
_WQ, _WK, _WV, _WO = (randn(_gen, _ARGS.dim, _ARGS.dim) / 3 for _ in range(4))


def _linear(w):
    lin = nn.Linear(w.shape[1], w.shape[0], bias=False)
    with torch.no_grad():
        lin.weight.copy_(w)
    return lin


# meta-llama/llama llama/model.py (0504cf4): precompute_freqs_cis, reshape_for_broadcast,
# apply_rotary_emb
def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)  # type: ignore
    freqs = torch.outer(t, freqs).float()  # type: ignore
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64
    return freqs_cis


def reshape_for_broadcast(freqs_cis: torch.Tensor, x: torch.Tensor):
    ndim = x.ndim
    assert 0 <= 1 < ndim
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(
    xq: torch.Tensor,
    xk: torch.Tensor,
    freqs_cis: torch.Tensor,
) -> Tuple[torch.Tensor, torch.Tensor]:
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


# same file, class Attention (fairscale layers as nn.Linear, one rank)
class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()

        self.n_local_heads = args.n_heads // 1  # fs_init.get_model_parallel_world_size()
        self.head_dim = args.dim // args.n_heads

        self.wq = _linear(_WQ)
        self.wk = _linear(_WK)
        self.wv = _linear(_WV)
        self.wo = _linear(_WO)

        self.cache_k = torch.zeros(
            (args.max_batch_size, args.max_seq_len, self.n_local_heads, self.head_dim)
        )
        if args.is_gpu:
            self.cache_k = self.cache_k.cuda()

        self.cache_v = torch.zeros(
            (args.max_batch_size, args.max_seq_len, self.n_local_heads, self.head_dim)
        )
        if args.is_gpu:
            self.cache_v = self.cache_v.cuda()

    def forward(self, x: torch.Tensor, start_pos: int, freqs_cis: torch.Tensor, mask: Optional[torch.Tensor]):
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)

        xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_local_heads, self.head_dim)

        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)

        self.cache_k = self.cache_k.to(xq)
        self.cache_v = self.cache_v.to(xq)

        self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk
        self.cache_v[:bsz, start_pos : start_pos + seqlen] = xv

        keys = self.cache_k[:bsz, : start_pos + seqlen]
        values = self.cache_v[:bsz, : start_pos + seqlen]

        xq = xq.transpose(1, 2)
        keys = keys.transpose(1, 2)
        values = values.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask  # (bs, n_local_heads, slen, cache_len + slen)
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)  # (bs, n_local_heads, slen, head_dim)
        output = output.transpose(
            1, 2
        ).contiguous().view(bsz, seqlen, -1)

        return self.wo(output)


_FREQS = precompute_freqs_cis(_ARGS.dim // _ARGS.n_heads, _ARGS.max_seq_len * 2)
_PROMPT = 3


def _mask(seqlen, start_pos):
    # Transformer.forward's causal mask
    mask = torch.full((1, 1, seqlen, seqlen), float("-inf"))
    return torch.triu(mask, diagonal=start_pos + 1)


def _build(decorate):
    attention = Attention(_ARGS)  # a fresh module: an empty cache

    # llama/generation.py's loop over Transformer.forward(tokens[:, prev_pos:cur_pos], prev_pos):
    # the prompt, then one token that attends to the cached keys and values
    @decorate
    def prefill_then_decode(x):
        attention(x[:, :_PROMPT], 0, _FREQS[0:_PROMPT], _mask(_PROMPT, 0))
        return attention(x[:, _PROMPT:], _PROMPT, _FREQS[_PROMPT:_PROMPT + 1], None)

    return prefill_then_decode


def prefill_then_decode_rewrite(x):
    bsz, n, _ = x.shape
    h, hd = _ARGS.n_heads, _ARGS.dim // _ARGS.n_heads
    q = (x @ _WQ.t()).view(bsz, n, h, hd)
    k = (x @ _WK.t()).view(bsz, n, h, hd)
    v = (x @ _WV.t()).view(bsz, n, h, hd)
    q, k = apply_rotary_emb(q, k, _FREQS[:n])
    q, k, v = q[:, -1:].transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    scores = F.softmax(q @ k.transpose(2, 3) / math.sqrt(hd), dim=-1)
    return (scores @ v).transpose(1, 2).reshape(bsz, 1, -1) @ _WO.t()


CASES = [
    Case("llama:Attention.forward-kv_cache", "llama",
         "meta-llama/llama llama/model.py: Attention.forward, Attention.__init__ (0504cf4)",
         "a prompt then one token through attention with a KV cache: self.cache_k = torch.zeros "
         "on the module, self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk, then "
         "keys = self.cache_k[:bsz, : start_pos + seqlen] read back",
         ("state", "captured", "readback"), _build, prefill_then_decode_rewrite,
         lambda g: (randn(g, 1, _PROMPT + 1, _ARGS.dim),), batched=(0,), diff=0),
]
