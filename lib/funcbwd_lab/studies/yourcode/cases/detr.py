"""DETR (facebookresearch/detr): batching images of different sizes into one zero-padded tensor
by copying each image into a row of ``torch.zeros`` obtained by iterating over it.

Re-creates ``nested_tensor_from_tensor_list``, ``_max_by_axis`` and ``NestedTensor`` (its
constructor) from ``util/misc.py`` at HEAD 29901c51d7fe8712168b8d0d64351170bc0f83e0 (2024-03-12;
the file last changed in b9048ebe, 2021-10-08). Trimmed: the ONNX-tracing branch
(``torchvision._is_tracing()``) and NestedTensor's other methods. ``zip(tensor_list, tensor,
mask)`` iterates over the fresh tensors, so ``pad_img`` and ``m`` are their ``unbind`` views;
``pad_img[...].copy_(img)`` writes through them. The case is ``DETR.forward``'s first step
(``samples = nested_tensor_from_tensor_list(samples)``) on two images, returning the padded
batch and its mask.
"""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from funcbwd_lab.studies.yourcode.case import Case, randn


# facebookresearch/detr util/misc.py _max_by_axis, NestedTensor, nested_tensor_from_tensor_list
# (29901c51)
def _max_by_axis(the_list):
    # type: (List[List[int]]) -> List[int]
    maxes = the_list[0]
    for sublist in the_list[1:]:
        for index, item in enumerate(sublist):
            maxes[index] = max(maxes[index], item)
    return maxes


class NestedTensor(object):
    def __init__(self, tensors, mask: Optional[Tensor]):
        self.tensors = tensors
        self.mask = mask


def nested_tensor_from_tensor_list(tensor_list: List[Tensor]):
    # TODO make this more general
    if tensor_list[0].ndim == 3:
        # TODO make it support different-sized images
        max_size = _max_by_axis([list(img.shape) for img in tensor_list])
        # min_size = tuple(min(s) for s in zip(*[img.shape for img in tensor_list]))
        batch_shape = [len(tensor_list)] + max_size
        b, c, h, w = batch_shape
        dtype = tensor_list[0].dtype
        device = tensor_list[0].device
        tensor = torch.zeros(batch_shape, dtype=dtype, device=device)
        mask = torch.ones((b, h, w), dtype=torch.bool, device=device)
        for img, pad_img, m in zip(tensor_list, tensor, mask):
            pad_img[: img.shape[0], : img.shape[1], : img.shape[2]].copy_(img)
            m[: img.shape[1], :img.shape[2]] = False
    else:
        raise ValueError('not supported')
    return NestedTensor(tensor, mask)


def _out(samples: NestedTensor) -> Tensor:
    return torch.cat([samples.tensors.flatten(), samples.mask.flatten().to(samples.tensors.dtype)])


def detr_inputs(img_a, img_b):
    """DETR.forward: ``if isinstance(samples, (list, torch.Tensor)): samples =
    nested_tensor_from_tensor_list(samples)``, on a list of two images."""
    return _out(nested_tensor_from_tensor_list([img_a, img_b]))


def detr_inputs_rewrite(img_a, img_b):
    imgs = [img_a, img_b]
    c, h, w = (max(i.shape[d] for i in imgs) for d in range(3))
    padded = [F.pad(i, (0, w - i.shape[2], 0, h - i.shape[1], 0, c - i.shape[0])) for i in imgs]
    masks = [F.pad(torch.zeros(i.shape[1:], dtype=torch.bool),
                   (0, w - i.shape[2], 0, h - i.shape[1]), value=True) for i in imgs]
    return _out(NestedTensor(torch.stack(padded), torch.stack(masks)))


CASES = [
    Case("detr:nested_tensor_from_tensor_list", "detr",
         "facebookresearch/detr util/misc.py nested_tensor_from_tensor_list (29901c51)",
         "tensor = torch.zeros(batch_shape); for img, pad_img, m in "
         "zip(tensor_list, tensor, mask): pad_img[: c, : h, : w].copy_(img); m[: h, : w] = False",
         ("factory", "views"), lambda decorate: decorate(detr_inputs), detr_inputs_rewrite,
         lambda g: (randn(g, 3, 4, 5), randn(g, 3, 5, 3)), batched=(0, 1), diff=0),
]
