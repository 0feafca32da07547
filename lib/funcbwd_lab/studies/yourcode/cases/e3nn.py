"""e3nn (e3nn/e3nn): the equivariant batch norm, whose training forward writes its running
statistics into its buffers with ``torch.cat(..., out=self.running_mean)``.

Re-creates ``BatchNorm`` from ``e3nn/nn/_batchnorm.py`` at HEAD
2aa7f58440a06b15352a2cbce01fa4c26f824969 (2026-02-13; the file last changed in a221b2a5,
2023-09-02). Trimmed: ``o3.Irreps`` is replaced by a list of ``(mul, Irrep)`` with the two
things the module reads (``ir.dim``, ``ir.is_scalar()``) and ``num_irreps``; ``__repr__``,
the docstrings and the ``compile_mode`` decorator are cut. ``forward`` is as upstream. The module
is built fresh per ``build`` (weights and bias drawn from a seeded generator), in training mode;
the case vmaps over independent batches (an ensemble of batches, or per-batch Jacobians). The
output reads the batch statistics, not the running ones, so the rewrite is the forward without
the buffer writes.
"""

from __future__ import annotations

import torch
from torch import nn

from funcbwd_lab.studies.yourcode.case import Case, randn


class _Irrep:
    """The two members of ``e3nn.o3.Irrep`` the module reads."""

    def __init__(self, l: int, p: int):
        self.l, self.p = l, p
        self.dim = 2 * l + 1

    def is_scalar(self) -> bool:
        return self.l == 0 and self.p == 1


class _Irreps(list):
    """``e3nn.o3.Irreps`` as a list of ``(mul, Irrep)``, with ``num_irreps``."""

    @property
    def num_irreps(self) -> int:
        return sum(mul for mul, _ in self)


# e3nn/e3nn e3nn/nn/_batchnorm.py BatchNorm (2aa7f584)
class BatchNorm(nn.Module):
    __constants__ = ["instance", "normalization", "irs", "affine"]

    def __init__(
        self,
        irreps,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        reduce: str = "mean",
        instance: bool = False,
        include_bias: bool = True,
        normalization: str = "component",
    ) -> None:
        super().__init__()

        self.irreps = irreps  # o3.Irreps(irreps)
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.instance = instance
        self.include_bias = include_bias

        num_scalar = sum(mul for mul, ir in self.irreps if ir.is_scalar())
        num_features = self.irreps.num_irreps
        self.features = []

        if self.instance:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
        else:
            self.register_buffer("running_mean", torch.zeros(num_scalar))
            self.register_buffer("running_var", torch.ones(num_features))

        if affine:
            self.weight = nn.Parameter(torch.ones(num_features))
            if self.include_bias:
                self.bias = nn.Parameter(torch.zeros(num_scalar))
        else:
            self.register_parameter("weight", None)
            if self.include_bias:
                self.register_parameter("bias", None)

        assert isinstance(reduce, str), "reduce should be passed as a string value"
        assert reduce in ["mean", "max"], "reduce needs to be 'mean' or 'max'"
        self.reduce = reduce
        irs = []
        for mul, ir in self.irreps:
            irs.append((mul, ir.dim, ir.is_scalar()))
        self.irs = irs

        assert normalization in ["norm", "component"], "normalization needs to be 'norm' or 'component'"
        self.normalization = normalization

    def _roll_avg(self, curr, update) -> float:
        return (1 - self.momentum) * curr + self.momentum * update.detach()

    def forward(self, input) -> torch.Tensor:
        orig_shape = input.shape
        batch = input.shape[0]
        dim = input.shape[-1]
        input = input.reshape(batch, -1, dim)  # [batch, sample, stacked features]

        if self.training and not self.instance:
            new_means = []
            new_vars = []

        fields = []
        ix = 0
        irm = 0
        irv = 0
        iw = 0
        ib = 0

        for mul, d, is_scalar in self.irs:
            field = input[:, :, ix : ix + mul * d]  # [batch, sample, mul * repr]
            ix += mul * d

            # [batch, sample, mul, repr]
            field = field.reshape(batch, -1, mul, d)

            if is_scalar:
                if self.training or self.instance:
                    if self.instance:
                        field_mean = field.mean(1).reshape(batch, mul)  # [batch, mul]
                    else:
                        field_mean = field.mean([0, 1]).reshape(mul)  # [mul]
                        new_means.append(self._roll_avg(self.running_mean[irm : irm + mul], field_mean))
                else:
                    field_mean = self.running_mean[irm : irm + mul]
                irm += mul

                # [batch, sample, mul, repr]
                field = field - field_mean.reshape(-1, 1, mul, 1)

            if self.training or self.instance:
                if self.normalization == "norm":
                    field_norm = field.pow(2).sum(3)  # [batch, sample, mul]
                elif self.normalization == "component":
                    field_norm = field.pow(2).mean(3)  # [batch, sample, mul]
                else:
                    raise ValueError(f"Invalid normalization option {self.normalization}")

                if self.reduce == "mean":
                    field_norm = field_norm.mean(1)  # [batch, mul]
                elif self.reduce == "max":
                    field_norm = field_norm.max(1).values  # [batch, mul]
                else:
                    raise ValueError(f"Invalid reduce option {self.reduce}")

                if not self.instance:
                    field_norm = field_norm.mean(0)  # [mul]
                    new_vars.append(self._roll_avg(self.running_var[irv : irv + mul], field_norm))
            else:
                field_norm = self.running_var[irv : irv + mul]
            irv += mul

            field_norm = (field_norm + self.eps).pow(-0.5)  # [(batch,) mul]

            if self.affine:
                weight = self.weight[iw : iw + mul]  # [mul]
                iw += mul

                field_norm = field_norm * weight  # [(batch,) mul]

            field = field * field_norm.reshape(-1, 1, mul, 1)  # [batch, sample, mul, repr]

            if self.affine and self.include_bias and is_scalar:
                bias = self.bias[ib : ib + mul]  # [mul]
                ib += mul
                field += bias.reshape(mul, 1)  # [batch, sample, mul, repr]

            fields.append(field.reshape(batch, -1, mul * d))  # [batch, sample, mul * repr]

        torch._assert(ix == dim, f"`ix` should have reached input.size(-1) ({dim}), but it ended at {ix}")

        if self.training and not self.instance:
            torch._assert(irm == self.running_mean.numel(), "irm == self.running_mean.numel()")
            torch._assert(irv == self.running_var.size(0), "irv == self.running_var.size(0)")
        if self.affine:
            torch._assert(iw == self.weight.size(0), "iw == self.weight.size(0)")
            if self.include_bias:
                torch._assert(ib == self.bias.numel(), "ib == self.bias.numel()")

        if self.training and not self.instance:
            if len(new_means) > 0:
                torch.cat(new_means, out=self.running_mean)
            if len(new_vars) > 0:
                torch.cat(new_vars, out=self.running_var)

        output = torch.cat(fields, dim=2)  # [batch, sample, stacked features]
        return output.reshape(orig_shape)


IRREPS = _Irreps([(2, _Irrep(0, 1)), (1, _Irrep(1, -1))])  # "2x0e + 1x1o": dim 5
_PARAMS = torch.Generator().manual_seed(0)
WEIGHT = 1.0 + 0.5 * torch.randn(3, generator=_PARAMS)
BIAS = 0.5 * torch.randn(2, generator=_PARAMS)


def _build(decorate):
    bn = BatchNorm(IRREPS)  # training mode: the forward writes running_mean / running_var
    with torch.no_grad():
        bn.weight.copy_(WEIGHT)
        bn.bias.copy_(BIAS)
    return decorate(bn.forward)


def batchnorm_rewrite(input, eps=1e-5):
    fields, ix, iw, ib = [], 0, 0, 0
    for mul, ir in IRREPS:
        d = ir.dim
        field = input[:, ix: ix + mul * d].reshape(input.shape[0], mul, d)
        ix += mul * d
        if ir.is_scalar():
            field = field - field.mean(0).reshape(1, mul, d)
        norm = field.pow(2).mean(2).mean(0)  # [mul]
        scale = (norm + eps).pow(-0.5) * WEIGHT[iw: iw + mul]
        iw += mul
        field = field * scale.reshape(1, mul, 1)
        if ir.is_scalar():
            field = field + BIAS[ib: ib + mul].reshape(mul, 1)
            ib += mul
        fields.append(field.reshape(input.shape[0], mul * d))
    return torch.cat(fields, dim=1)


CASES = [
    Case("e3nn:BatchNorm", "e3nn", "e3nn/e3nn e3nn/nn/_batchnorm.py BatchNorm.forward (2aa7f584)",
         "training forward: torch.cat(new_means, out=self.running_mean), torch.cat(new_vars, "
         "out=self.running_var) with statistics of the (batched) input; field += bias",
         ("buffer", "state", "arith"), _build, batchnorm_rewrite, lambda g: (randn(g, 4, 5),)),
]
