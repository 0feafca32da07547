"""maskrcnn-benchmark (facebookresearch/maskrcnn-benchmark): box decoding by strided slice writes
into ``torch.zeros_like(rel_codes)``.

Re-creates ``BoxCoder.decode`` from ``maskrcnn_benchmark/modeling/box_coder.py`` at commit
379baece5c1b1a5b2e0d923721e0e0e7236c6bce, as written (nothing trimmed but ``encode``). The
coder is built fresh per ``build`` with Faster R-CNN's box-head weights (10, 10, 5, 5); the
decorator goes on the method, as on a module's forward. The case decodes one set of regression
codes against a batch of reference boxes (anchor sets): ``zeros_like(rel_codes)`` is then
unbatched while the values written are batched. (With the codes batched too, vmap batches
``zeros_like`` and plain torch.func runs it.)
"""

from __future__ import annotations

import math

import torch

from funcbwd_lab.studies.yourcode.case import Case, rand, randn


# facebookresearch/maskrcnn-benchmark maskrcnn_benchmark/modeling/box_coder.py BoxCoder.decode
# (379baece)
class BoxCoder(object):
    """
    This class encodes and decodes a set of bounding boxes into
    the representation used for training the regressors.
    """

    def __init__(self, weights, bbox_xform_clip=math.log(1000. / 16)):
        """
        Arguments:
            weights (4-element tuple)
            bbox_xform_clip (float)
        """
        self.weights = weights
        self.bbox_xform_clip = bbox_xform_clip

    def decode(self, rel_codes, boxes):
        """
        From a set of original boxes and encoded relative box offsets,
        get the decoded boxes.

        Arguments:
            rel_codes (Tensor): encoded boxes
            boxes (Tensor): reference boxes.
        """

        boxes = boxes.to(rel_codes.dtype)

        TO_REMOVE = 1  # TODO remove
        widths = boxes[:, 2] - boxes[:, 0] + TO_REMOVE
        heights = boxes[:, 3] - boxes[:, 1] + TO_REMOVE
        ctr_x = boxes[:, 0] + 0.5 * widths
        ctr_y = boxes[:, 1] + 0.5 * heights

        wx, wy, ww, wh = self.weights
        dx = rel_codes[:, 0::4] / wx
        dy = rel_codes[:, 1::4] / wy
        dw = rel_codes[:, 2::4] / ww
        dh = rel_codes[:, 3::4] / wh

        # Prevent sending too large values into torch.exp()
        dw = torch.clamp(dw, max=self.bbox_xform_clip)
        dh = torch.clamp(dh, max=self.bbox_xform_clip)

        pred_ctr_x = dx * widths[:, None] + ctr_x[:, None]
        pred_ctr_y = dy * heights[:, None] + ctr_y[:, None]
        pred_w = torch.exp(dw) * widths[:, None]
        pred_h = torch.exp(dh) * heights[:, None]

        pred_boxes = torch.zeros_like(rel_codes)
        # x1
        pred_boxes[:, 0::4] = pred_ctr_x - 0.5 * pred_w
        # y1
        pred_boxes[:, 1::4] = pred_ctr_y - 0.5 * pred_h
        # x2 (note: "- 1" is correct; don't be fooled by the asymmetry)
        pred_boxes[:, 2::4] = pred_ctr_x + 0.5 * pred_w - 1
        # y2 (note: "- 1" is correct; don't be fooled by the asymmetry)
        pred_boxes[:, 3::4] = pred_ctr_y + 0.5 * pred_h - 1

        return pred_boxes


WEIGHTS = (10., 10., 5., 5.)


def _build(decorate):
    coder = BoxCoder(WEIGHTS)
    return decorate(coder.decode)


def decode_rewrite(rel_codes, boxes):
    widths = boxes[:, 2] - boxes[:, 0] + 1
    heights = boxes[:, 3] - boxes[:, 1] + 1
    ctr_x = boxes[:, 0] + 0.5 * widths
    ctr_y = boxes[:, 1] + 0.5 * heights
    wx, wy, ww, wh = WEIGHTS
    clip = math.log(1000. / 16)
    dx, dy = rel_codes[:, 0::4] / wx, rel_codes[:, 1::4] / wy
    dw = torch.clamp(rel_codes[:, 2::4] / ww, max=clip)
    dh = torch.clamp(rel_codes[:, 3::4] / wh, max=clip)
    pcx, pcy = dx * widths[:, None] + ctr_x[:, None], dy * heights[:, None] + ctr_y[:, None]
    pw, ph = torch.exp(dw) * widths[:, None], torch.exp(dh) * heights[:, None]
    out = torch.stack([pcx - 0.5 * pw, pcy - 0.5 * ph, pcx + 0.5 * pw - 1, pcy + 0.5 * ph - 1],
                      dim=-1)  # (N, classes, 4)
    return out.flatten(1)


def _args(gen, n=4, classes=2):
    xy = 50.0 * rand(gen, n, 2)
    wh = 5.0 + 30.0 * rand(gen, n, 2)
    return (randn(gen, n, 4 * classes), torch.cat([xy, xy + wh], dim=-1))


CASES = [
    Case("maskrcnn_benchmark:BoxCoder.decode", "maskrcnn-benchmark",
         "facebookresearch/maskrcnn-benchmark maskrcnn_benchmark/modeling/box_coder.py "
         "BoxCoder.decode (379baece)",
         "pred_boxes = torch.zeros_like(rel_codes); "
         "pred_boxes[:, 0::4] = pred_ctr_x - 0.5 * pred_w; "
         "... [:, 3::4]; one set of codes decoded against a batch of reference boxes, "
         "derivative w.r.t. the codes",
         ("like",), _build, decode_rewrite, _args, batched=(1,), diff=0),
]
