"""PyTorch3D (facebookresearch/pytorch3d): in-place code in ``pytorch3d/transforms``.

Each case re-creates one upstream function, trimmed to the lines that compute (docstrings,
shape checks and unrelated branches cut); the in-place lines are kept exactly as written
upstream. Commits: ``rotation_conversions.py`` at e43ed8c76e0481383d86d5eb45c54c13da56b24e
(2026-02-22, the last version before ``_sqrt_positive_part`` was rewritten with ``torch.where``
in 61cc79aa), ``so3.py`` at 9381c4016376345bb795b97c45a6c2de66db354a (HEAD, 2026-07-28).
"""

from __future__ import annotations

import torch

from funcbwd_lab.studies.yourcode.case import Case, randn, simple


# facebookresearch/pytorch3d pytorch3d/transforms/rotation_conversions.py _sqrt_positive_part
# (commit e43ed8c7; used by matrix_to_quaternion)
def _sqrt_positive_part(x: torch.Tensor) -> torch.Tensor:
    """
    Returns torch.sqrt(torch.max(0, x))
    but with a zero subgradient where x is 0.
    """
    ret = torch.zeros_like(x)
    positive_mask = x > 0
    if torch.is_grad_enabled():
        ret[positive_mask] = torch.sqrt(x[positive_mask])
    else:
        ret = torch.where(positive_mask, torch.sqrt(x), ret)
    return ret


def _sqrt_positive_part_rewrite(x):
    positive_mask = x > 0
    safe_x = torch.where(positive_mask, x, torch.ones_like(x))
    return torch.where(positive_mask, torch.sqrt(safe_x), torch.zeros_like(x))


# facebookresearch/pytorch3d pytorch3d/transforms/rotation_conversions.py matrix_to_axis_angle
# (commit e43ed8c7), the fast=True path (the Rodrigues-based one); shape check trimmed
def matrix_to_axis_angle(matrix: torch.Tensor, fast: bool = True) -> torch.Tensor:
    omegas = torch.stack(
        [
            matrix[..., 2, 1] - matrix[..., 1, 2],
            matrix[..., 0, 2] - matrix[..., 2, 0],
            matrix[..., 1, 0] - matrix[..., 0, 1],
        ],
        dim=-1,
    )
    norms = torch.norm(omegas, p=2, dim=-1, keepdim=True)
    traces = torch.diagonal(matrix, dim1=-2, dim2=-1).sum(-1).unsqueeze(-1)
    angles = torch.atan2(norms, traces - 1)

    zeros = torch.zeros(3, dtype=matrix.dtype, device=matrix.device)
    omegas = torch.where(torch.isclose(angles, torch.zeros_like(angles)), zeros, omegas)

    near_pi = angles.isclose(angles.new_full((1,), torch.pi)).squeeze(-1)

    axis_angles = torch.empty_like(omegas)
    axis_angles[~near_pi] = (
        0.5 * omegas[~near_pi] / torch.sinc(angles[~near_pi] / torch.pi)
    )

    # this derives from: nnT = (R + 1) / 2
    n = 0.5 * (
        matrix[near_pi][..., 0, :]
        + torch.eye(1, 3, dtype=matrix.dtype, device=matrix.device)
    )
    axis_angles[near_pi] = angles[near_pi] * n / torch.norm(n)

    return axis_angles


def matrix_to_axis_angle_rewrite(matrix):
    omegas = torch.stack([matrix[..., 2, 1] - matrix[..., 1, 2],
                          matrix[..., 0, 2] - matrix[..., 2, 0],
                          matrix[..., 1, 0] - matrix[..., 0, 1]], dim=-1)
    norms = torch.norm(omegas, p=2, dim=-1, keepdim=True)
    traces = torch.diagonal(matrix, dim1=-2, dim2=-1).sum(-1).unsqueeze(-1)
    angles = torch.atan2(norms, traces - 1)
    omegas = torch.where(torch.isclose(angles, torch.zeros_like(angles)),
                         torch.zeros_like(omegas), omegas)
    near_pi = angles.isclose(angles.new_full((1,), torch.pi))  # (..., 1), kept for broadcasting
    sinc = torch.sinc(angles / torch.pi)
    regular = 0.5 * omegas / torch.where(near_pi, torch.ones_like(sinc), sinc)
    # the near-pi rows are divided by the norm of ALL near-pi rows' n (torch.norm(n) upstream)
    n = 0.5 * (matrix[..., 0, :] + torch.eye(1, 3, dtype=matrix.dtype))
    sq = torch.where(near_pi, n * n, torch.zeros_like(n)).sum()
    norm = torch.sqrt(torch.where(sq > 0, sq, torch.ones_like(sq)))
    return torch.where(near_pi, angles * n / norm, regular)


def _rotations(gen, n):
    """``n`` random rotation matrices (from unit quaternions, real part first)."""
    q = randn(gen, n, 4)
    q = q / q.norm(dim=-1, keepdim=True)
    r, i, j, k = q.unbind(-1)
    two_s = 2.0 / (q * q).sum(-1)
    o = torch.stack((1 - two_s * (j * j + k * k), two_s * (i * j - k * r),
                     two_s * (i * k + j * r), two_s * (i * j + k * r),
                     1 - two_s * (i * i + k * k), two_s * (j * k - i * r),
                     two_s * (i * k - j * r), two_s * (j * k + i * r),
                     1 - two_s * (i * i + j * j)), -1)
    return o.reshape(n, 3, 3)


def _axis_angle_args(gen):
    """Three random rotations and a half turn 2 n n^T - I about a random axis n (its angle is
    exactly pi: the near_pi rows are written too)."""
    n = randn(gen, 3)
    n = n / n.norm()
    half_turn = 2 * torch.outer(n, n) - torch.eye(3)
    return (torch.cat([_rotations(gen, 3), half_turn[None]]),)


# facebookresearch/pytorch3d pytorch3d/transforms/so3.py hat (HEAD 9381c401; written this way
# since 9f14e82b)
def hat(v: torch.Tensor) -> torch.Tensor:
    N, dim = v.shape
    if dim != 3:
        raise ValueError("Input vectors have to be 3-dimensional.")

    h = torch.zeros((N, 3, 3), dtype=v.dtype, device=v.device)

    x, y, z = v.unbind(1)

    h[:, 0, 1] = -z
    h[:, 0, 2] = y
    h[:, 1, 0] = z
    h[:, 1, 2] = -x
    h[:, 2, 0] = -y
    h[:, 2, 1] = x

    return h


def hat_rewrite(v):
    x, y, z = v.unbind(1)
    o = torch.zeros_like(x)
    return torch.stack([o, -z, y, z, o, -x, -y, x, o], dim=-1).reshape(-1, 3, 3)


def _sqrt_args(gen):
    x = randn(gen, 6)
    return (torch.where(x == 0, torch.full_like(x, 0.5), x),)


_ROT = "facebookresearch/pytorch3d pytorch3d/transforms/rotation_conversions.py"

CASES = [
    Case("pytorch3d:_sqrt_positive_part", "pytorch3d", f"{_ROT} _sqrt_positive_part (e43ed8c7)",
         "ret = zeros_like(x); ret[x > 0] = sqrt(x[x > 0]) (the grad-enabled branch)",
         ("like", "mask"), simple(_sqrt_positive_part), _sqrt_positive_part_rewrite, _sqrt_args),
    Case("pytorch3d:matrix_to_axis_angle", "pytorch3d", f"{_ROT} matrix_to_axis_angle (fast=True; "
         "e43ed8c7)",
         "axis_angles = empty_like(omegas); axis_angles[~near_pi] = ...; "
         "axis_angles[near_pi] = ...",
         ("like", "mask"), simple(matrix_to_axis_angle), matrix_to_axis_angle_rewrite,
         _axis_angle_args),
    Case("pytorch3d:so3.hat", "pytorch3d",
         "facebookresearch/pytorch3d pytorch3d/transforms/so3.py hat (9381c401)",
         "h = torch.zeros((N, 3, 3)); h[:, 0, 1] = -z ... from v.unbind(1)",
         ("factory",), simple(hat), hat_rewrite, lambda g: (randn(g, 5, 3),)),
]
