"""opacus 1.6.0: per-sample gradients by its functorch grad sampler
(``GradSampleModule(model, force_functorch=True)``: ``vmap(grad)`` of each layer inside the
backward pass), on models built from the studied libraries' layers."""

from __future__ import annotations

import torch
from torch import nn

from funcbwd_lab.studies.libraries.case import randint, randn, randn32
from funcbwd_lab.studies.libraries.cases import lib, module_fn

L = "opacus"
TESTS = "pytorch/opacus: opacus/tests/grad_samples/common.py"


def _cnn():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 4 * 4, 10))


def _evonorm_cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3), lib("timm.layers").EvoNorm2dS0(8, group_size=4),
                         nn.Flatten(), nn.Linear(8 * 4 * 4, 10))


class _LSTMClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = lib("opacus.layers").DPLSTM(4, 6, batch_first=True)
        self.fc = nn.Linear(6, 10)

    def forward(self, x):
        return self.fc(self.lstm(x)[0][:, -1])


def _einmix():
    mix = lib("einops.layers.torch").EinMix("b t c -> b t d", weight_shape="c d", c=4, d=6)
    return nn.Sequential(mix, nn.Flatten(), nn.Linear(3 * 6, 10))


def _conv1d():
    return nn.Sequential(lib("transformers.pytorch_utils").Conv1D(8, 5), nn.Tanh(),
                         nn.Linear(8, 10))


def _hardswish_mlp():
    return nn.Sequential(nn.Linear(6, 8), nn.Hardswish(inplace=True), nn.Linear(8, 10))


def case(name: str, call: str, make, args, **kw):
    return module_fn(f"opacus.GradSampleModule({name})", L,
                     f"GradSampleModule({call}, force_functorch=True)", TESTS, make, args,
                     kind="opacus", **kw)


CASES = [
    case("Conv2d+GroupNorm", "Sequential(Conv2d, GroupNorm, ReLU, Linear)", _cnn,
         lambda g: (randn32(g, 3, 6, 6), randint(g, 10)), group="control"),
    case("timm.EvoNorm2dS0", "Sequential(Conv2d, timm EvoNorm2dS0, Linear)", _evonorm_cnn,
         lambda g: (randn32(g, 3, 6, 6), randint(g, 10))),
    case("DPLSTM", "LSTM classifier with opacus.layers.DPLSTM", _LSTMClassifier,
         lambda g: (randn32(g, 3, 4), randint(g, 10))),
    case("einops.EinMix", "Sequential(EinMix, Linear)", _einmix,
         lambda g: (randn32(g, 3, 4), randint(g, 10)), group="control"),
    case("transformers.Conv1D", "Sequential(transformers Conv1D, Tanh, Linear)", _conv1d,
         lambda g: (randn32(g, 5), randint(g, 10)), group="control"),
    case("Hardswish(inplace=True)", "Sequential(Linear, Hardswish(inplace=True), Linear)",
         _hardswish_mlp, lambda g: (randn32(g, 6), randint(g, 10))),
]
