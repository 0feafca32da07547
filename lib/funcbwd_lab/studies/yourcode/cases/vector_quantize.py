"""vector-quantize-pytorch (lucidrains/vector-quantize-pytorch): the VQ-VAE codebook with
exponential-moving-average updates of its buffers.

Re-creates ``ema_inplace``, ``laplace_smoothing`` and ``VectorQuantize`` from
``vector_quantize_pytorch/vector_quantize_pytorch.py`` at 102b982d4d7c7e4f34042d2d5904b1e26981d664
(2020-10-21, "return quantized indices as well"): the early single-class module, before the
codebook moved into ``EuclideanCodebook`` (where ``ema_inplace`` still writes ``old.data.lerp_``).
Nothing is trimmed. The module is built fresh per ``build`` with a seeded codebook; in training
mode its forward writes the buffers ``cluster_size``, ``embed_avg`` and ``embed`` through
``.data`` with values computed from the (batched) input. The output does not read what the
forward writes (the codebook is looked up before the update), so the rewrite is the forward
without the update.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from funcbwd_lab.studies.yourcode.case import Case, randn


# lucidrains/vector-quantize-pytorch vector_quantize_pytorch/vector_quantize_pytorch.py
# ema_inplace, laplace_smoothing, VectorQuantize (102b982d)
def ema_inplace(moving_avg, new, decay):
    moving_avg.data.mul_(decay).add_(new, alpha = (1 - decay))

def laplace_smoothing(x, n_categories, eps=1e-5):
    return (x + eps) / (x.sum() + n_categories * eps)

class VectorQuantize(nn.Module):
    def __init__(self, dim, n_embed, decay=0.8, commitment=1., eps=1e-5):
        super().__init__()

        self.dim = dim
        self.n_embed = n_embed
        self.decay = decay
        self.eps = eps
        self.commitment = commitment

        embed = torch.randn(dim, n_embed)
        self.register_buffer('embed', embed)
        self.register_buffer('cluster_size', torch.zeros(n_embed))
        self.register_buffer('embed_avg', embed.clone())

    def forward(self, input):
        dtype = input.dtype
        flatten = input.reshape(-1, self.dim)
        dist = (
            flatten.pow(2).sum(1, keepdim=True)
            - 2 * flatten @ self.embed
            + self.embed.pow(2).sum(0, keepdim=True)
        )
        _, embed_ind = (-dist).max(1)
        embed_onehot = F.one_hot(embed_ind, self.n_embed).type(dtype)
        embed_ind = embed_ind.view(*input.shape[:-1])
        quantize = F.embedding(embed_ind, self.embed.transpose(0, 1))

        if self.training:
            ema_inplace(self.cluster_size, embed_onehot.sum(0), self.decay)
            embed_sum = flatten.transpose(0, 1) @ embed_onehot
            ema_inplace(self.embed_avg, embed_sum, self.decay)
            cluster_size = laplace_smoothing(self.cluster_size, self.n_embed, self.eps) * self.cluster_size.sum()
            embed_normalized = self.embed_avg / cluster_size.unsqueeze(0)
            self.embed.data.copy_(embed_normalized)

        loss = F.mse_loss(quantize.detach(), input) * self.commitment
        quantize = input + (quantize - input).detach()
        return quantize, embed_ind, loss


DIM, N_EMBED = 4, 6


def _fresh() -> VectorQuantize:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return VectorQuantize(DIM, N_EMBED)


_EMBED = _fresh().embed.clone()  # the codebook every fresh module starts from


def _out(quantize, loss):
    return torch.cat([quantize.flatten(), loss.reshape(1)])


def _build(decorate):
    vq = _fresh()  # training mode: the forward updates the EMA buffers
    forward = decorate(vq.forward)

    def step(x):
        quantize, _, loss = forward(x)
        return _out(quantize, loss)
    return step


def _rewrite(x):
    flatten = x.reshape(-1, DIM)
    dist = (flatten.pow(2).sum(1, keepdim=True) - 2 * flatten @ _EMBED
            + _EMBED.pow(2).sum(0, keepdim=True))
    ind = (-dist).argmax(1)
    quantize = _EMBED.transpose(0, 1)[ind].view(x.shape)
    loss = ((quantize - x) ** 2).mean()
    return _out(x + (quantize - x).detach(), loss)


CASES = [
    Case("vector_quantize:VectorQuantize", "vector-quantize-pytorch",
         "lucidrains/vector-quantize-pytorch vector_quantize_pytorch/vector_quantize_pytorch.py "
         "VectorQuantize.forward, ema_inplace (102b982d)",
         "training forward: ema_inplace(self.cluster_size, onehot.sum(0)) = "
         "buffer.data.mul_(decay).add_(new); same for embed_avg; self.embed.data.copy_(...)",
         ("buffer", "state", "data", "arith"), _build, _rewrite, lambda g: (randn(g, 5, DIM),)),
]
