"""DANN (fungtion/DANN, models/functions.py and models/model.py at 476147f, 2019-07-26): the
gradient reversal layer of domain-adversarial training, an old-style Function
(``forward(ctx, x, alpha)`` keeping ``ctx.alpha`` and returning ``x.view_as(x)``), on its own and
called in the middle of the model's forward between in-place ReLUs (``nn.ReLU(True)``).

Re-created from the upstream code and trimmed: the convolutional feature extractor, batch norms,
dropout and pooling are replaced by one linear layer followed by the same in-place ReLU, and the
classifiers by one linear layer each (fixed weights; the domain head keeps its in-place ReLU);
the Function and the forward's structure are upstream's as written.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.autograd import Function

from funcbwd_lab.studies.yourcode.case import Case, randn


# fungtion/DANN models/functions.py, class ReverseLayerF (476147f)
class ReverseLayerF(Function):

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha

        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        output = grad_output.neg() * ctx.alpha

        return output, None


class ReverseLayerFRewrite(Function):
    """The reversal in setup_context style (what torch.func needs), forward out of place."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, alpha):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.alpha = inputs[1]

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.alpha, None


def _reverse_build(decorate):
    cls = decorate(ReverseLayerF)
    return lambda x, alpha: cls.apply(x, alpha) * x  # a use whose gradient is not just -alpha


def reverse_rewrite(x, alpha):
    return ReverseLayerFRewrite.apply(x, alpha) * x


_IN, _FEAT = 6, 8
_gen = torch.Generator().manual_seed(2019)
_W = {"f": (randn(_gen, _FEAT, _IN) / 2, randn(_gen, _FEAT) / 4),
      "c": (randn(_gen, 3, _FEAT) / 3, randn(_gen, 3) / 4),
      "d": (randn(_gen, 2, _FEAT) / 3, randn(_gen, 2) / 4)}


def _linear(name, n_in, n_out):
    lin = nn.Linear(n_in, n_out)
    with torch.no_grad():
        lin.weight.copy_(_W[name][0])
        lin.bias.copy_(_W[name][1])
    return lin


def _model_build(decorate):
    ReverseLayerF_ = decorate(ReverseLayerF)

    # fungtion/DANN models/model.py, class CNNModel (476147f), trimmed as the module docstring says
    class CNNModel(nn.Module):

        def __init__(self):
            super(CNNModel, self).__init__()
            self.feature = nn.Sequential()
            self.feature.add_module('f_fc1', _linear("f", _IN, _FEAT))
            self.feature.add_module('f_relu1', nn.ReLU(True))

            self.class_classifier = nn.Sequential()
            self.class_classifier.add_module('c_fc1', _linear("c", _FEAT, 3))
            self.class_classifier.add_module('c_softmax', nn.LogSoftmax(dim=1))

            self.domain_classifier = nn.Sequential()
            self.domain_classifier.add_module('d_fc1', _linear("d", _FEAT, 2))
            self.domain_classifier.add_module('d_relu1', nn.ReLU(True))
            self.domain_classifier.add_module('d_softmax', nn.LogSoftmax(dim=1))

        def forward(self, input_data, alpha):
            feature = self.feature(input_data)
            feature = feature.view(-1, _FEAT)
            reverse_feature = ReverseLayerF_.apply(feature, alpha)
            class_output = self.class_classifier(feature)
            domain_output = self.domain_classifier(reverse_feature)

            return class_output, domain_output

    model = CNNModel()

    # train/main.py's step: both heads' outputs feed the loss
    def step(input_data, alpha):
        class_output, domain_output = model(input_data, alpha)
        return torch.cat([class_output, domain_output], dim=1)

    return step


def model_rewrite(input_data, alpha):
    f = torch.relu(input_data @ _W["f"][0].t() + _W["f"][1])
    r = ReverseLayerFRewrite.apply(f, alpha)
    c = torch.log_softmax(f @ _W["c"][0].t() + _W["c"][1], dim=1)
    d = torch.log_softmax(torch.relu(r @ _W["d"][0].t() + _W["d"][1]), dim=1)
    return torch.cat([c, d], dim=1)


_NO_JVP = "the Function defines no jvp: forward AD refuses it, as written and rewritten"

CASES = [
    Case("DANN:ReverseLayerF", "DANN",
         "fungtion/DANN models/functions.py: ReverseLayerF (476147f)",
         "old-style gradient reversal Function: ctx.alpha = alpha, forward returns x.view_as(x), "
         "backward grad_output.neg() * ctx.alpha",
         ("fn_old",), _reverse_build, reverse_rewrite, lambda g: (randn(g, 5), 0.7),
         undefined={"jacfwd": _NO_JVP, "hessian": _NO_JVP}),
    Case("DANN:CNNModel.forward", "DANN",
         "fungtion/DANN models/model.py: CNNModel.forward; models/functions.py: ReverseLayerF "
         "(476147f)",
         "a model's forward calling ReverseLayerF.apply between nn.ReLU(True) layers; "
         "a minibatch per sample",
         ("fn_old", "fn_inside"), _model_build, model_rewrite,
         lambda g: (randn(g, 2, _IN), 0.7),
         undefined={"jacfwd": _NO_JVP, "hessian": _NO_JVP}),
]
