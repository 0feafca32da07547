"""torchaudio 2.11.1: ``torchaudio.functional`` on its pure-Python path (the CUDA wheel's
extensions removed, see env.py): filters, effects, features."""

from __future__ import annotations

import torch

from funcbwd_lab.studies.libraries.case import rand, randn
from funcbwd_lab.studies.libraries.cases import fn, lib

L = "torchaudio"
AG = "pytorch/audio: test/torchaudio_unittest/functional/autograd_impl.py"
FI = "pytorch/audio: test/torchaudio_unittest/functional/functional_impl.py"
SR = 8000


def F():
    return lib("torchaudio.functional")


def wave(g):
    return (rand(g, 1, 32) * 2 - 1,)


def audio(name: str, call: str, get, cite: str = AG, **kw):
    return fn(f"torchaudio.functional.{name}", L, call, cite, get, kw.pop("args", wave), **kw)


CASES = [
    audio("lfilter", "lfilter(waveform, a_coeffs, b_coeffs)",
          lambda: lambda x: F().lfilter(x, torch.tensor([1.0, -0.5, 0.1], dtype=torch.float64),
                                        torch.tensor([0.4, 0.2, 0.1], dtype=torch.float64)),
          what="the Python loop writes each step into its output buffer"),
    audio("biquad", "biquad(waveform, b0, b1, b2, a0, a1, a2)",
          lambda: lambda x: F().biquad(x, 0.4, 0.2, 0.1, 1.0, -0.5, 0.1)),
    audio("lowpass_biquad", "lowpass_biquad(waveform, 8000, 1000.0)",
          lambda: lambda x: F().lowpass_biquad(x, SR, 1000.0)),
    audio("highpass_biquad", "highpass_biquad(waveform, 8000, 1000.0)",
          lambda: lambda x: F().highpass_biquad(x, SR, 1000.0)),
    audio("equalizer_biquad", "equalizer_biquad(waveform, 8000, 1000.0, 3.0)",
          lambda: lambda x: F().equalizer_biquad(x, SR, 1000.0, 3.0)),
    audio("deemph_biquad", "deemph_biquad(waveform, 44100)",
          lambda: lambda x: F().deemph_biquad(x, 44100)),
    audio("filtfilt", "filtfilt(waveform, a_coeffs, b_coeffs)",
          lambda: lambda x: F().filtfilt(x, torch.tensor([1.0, -0.5], dtype=torch.float64),
                                         torch.tensor([0.5, 0.5], dtype=torch.float64))),
    audio("overdrive", "overdrive(waveform)", lambda: F().overdrive,
          what="a Python loop over samples writing into output_waveform"),
    audio("phaser", "phaser(waveform, 8000)", lambda: lambda x: F().phaser(x, SR)),
    audio("flanger", "flanger(waveform, 8000)", lambda: lambda x: F().flanger(x, SR)),
    audio("contrast", "contrast(waveform)", lambda: F().contrast, group="control"),
    audio("dcshift", "dcshift(waveform, 0.5, 0.05)", lambda: lambda x: F().dcshift(x, 0.5, 0.05)),
    audio("gain", "gain(waveform, 3.0)", lambda: lambda x: F().gain(x, 3.0), group="control"),
    audio("compute_deltas", "compute_deltas(specgram)", lambda: F().compute_deltas,
          args=lambda g: (randn(g, 1, 4, 6),), group="control"),
    audio("amplitude_to_DB", "amplitude_to_DB(x, 10.0, 1e-10, 0.0, 80.0)",
          lambda: lambda x: F().amplitude_to_DB(x, 10.0, 1e-10, 0.0, 80.0),
          args=lambda g: (rand(g, 1, 4, 6) + 0.1,), group="control"),
    audio("preemphasis", "preemphasis(waveform)", lambda: F().preemphasis, group="control"),
    audio("deemphasis", "deemphasis(waveform)", lambda: F().deemphasis),
    audio("fftconvolve", "fftconvolve(x, y)", lambda: F().fftconvolve,
          args=lambda g: (randn(g, 1, 16), randn(g, 1, 5)), batched=(0, 1), group="control"),
    audio("convolve", "convolve(x, y)", lambda: F().convolve,
          args=lambda g: (randn(g, 1, 16), randn(g, 1, 5)), batched=(0, 1), group="control"),
    audio("add_noise", "add_noise(waveform, noise, snr)", lambda: F().add_noise,
          args=lambda g: (randn(g, 1, 16), randn(g, 1, 16),
                          torch.tensor([10.0], dtype=torch.float64)),
          batched=(0, 1), group="control"),
    audio("spectral_centroid", "spectral_centroid(waveform, 8000, 0, window, 16, 4, 16)",
          lambda: lambda x: F().spectral_centroid(
              x, SR, 0, torch.hann_window(16, dtype=torch.float64), 16, 4, 16),
          cite=FI, group="control"),
]
