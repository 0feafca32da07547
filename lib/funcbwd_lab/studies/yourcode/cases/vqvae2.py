"""vq-vae-2-pytorch (rosinality/vq-vae-2-pytorch, vqvae.py at 29e36e7): the vector quantizer's
training forward, which updates its codebook buffers by exponential moving average in place
through ``.data`` (``self.cluster_size.data.mul_(self.decay).add_(...)``,
``self.embed.data.copy_(...)``) and returns a straight-through estimate.

Re-created from the upstream ``Quantize`` module and trimmed (``dist_fn.all_reduce``, a no-op in
one process, left out; the codebook drawn from a fixed generator); the in-place lines are
upstream's as written.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from funcbwd_lab.studies.yourcode.case import Case, randn

_DIM, _N_EMBED = 3, 4
_EMBED = randn(torch.Generator().manual_seed(2018), _DIM, _N_EMBED)


# rosinality/vq-vae-2-pytorch vqvae.py, class Quantize (29e36e7)
class Quantize(nn.Module):
    def __init__(self, dim, n_embed, decay=0.99, eps=1e-5):
        super().__init__()

        self.dim = dim
        self.n_embed = n_embed
        self.decay = decay
        self.eps = eps

        embed = _EMBED.clone()  # upstream: torch.randn(dim, n_embed)
        self.register_buffer("embed", embed)
        self.register_buffer("cluster_size", torch.ones(n_embed))
        self.register_buffer("embed_avg", embed.clone())

    def forward(self, input):
        flatten = input.reshape(-1, self.dim)
        dist = (
            flatten.pow(2).sum(1, keepdim=True)
            - 2 * flatten @ self.embed
            + self.embed.pow(2).sum(0, keepdim=True)
        )
        _, embed_ind = (-dist).max(1)
        embed_onehot = F.one_hot(embed_ind, self.n_embed).type(flatten.dtype)
        embed_ind = embed_ind.view(*input.shape[:-1])
        quantize = self.embed_code(embed_ind)

        if self.training:
            embed_onehot_sum = embed_onehot.sum(0)
            embed_sum = flatten.transpose(0, 1) @ embed_onehot

            self.cluster_size.data.mul_(self.decay).add_(
                embed_onehot_sum, alpha=1 - self.decay
            )
            self.embed_avg.data.mul_(self.decay).add_(embed_sum, alpha=1 - self.decay)
            n = self.cluster_size.sum()
            cluster_size = (
                (self.cluster_size + self.eps) / (n + self.n_embed * self.eps) * n
            )
            embed_normalized = self.embed_avg / cluster_size.unsqueeze(0)
            self.embed.data.copy_(embed_normalized)

        diff = (quantize.detach() - input).pow(2).mean()
        quantize = input + (quantize - input).detach()

        return quantize, diff, embed_ind

    def embed_code(self, embed_id):
        return F.embedding(embed_id, self.embed.transpose(0, 1))


def _build(decorate):
    quantizer = Quantize(_DIM, _N_EMBED)  # a fresh module: training mode, initial codebook

    # a training step reads the straight-through output, the commitment loss, and the codebook
    # the EMA update left behind
    @decorate
    def quantize_step(input):
        quantize, diff, _ = quantizer(input)
        return torch.cat([quantize.flatten(), diff.reshape(1), quantizer.embed.flatten()])

    return quantize_step


def quantize_step_rewrite(input, decay=0.99, eps=1e-5):
    flatten = input.reshape(-1, _DIM)
    dist = flatten.pow(2).sum(1, keepdim=True) - 2 * flatten @ _EMBED + _EMBED.pow(2).sum(0)
    onehot = F.one_hot((-dist).argmax(1), _N_EMBED).to(flatten.dtype)
    quantize = (onehot @ _EMBED.t()).reshape(input.shape)
    # the buffers are updated through .data: no gradient reaches them
    flat_d = flatten.detach()
    cluster = torch.ones(_N_EMBED) * decay + onehot.sum(0) * (1 - decay)
    embed_avg = _EMBED * decay + (flat_d.t() @ onehot) * (1 - decay)
    n = cluster.sum()
    embed = embed_avg / ((cluster + eps) / (n + _N_EMBED * eps) * n)
    diff = (quantize - input).pow(2).mean()
    st = input + (quantize - input).detach()
    return torch.cat([st.flatten(), diff.reshape(1), embed.flatten()])


CASES = [
    Case("vqvae2:Quantize.forward", "vq-vae-2-pytorch",
         "rosinality/vq-vae-2-pytorch vqvae.py: Quantize.forward (29e36e7)",
         "EMA codebook update of module buffers through .data: cluster_size.data.mul_().add_(), "
         "embed_avg.data.mul_().add_(), embed.data.copy_(); straight-through output (upstream's "
         "F.one_hot reads its indices' values: vmap over vjp stops there first)",
         ("buffer", "data", "arith", "state"), _build, quantize_step_rewrite,
         lambda g: (randn(g, 5, _DIM),), batched=(0,), diff=0),
]
