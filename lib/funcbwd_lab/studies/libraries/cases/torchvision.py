"""torchvision 0.28.0: box ops, losses, v2 functional transforms, classifiers (pure Python; the
CUDA wheel's ``_C.so`` is not loaded, see env.py)."""

from __future__ import annotations

import torch

from funcbwd_lab.studies.libraries.case import rand, randint, randn, randn32
from funcbwd_lab.studies.libraries.cases import fn, lib, module_fn

L = "torchvision"
OPS = "pytorch/vision: test/test_ops.py"
LOSSES = "pytorch/vision: test/test_losses.py"
V2 = "pytorch/vision: test/test_transforms_v2.py"
MODELS = "pytorch/vision: test/test_models.py"
NOT_INT = {t: "integer/bool input: nothing to differentiate"
           for t in ("vmap_vjp", "vmap_jacrev", "jacrev", "jacfwd", "hessian")}


def boxes(g: torch.Generator, n: int = 3) -> torch.Tensor:
    xy = rand(g, n, 2)
    return torch.cat([xy, xy + 0.5 + rand(g, n, 2)], -1)


def two_boxes(g):
    return boxes(g), boxes(g)


def img(g):
    return rand(g, 3, 6, 6)


def ops():
    return lib("torchvision.ops")


def F():
    return lib("torchvision.transforms.v2.functional")


def _classifier(arch: str, **kw):
    def make():
        m = getattr(lib("torchvision.models"), arch)(num_classes=10, **kw)
        return m.train()
    return make


def _image_target(size: int):
    return lambda g: (randn32(g, 3, size, size), randint(g, 10))


CASES = [
    fn("torchvision.ops.box_iou", L, "box_iou(boxes1, boxes2)", OPS,
       lambda: ops().box_iou, two_boxes, group="control"),
    fn("torchvision.ops.generalized_box_iou", L, "generalized_box_iou(boxes1, boxes2)", OPS,
       lambda: ops().generalized_box_iou, two_boxes, group="control"),
    fn("torchvision.ops.distance_box_iou", L, "distance_box_iou(boxes1, boxes2)", OPS,
       lambda: ops().distance_box_iou, two_boxes, group="control"),
    fn("torchvision.ops.complete_box_iou", L, "complete_box_iou(boxes1, boxes2)", OPS,
       lambda: ops().complete_box_iou, two_boxes),
    fn("torchvision.ops.box_convert", L, "box_convert(boxes, 'xyxy', 'cxcywh')", OPS,
       lambda: lambda b: ops().box_convert(b, "xyxy", "cxcywh"), lambda g: (boxes(g),),
       group="control"),
    fn("torchvision.ops.generalized_box_iou_loss", L, "generalized_box_iou_loss(b1, b2)", LOSSES,
       lambda: ops().generalized_box_iou_loss, two_boxes),
    fn("torchvision.ops.complete_box_iou_loss", L, "complete_box_iou_loss(b1, b2)", LOSSES,
       lambda: ops().complete_box_iou_loss, two_boxes),
    fn("torchvision.ops.distance_box_iou_loss", L, "distance_box_iou_loss(b1, b2)", LOSSES,
       lambda: ops().distance_box_iou_loss, two_boxes),
    fn("torchvision.ops.sigmoid_focal_loss", L, "sigmoid_focal_loss(inputs, targets)", LOSSES,
       lambda: lambda x, t: ops().sigmoid_focal_loss(x, t, reduction="none"),
       lambda g: (randn(g, 5), (rand(g, 5) > 0.5).float()), group="control"),
    fn("torchvision.ops.masks_to_boxes", L, "masks_to_boxes(masks)",
       "pytorch/vision: test/test_masks_to_boxes.py",
       lambda: ops().masks_to_boxes, lambda g: (rand(g, 2, 6, 6) > 0.3,), skip=NOT_INT,
       what="writes each box into a torch.zeros result in a loop"),
    fn("torchvision.transforms.v2.functional.rgb_to_grayscale", L, "F.rgb_to_grayscale(img)", V2,
       lambda: F().rgb_to_grayscale, lambda g: (img(g),), group="control"),
    fn("torchvision.transforms.v2.functional.adjust_brightness", L,
       "F.adjust_brightness(img, 1.5)", V2, lambda: lambda x: F().adjust_brightness(x, 1.5),
       lambda g: (img(g),), group="control"),
    fn("torchvision.transforms.v2.functional.adjust_contrast", L, "F.adjust_contrast(img, 1.5)",
       V2, lambda: lambda x: F().adjust_contrast(x, 1.5), lambda g: (img(g),), group="control"),
    fn("torchvision.transforms.v2.functional.adjust_saturation", L,
       "F.adjust_saturation(img, 0.5)", V2, lambda: lambda x: F().adjust_saturation(x, 0.5),
       lambda g: (img(g),), group="control"),
    fn("torchvision.transforms.v2.functional.adjust_hue", L, "F.adjust_hue(img, 0.1)", V2,
       lambda: lambda x: F().adjust_hue(x, 0.1), lambda g: (img(g),)),
    fn("torchvision.transforms.v2.functional.adjust_sharpness", L,
       "F.adjust_sharpness(img, 2.0)", V2, lambda: lambda x: F().adjust_sharpness(x, 2.0),
       lambda g: (img(g),)),
    fn("torchvision.transforms.v2.functional.autocontrast", L, "F.autocontrast(img)", V2,
       lambda: F().autocontrast, lambda g: (img(g),)),
    fn("torchvision.transforms.v2.functional.gaussian_blur", L,
       "F.gaussian_blur(img, [3, 3], [1.0, 1.0])", V2,
       lambda: lambda x: F().gaussian_blur(x, [3, 3], [1.0, 1.0]), lambda g: (img(g),),
       group="control"),
    fn("torchvision.transforms.v2.functional.normalize", L,
       "F.normalize(img, mean, std)", V2,
       lambda: lambda x: F().normalize(x, [0.5, 0.4, 0.3], [0.2, 0.3, 0.4]),
       lambda g: (img(g),), group="control"),
    fn("torchvision.transforms.v2.functional.rotate", L, "F.rotate(img, 30.0)", V2,
       lambda: lambda x: F().rotate(x, 30.0), lambda g: (img(g),)),
    fn("torchvision.transforms.v2.functional.affine", L,
       "F.affine(img, angle=15.0, translate=[1, 0], scale=1.1, shear=[5.0, 0.0])", V2,
       lambda: lambda x: F().affine(x, angle=15.0, translate=[1, 0], scale=1.1,
                                    shear=[5.0, 0.0]), lambda g: (img(g),)),
    fn("torchvision.transforms.v2.functional.erase", L, "F.erase(img, 1, 1, 2, 2, v)", V2,
       lambda: lambda x, v: F().erase(x, 1, 1, 2, 2, v), lambda g: (img(g), rand(g, 3, 2, 2)),
       batched=(0, 1), diff=1, what="clones the image and writes the patch in place"),
    module_fn("torchvision.models.resnet18", L, "resnet18(num_classes=10).train()", MODELS,
              _classifier("resnet18"), _image_target(64), kind="model",
              what="BatchNorm in train mode: running statistics written per call"),
    module_fn("torchvision.models.mobilenet_v3_small", L,
              "mobilenet_v3_small(num_classes=10).train()", MODELS,
              _classifier("mobilenet_v3_small"), _image_target(64), kind="model",
              what="BatchNorm in train mode, in-place hardswish"),
    module_fn("torchvision.models.squeezenet1_1", L,
              "squeezenet1_1(num_classes=10, dropout=0.0).train()",
              MODELS, _classifier("squeezenet1_1", dropout=0.0), _image_target(64), kind="model",
              what="ReLU(inplace=True) on fresh activations, no BatchNorm"),
]
