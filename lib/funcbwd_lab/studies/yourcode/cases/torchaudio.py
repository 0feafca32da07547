"""torchaudio (pytorch/audio, src/torchaudio/functional/filtering.py at 031bbbf): the pure-Python
IIR filter (``lfilter`` without the C++ extension: ``_lfilter_core`` and
``_lfilter_core_generic_loop``, a time loop writing each output sample into a padded
``zeros_like`` buffer and reading the previous ones back) and ``overdrive`` (boolean-mask writes,
then a time loop writing into a ``zeros_like`` output).

Re-created from the upstream code and trimmed (argument checks, device dispatch to the C++ loops
left out); the in-place lines are upstream's as written.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from funcbwd_lab.studies.yourcode.case import Case, rand, randn


# pytorch/audio src/torchaudio/functional/filtering.py, _lfilter_core_generic_loop (031bbbf)
def _lfilter_core_generic_loop(input_signal_windows: Tensor, a_coeffs_flipped: Tensor, padded_output_waveform: Tensor):
    n_order = a_coeffs_flipped.size(1)
    a_coeffs_flipped = a_coeffs_flipped.unsqueeze(2)
    for i_sample, o0 in enumerate(input_signal_windows.permute(2, 0, 1)):
        windowed_output_signal = padded_output_waveform[:, :, i_sample : i_sample + n_order]
        o0 -= (windowed_output_signal.transpose(0, 1) @ a_coeffs_flipped)[..., 0].t()
        padded_output_waveform[:, :, i_sample + n_order - 1] = o0


# same file, _lfilter_core (size/device checks trimmed; the CPU branch calls the generic loop when
# the extension is absent, as _lfilter_core_cpu_loop is then _lfilter_core_generic_loop)
def _lfilter_core(
    waveform: Tensor,
    a_coeffs: Tensor,
    b_coeffs: Tensor,
) -> Tensor:
    n_batch, n_channel, n_sample = waveform.size()
    n_order = a_coeffs.size(1)

    # Pad the input and create output

    padded_waveform = torch.nn.functional.pad(waveform, [n_order - 1, 0])
    padded_output_waveform = torch.zeros_like(padded_waveform)

    # Set up the coefficients matrix
    # Flip coefficients' order
    a_coeffs_flipped = a_coeffs.flip(1)
    b_coeffs_flipped = b_coeffs.flip(1)

    # calculate windowed_input_signal in parallel using convolution
    input_signal_windows = torch.nn.functional.conv1d(padded_waveform, b_coeffs_flipped.unsqueeze(1), groups=n_channel)

    input_signal_windows.div_(a_coeffs[:, :1])
    a_coeffs_flipped.div_(a_coeffs[:, :1])

    _lfilter_core_generic_loop(input_signal_windows, a_coeffs_flipped, padded_output_waveform)

    output = padded_output_waveform[:, :, n_order - 1 :]
    return output


# same file, lfilter (the 2-D coefficient branch and checks trimmed; _lfilter is _lfilter_core
# without the extension)
def lfilter(waveform: Tensor, a_coeffs: Tensor, b_coeffs: Tensor, clamp: bool = True, batching: bool = True) -> Tensor:
    a_coeffs = a_coeffs.unsqueeze(0)
    b_coeffs = b_coeffs.unsqueeze(0)

    # pack batch
    shape = waveform.size()
    waveform = waveform.reshape(-1, a_coeffs.shape[0], shape[-1])
    output = _lfilter_core(waveform, a_coeffs, b_coeffs)

    if clamp:
        output = torch.clamp(output, min=-1.0, max=1.0)

    # unpack batch
    output = output.reshape(shape[:-1] + output.shape[-1:])

    return output


def lfilter_rewrite(waveform, a_coeffs, b_coeffs):
    n = a_coeffs.shape[0]
    a = a_coeffs / a_coeffs[0]
    b = b_coeffs / a_coeffs[0]
    xs = waveform.unbind(-1)
    ys = []
    for i in range(len(xs)):
        y = sum(b[k] * xs[i - k] for k in range(n) if i - k >= 0)
        y = y - sum((a[k] * ys[i - k] for k in range(1, n) if i - k >= 0),
                    torch.zeros_like(xs[0]))
        ys.append(y)
    return torch.stack(ys, dim=-1).clamp(min=-1.0, max=1.0)


def _coeffs(gen):
    a = torch.tensor([1.0, -0.5, 0.2]) + 0.1 * rand(gen, 3)
    b = torch.tensor([0.4, 0.3, 0.2]) + 0.1 * rand(gen, 3)
    return a, b


def _lfilter_args(gen):
    a, b = _coeffs(gen)
    return (0.3 * randn(gen, 2, 6), a, b)


# same file, _overdrive_core_loop_generic (031bbbf)
def _overdrive_core_loop_generic(
    waveform: Tensor, temp: Tensor, last_in: Tensor, last_out: Tensor, output_waveform: Tensor
):
    for i in range(waveform.shape[-1]):
        last_out = temp[:, i] - last_in + 0.995 * last_out
        last_in = temp[:, i]
        output_waveform[:, i] = waveform[:, i] * 0.5 + last_out * 0.75


def _dB2Linear(x: float) -> float:
    return math.exp(x * math.log(10) / 20.0)


# same file, overdrive (docstring trimmed; the CPU branch calls the generic loop when the
# extension is absent)
def overdrive(waveform: Tensor, gain: float = 20, colour: float = 20) -> Tensor:
    actual_shape = waveform.shape
    device, dtype = waveform.device, waveform.dtype

    # convert to 2D (..,time)
    waveform = waveform.view(-1, actual_shape[-1])

    gain = _dB2Linear(gain)
    colour = colour / 200
    last_in = torch.zeros(waveform.shape[:-1], dtype=dtype, device=device)
    last_out = torch.zeros(waveform.shape[:-1], dtype=dtype, device=device)

    temp = waveform * gain + colour

    mask1 = temp < -1
    temp[mask1] = torch.tensor(-2.0 / 3.0, dtype=dtype, device=device)
    # Wrapping the constant with Tensor is required for Torchscript

    mask2 = temp > 1
    temp[mask2] = torch.tensor(2.0 / 3.0, dtype=dtype, device=device)

    mask3 = ~mask1 & ~mask2
    temp[mask3] = temp[mask3] - (temp[mask3] ** 3) * (1.0 / 3)

    output_waveform = torch.zeros_like(waveform, dtype=dtype, device=device)

    _overdrive_core_loop_generic(waveform, temp, last_in, last_out, output_waveform)

    return output_waveform.clamp(min=-1, max=1).view(actual_shape)


def overdrive_rewrite(waveform, gain=20, colour=20):
    gain = _dB2Linear(gain)
    colour = colour / 200
    temp = waveform * gain + colour
    temp = torch.where(temp < -1, torch.full_like(temp, -2.0 / 3.0),
                       torch.where(temp > 1, torch.full_like(temp, 2.0 / 3.0),
                                   temp - temp ** 3 * (1.0 / 3)))
    last_in = torch.zeros_like(waveform[..., 0])
    last_out = torch.zeros_like(waveform[..., 0])
    outs = []
    for i in range(waveform.shape[-1]):
        last_out = temp[..., i] - last_in + 0.995 * last_out
        last_in = temp[..., i]
        outs.append(waveform[..., i] * 0.5 + last_out * 0.75)
    return torch.stack(outs, dim=-1).clamp(min=-1, max=1)


def _overdrive_args(gen):
    # gain 20 dB: x10, so |x| > ~0.1 lands in the clipped branches and the rest in the cubic one
    return (0.15 * randn(gen, 2, 6),)


CASES = [
    Case("torchaudio:lfilter", "torchaudio",
         "pytorch/audio src/torchaudio/functional/filtering.py: lfilter, _lfilter_core, "
         "_lfilter_core_generic_loop (031bbbf)",
         "IIR filter, the waveform batched: div_ of the conv windows, o0 -= ... on a view, "
         "padded zeros_like output written per sample and read back (o0 comes from iterating "
         "the permuted windows: an unbind view, which eager autograd refuses to differentiate)",
         ("like", "readback", "arith", "views"), lambda decorate: decorate(lfilter),
         lfilter_rewrite,
         _lfilter_args, batched=(0,), diff=0),
    Case("torchaudio:lfilter-a_coeffs", "torchaudio",
         "pytorch/audio src/torchaudio/functional/filtering.py: lfilter, _lfilter_core, "
         "_lfilter_core_generic_loop (031bbbf)",
         "IIR filter, the denominator coefficients batched (one filter per sample) over one "
         "waveform: the batched a_coeffs divide the unbatched windows in place",
         ("like", "readback", "arith", "views"), lambda decorate: decorate(lfilter),
         lfilter_rewrite, _lfilter_args, batched=(1,), diff=1),
    Case("torchaudio:overdrive", "torchaudio",
         "pytorch/audio src/torchaudio/functional/filtering.py: overdrive, "
         "_overdrive_core_loop_generic (031bbbf)",
         "temp[mask] = ... three boolean-mask writes, then a loop writing output_waveform[:, i] "
         "into zeros_like(waveform)",
         ("mask", "like"), lambda decorate: decorate(overdrive), overdrive_rewrite,
         _overdrive_args, batched=(0,), diff=0),
]
