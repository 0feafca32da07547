"""timm (huggingface/pytorch-image-models, timm/layers/drop.py at 03c57a4): ``drop_path``
(stochastic depth), which draws its per-sample keep mask in place into ``x.new_empty(shape)``
(``bernoulli_``) and rescales it in place (``div_``); and ``drop_block_fast_2d``'s in-place
branch (``x.mul_(block_mask * normalize_scale)`` with the mask drawn by ``bernoulli_`` into
``torch.empty_like(x)``).

Re-created from the upstream functions (docstrings trimmed); the in-place lines are upstream's as
written. Random: run with ``randomness="same"`` (one draw per call, as the loop reseeds per sample).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from funcbwd_lab.studies.yourcode.case import Case, randn


# huggingface/pytorch-image-models timm/layers/drop.py, drop_path (03c57a4)
def drop_path(x, drop_prob: float = 0., training: bool = False, scale_by_keep: bool = True):
    if drop_prob == 0. or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # work with diff dim tensors, not just 2D ConvNets
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


def drop_path_rewrite(x, drop_prob=0., training=False, scale_by_keep=True):
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    # torch.bernoulli(t, p) draws what t.bernoulli_(p) draws (the same kernel, out of place)
    random_tensor = torch.bernoulli(torch.zeros(shape, dtype=x.dtype), keep_prob)
    return x * (random_tensor / keep_prob)


# same file, drop_block_fast_2d (03c57a4)
def drop_block_fast_2d(
        x: torch.Tensor,
        drop_prob: float = 0.1,
        block_size: int = 7,
        gamma_scale: float = 1.0,
        with_noise: bool = False,
        inplace: bool = False,
):
    B, C, H, W = x.shape
    total_size = W * H
    clipped_block_size = min(block_size, min(W, H))
    gamma = gamma_scale * drop_prob * total_size / clipped_block_size ** 2 / (
            (W - block_size + 1) * (H - block_size + 1))

    block_mask = torch.empty_like(x).bernoulli_(gamma)
    block_mask = F.max_pool2d(
        block_mask.to(x.dtype), kernel_size=clipped_block_size, stride=1, padding=clipped_block_size // 2)

    if with_noise:
        normal_noise = torch.empty_like(x).normal_()
        if inplace:
            x.mul_(1. - block_mask).add_(normal_noise * block_mask)
        else:
            x = x * (1. - block_mask) + normal_noise * block_mask
    else:
        block_mask = 1 - block_mask
        normalize_scale = (block_mask.numel() / block_mask.to(dtype=torch.float32).sum().add(1e-6)).to(dtype=x.dtype)
        if inplace:
            x.mul_(block_mask * normalize_scale)
        else:
            x = x * block_mask * normalize_scale
    return x


# DropBlock2d.forward with fast=True, inplace=True, training: a block applies it to its activation
def drop_block_inplace(x):
    y = x * 1.5  # the activation the layer is applied to (inplace=True mutates it)
    return drop_block_fast_2d(y, drop_prob=0.3, block_size=3, inplace=True)


def drop_block_inplace_rewrite(x):
    y = x * 1.5
    B, C, H, W = y.shape
    gamma = 1.0 * 0.3 * W * H / 3 ** 2 / ((W - 3 + 1) * (H - 3 + 1))
    block_mask = torch.bernoulli(torch.zeros_like(y), gamma)
    block_mask = 1 - F.max_pool2d(block_mask, kernel_size=3, stride=1, padding=1)
    normalize_scale = block_mask.numel() / block_mask.sum().add(1e-6)
    return y * (block_mask * normalize_scale)


CASES = [
    Case("timm:drop_path", "timm",
         "huggingface/pytorch-image-models timm/layers/drop.py: drop_path (03c57a4)",
         "stochastic depth: x.new_empty(shape).bernoulli_(keep_prob), random_tensor.div_(...); "
         "a minibatch per sample, training",
         ("random", "like", "arith"), lambda decorate: decorate(drop_path), drop_path_rewrite,
         lambda g: (randn(g, 6, 3), 0.4, True), batched=(0,), diff=0, randomness="same"),
    Case("timm:drop_block_fast_2d-inplace", "timm",
         "huggingface/pytorch-image-models timm/layers/drop.py: drop_block_fast_2d, "
         "inplace=True (03c57a4)",
         "DropBlock: torch.empty_like(x).bernoulli_(gamma), max-pooled, then x.mul_(block_mask * "
         "normalize_scale) on the activation",
         ("random", "like", "arith"), lambda decorate: decorate(drop_block_inplace),
         drop_block_inplace_rewrite, lambda g: (randn(g, 1, 2, 5, 5),), batched=(0,), diff=0,
         randomness="same"),
]
