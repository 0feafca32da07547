"""Theseus (facebookresearch/theseus): Lie-group code writing into ``new_zeros`` of an argument.

The case re-creates ``SE3._project_impl`` of ``theseus/geometry/se3.py``, trimmed (the shape
check and the sparse branch cut; the method's ``self.tensor`` becomes an argument); the in-place
lines are kept exactly as written upstream. The group element is shared and the Euclidean
gradients are batched (projecting many gradients at one pose): ``self.tensor.new_zeros`` is then
unbatched. (Theseus's one-argument hat operators, ``SO2.hat`` and torchlie's ``_hat_impl``, write
into ``new_zeros`` of their batched argument, which vmap batches: plain torch.func runs them, so
they are not in the corpus.) Commit: HEAD c8583de41824613fb135ee9bad0e930ded6be404 (2025-01-16).
"""

from __future__ import annotations

import torch

from funcbwd_lab.studies.yourcode.case import Case, randn, simple


# facebookresearch/theseus theseus/geometry/se3.py SE3._project_impl, is_sparse=False (c8583de4);
# ``self.tensor`` (the group element, (B, 3, 4)) is the argument ``tensor``
def se3_project_impl(tensor: torch.Tensor, euclidean_grad: torch.Tensor) -> torch.Tensor:
    ret = tensor.new_zeros(euclidean_grad.shape[:-2] + torch.Size([6]))
    temp = torch.einsum(
        "...jk,...ji->...ik", euclidean_grad, tensor[:, :, :3]
    )
    ret[..., :3] = temp[..., 3]
    ret[..., 3] = temp[..., 2, 1] - temp[..., 1, 2]
    ret[..., 4] = temp[..., 0, 2] - temp[..., 2, 0]
    ret[..., 5] = temp[..., 1, 0] - temp[..., 0, 1]

    return ret


def se3_project_impl_rewrite(tensor, euclidean_grad):
    temp = torch.einsum("...jk,...ji->...ik", euclidean_grad, tensor[:, :, :3])
    return torch.cat([temp[..., 3], torch.stack([temp[..., 2, 1] - temp[..., 1, 2],
                                                  temp[..., 0, 2] - temp[..., 2, 0],
                                                  temp[..., 1, 0] - temp[..., 0, 1]], dim=-1)],
                     dim=-1)


def _se3_args(gen):
    """An SE3 element (a rotation from a unit quaternion, a translation) and a Euclidean grad."""
    q = randn(gen, 3, 4)
    q = q / q.norm(dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    rot = torch.stack((1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
                       2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
                       2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)),
                      -1).reshape(3, 3, 3)
    return (torch.cat([rot, randn(gen, 3, 3, 1)], dim=-1), randn(gen, 3, 3, 4))


CASES = [
    Case("theseus:SE3._project_impl", "theseus",
         "facebookresearch/theseus theseus/geometry/se3.py SE3._project_impl (dense; c8583de4)",
         "ret = self.tensor.new_zeros(B, 6); ret[..., :3] = temp[..., 3]; ret[..., 3] = ... ",
         ("like",), simple(se3_project_impl), se3_project_impl_rewrite, _se3_args,
         batched=(1,), diff=1),
]
