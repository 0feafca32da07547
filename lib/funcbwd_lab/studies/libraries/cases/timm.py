"""timm 1.0.31: layers, activations and classifiers (``create_model(..., pretrained=False)``)."""

from __future__ import annotations

import torch

from funcbwd_lab.studies.libraries.case import randint, randn, randn32
from funcbwd_lab.studies.libraries.cases import fn, lib, module_fn

L = "timm"
LAYERS = "huggingface/pytorch-image-models: tests/test_layers.py"
MODELS = "huggingface/pytorch-image-models: tests/test_models.py"


def layers():
    return lib("timm.layers")


def fmap(g):
    return (randn(g, 8, 4, 4),)


def layer(name: str, call: str, make, args=fmap, **kw):
    return module_fn(f"timm.layers.{name}", L, call, LAYERS, make,
                     args, call_with=lambda m: (lambda x: m(x[None])[0]), **kw)


def model(arch: str, size: int, **kw):
    def make():
        return lib("timm").create_model(arch, pretrained=False, num_classes=10).train()
    return module_fn(f"timm.create_model('{arch}')", L,
                     f"timm.create_model('{arch}', pretrained=False, num_classes=10).train()",
                     MODELS, make, lambda g: (randn32(g, 3, size, size), randint(g, 10)),
                     kind="model", **kw)


CASES = [
    layer("EvoNorm2dB0", "EvoNorm2dB0(8)(x) (train mode)", lambda: layers().EvoNorm2dB0(8).train(),
          what="updates its running variance in place in train mode"),
    layer("EvoNorm2dS0", "EvoNorm2dS0(8, group_size=4)(x)",
          lambda: layers().EvoNorm2dS0(8, group_size=4), group="control"),
    layer("GroupNorm1", "GroupNorm1(8)(x)", lambda: layers().GroupNorm1(8), group="control"),
    layer("LayerNorm2d", "LayerNorm2d(8)(x)", lambda: layers().LayerNorm2d(8), group="control"),
    layer("SqueezeExcite", "SqueezeExcite(8)(x)", lambda: layers().SqueezeExcite(8)),
    layer("EcaModule", "EcaModule(8)(x)", lambda: layers().EcaModule(8)),
    layer("BlurPool2d", "BlurPool2d(8)(x)", lambda: layers().BlurPool2d(8), group="control"),
    layer("Mlp", "Mlp(8, 16)(x)", lambda: layers().Mlp(8, 16), args=lambda g: (randn(g, 2, 8),)),
    layer("BatchNormAct2d", "BatchNormAct2d(8)(x) (train mode)",
          lambda: layers().BatchNormAct2d(8).train(),
          what="BatchNorm + in-place activation, running statistics in train mode"),
    fn("timm.layers.hard_mish", L, "hard_mish(x)", LAYERS,
       lambda: lib("timm.layers.activations").hard_mish,
       lambda g: (randn(g, 6),), group="control"),
    fn("timm.layers.activations.swish(inplace=True)", L, "swish(x, inplace=True)", LAYERS,
       lambda: lambda x: lib("timm.layers.activations").swish(x, inplace=True),
       lambda g: (randn(g, 6),), what="writes its result into its own input"),
    model("resnet10t", 64, what="BatchNorm in train mode"),
    model("test_efficientnet", 64, what="BatchNorm in train mode"),
    model("test_vit", 32, group="control", what="LayerNorm only: no state"),
]
