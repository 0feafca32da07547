"""nflows (bayesiains/nflows): the rational-quadratic spline of neural spline flows.

Re-creates ``unconstrained_rational_quadratic_spline`` and the forward direction of
``rational_quadratic_spline`` from ``nflows/transforms/splines/rational_quadratic.py``, with
``torchutils.searchsorted`` from ``nflows/utils/torchutils.py``, at HEAD
5d22344436a4a5f4c3b93a3b99322a6bfe374c08 (2024-12-27; the spline file last changed in 569c8ad,
2022-12-23). Trimmed: the ``inverse=True`` branch of the spline, the min-bin-size ``ValueError``
checks and ``enable_identity_init`` (default False: beta = 1); every in-place line is as upstream.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from funcbwd_lab.studies.yourcode.case import Case, randn

DEFAULT_MIN_BIN_WIDTH = 1e-3
DEFAULT_MIN_BIN_HEIGHT = 1e-3
DEFAULT_MIN_DERIVATIVE = 1e-3


class InputOutsideDomain(Exception):
    """nflows.transforms.base.InputOutsideDomain"""


# bayesiains/nflows nflows/utils/torchutils.py searchsorted (5d223444)
def searchsorted(bin_locations, inputs, eps=1e-6):
    bin_locations[..., -1] += eps
    return torch.sum(inputs[..., None] >= bin_locations, dim=-1) - 1


# bayesiains/nflows nflows/transforms/splines/rational_quadratic.py
# unconstrained_rational_quadratic_spline (5d223444)
def unconstrained_rational_quadratic_spline(
    inputs,
    unnormalized_widths,
    unnormalized_heights,
    unnormalized_derivatives,
    inverse=False,
    tails="linear",
    tail_bound=1.0,
    min_bin_width=DEFAULT_MIN_BIN_WIDTH,
    min_bin_height=DEFAULT_MIN_BIN_HEIGHT,
    min_derivative=DEFAULT_MIN_DERIVATIVE,
):
    inside_interval_mask = (inputs >= -tail_bound) & (inputs <= tail_bound)
    outside_interval_mask = ~inside_interval_mask

    outputs = torch.zeros_like(inputs)
    logabsdet = torch.zeros_like(inputs)

    if tails == "linear":
        unnormalized_derivatives = F.pad(unnormalized_derivatives, pad=(1, 1))
        constant = np.log(np.exp(1 - min_derivative) - 1)
        unnormalized_derivatives[..., 0] = constant
        unnormalized_derivatives[..., -1] = constant

        outputs[outside_interval_mask] = inputs[outside_interval_mask]
        logabsdet[outside_interval_mask] = 0
    else:
        raise RuntimeError("{} tails are not implemented.".format(tails))

    if torch.any(inside_interval_mask):
        (
            outputs[inside_interval_mask],
            logabsdet[inside_interval_mask],
        ) = rational_quadratic_spline(
            inputs=inputs[inside_interval_mask],
            unnormalized_widths=unnormalized_widths[inside_interval_mask, :],
            unnormalized_heights=unnormalized_heights[inside_interval_mask, :],
            unnormalized_derivatives=unnormalized_derivatives[inside_interval_mask, :],
            inverse=inverse,
            left=-tail_bound,
            right=tail_bound,
            bottom=-tail_bound,
            top=tail_bound,
            min_bin_width=min_bin_width,
            min_bin_height=min_bin_height,
            min_derivative=min_derivative,
        )

    return outputs, logabsdet


# bayesiains/nflows nflows/transforms/splines/rational_quadratic.py rational_quadratic_spline
# (5d223444), forward direction only
def rational_quadratic_spline(
    inputs,
    unnormalized_widths,
    unnormalized_heights,
    unnormalized_derivatives,
    inverse=False,
    left=0.0,
    right=1.0,
    bottom=0.0,
    top=1.0,
    min_bin_width=DEFAULT_MIN_BIN_WIDTH,
    min_bin_height=DEFAULT_MIN_BIN_HEIGHT,
    min_derivative=DEFAULT_MIN_DERIVATIVE,
):
    if torch.min(inputs) < left or torch.max(inputs) > right:
        raise InputOutsideDomain()

    num_bins = unnormalized_widths.shape[-1]

    widths = F.softmax(unnormalized_widths, dim=-1)
    widths = min_bin_width + (1 - min_bin_width * num_bins) * widths
    cumwidths = torch.cumsum(widths, dim=-1)
    cumwidths = F.pad(cumwidths, pad=(1, 0), mode="constant", value=0.0)
    cumwidths = (right - left) * cumwidths + left
    cumwidths[..., 0] = left
    cumwidths[..., -1] = right
    widths = cumwidths[..., 1:] - cumwidths[..., :-1]

    beta = 1  # enable_identity_init=False
    derivatives = min_derivative + F.softplus(unnormalized_derivatives, beta=beta)

    heights = F.softmax(unnormalized_heights, dim=-1)
    heights = min_bin_height + (1 - min_bin_height * num_bins) * heights
    cumheights = torch.cumsum(heights, dim=-1)
    cumheights = F.pad(cumheights, pad=(1, 0), mode="constant", value=0.0)
    cumheights = (top - bottom) * cumheights + bottom
    cumheights[..., 0] = bottom
    cumheights[..., -1] = top
    heights = cumheights[..., 1:] - cumheights[..., :-1]

    bin_idx = searchsorted(cumwidths, inputs)[..., None]

    input_cumwidths = cumwidths.gather(-1, bin_idx)[..., 0]
    input_bin_widths = widths.gather(-1, bin_idx)[..., 0]

    input_cumheights = cumheights.gather(-1, bin_idx)[..., 0]
    delta = heights / widths
    input_delta = delta.gather(-1, bin_idx)[..., 0]

    input_derivatives = derivatives.gather(-1, bin_idx)[..., 0]
    input_derivatives_plus_one = derivatives[..., 1:].gather(-1, bin_idx)[..., 0]

    input_heights = heights.gather(-1, bin_idx)[..., 0]

    theta = (inputs - input_cumwidths) / input_bin_widths
    theta_one_minus_theta = theta * (1 - theta)

    numerator = input_heights * (
        input_delta * theta.pow(2) + input_derivatives * theta_one_minus_theta
    )
    denominator = input_delta + (
        (input_derivatives + input_derivatives_plus_one - 2 * input_delta)
        * theta_one_minus_theta
    )
    outputs = input_cumheights + numerator / denominator

    derivative_numerator = input_delta.pow(2) * (
        input_derivatives_plus_one * theta.pow(2)
        + 2 * input_delta * theta_one_minus_theta
        + input_derivatives * (1 - theta).pow(2)
    )
    logabsdet = torch.log(derivative_numerator) - 2 * torch.log(denominator)

    return outputs, logabsdet


def _pinned_knots(unnormalized, lo, hi, min_bin):
    num_bins = unnormalized.shape[-1]
    sizes = min_bin + (1 - min_bin * num_bins) * F.softmax(unnormalized, dim=-1)
    cum = (hi - lo) * F.pad(torch.cumsum(sizes, dim=-1), pad=(1, 0)) + lo
    cum = torch.cat([torch.full_like(cum[..., :1], lo), cum[..., 1:-1],
                     torch.full_like(cum[..., :1], hi)], dim=-1)
    return cum, cum[..., 1:] - cum[..., :-1]


def _spline_rewrite(inputs, uw, uh, ud, left, right, bottom, top):
    cumwidths, widths = _pinned_knots(uw, left, right, DEFAULT_MIN_BIN_WIDTH)
    cumheights, heights = _pinned_knots(uh, bottom, top, DEFAULT_MIN_BIN_HEIGHT)
    derivatives = DEFAULT_MIN_DERIVATIVE + F.softplus(ud)
    search = torch.cat([cumwidths[..., :-1], cumwidths[..., -1:] + 1e-6], dim=-1)
    bin_idx = (torch.sum(inputs[..., None] >= search, dim=-1) - 1)[..., None]

    def pick(t):
        return t.gather(-1, bin_idx)[..., 0]

    x0, w, y0, h = pick(cumwidths), pick(widths), pick(cumheights), pick(heights)
    s = pick(heights / widths)
    d0, d1 = pick(derivatives), pick(derivatives[..., 1:])
    theta = (inputs - x0) / w
    ttheta = theta * (1 - theta)
    denominator = s + (d0 + d1 - 2 * s) * ttheta
    outputs = y0 + h * (s * theta.pow(2) + d0 * ttheta) / denominator
    dnum = s.pow(2) * (d1 * theta.pow(2) + 2 * s * ttheta + d0 * (1 - theta).pow(2))
    return outputs, torch.log(dnum) - 2 * torch.log(denominator)


def spline_rewrite(inputs, uw, uh, ud, tail_bound=1.0):
    inside = (inputs >= -tail_bound) & (inputs <= tail_bound)
    constant = float(np.log(np.exp(1 - DEFAULT_MIN_DERIVATIVE) - 1))
    ud = torch.cat([torch.full_like(ud[..., :1], constant), ud,
                    torch.full_like(ud[..., :1], constant)], dim=-1)
    safe = torch.where(inside, inputs, torch.zeros_like(inputs))
    out, lad = _spline_rewrite(safe, uw, uh, ud, -tail_bound, tail_bound, -tail_bound, tail_bound)
    return torch.stack([torch.where(inside, out, inputs),
                        torch.where(inside, lad, torch.zeros_like(lad))])


def _build(decorate):
    spline = decorate(unconstrained_rational_quadratic_spline)

    def transform(inputs, uw, uh, ud):  # the caller (PiecewiseRationalQuadraticCDF) keeps both
        outputs, logabsdet = spline(inputs, uw, uh, ud)
        return torch.stack([outputs, logabsdet])
    return transform


def _args(gen, n=6, bins=4):
    return (1.5 * randn(gen, n), randn(gen, n, bins), randn(gen, n, bins), randn(gen, n, bins - 1))


CASES = [
    Case("nflows:unconstrained_rational_quadratic_spline", "nflows",
         "bayesiains/nflows nflows/transforms/splines/rational_quadratic.py "
         "unconstrained_rational_quadratic_spline, rational_quadratic_spline; "
         "nflows/utils/torchutils.py searchsorted (5d223444)",
         "outputs = zeros_like(inputs); outputs[outside] = inputs[outside]; "
         "logabsdet[outside] = 0; outputs[inside], logabsdet[inside] = spline(...); "
         "knots pinned by cumwidths[..., 0] = left "
         "into F.pad results; searchsorted's bin_locations[..., -1] += eps",
         ("like", "mask", "arith", "value_read"), _build, spline_rewrite, _args,
         batched=(0, 1, 2, 3), diff=0),
]
