"""Kornia (kornia/kornia): geometry code filling fresh ``torch.eye`` / ``torch.zeros`` tensors.

Each case re-creates one upstream function, trimmed (docstrings and input checks cut;
``transform_points`` and its homogeneous-coordinate helpers copied without their checks); the
in-place lines are kept exactly as written upstream. Commit: HEAD
b4f5a78a13891c7ac4c1cd9695941380273e981d (2026-08-18).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from funcbwd_lab.studies.yourcode.case import Case, rand, randn, simple


# kornia/kornia kornia/geometry/camera/pinhole.py pinhole_matrix (b4f5a78a)
def pinhole_matrix(pinholes: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    if not (len(pinholes.shape) == 2 and pinholes.shape[1] == 12):
        raise AssertionError(pinholes.shape)
    # unpack pinhole values
    fx, fy, cx, cy = torch.chunk(pinholes[..., :4], 4, dim=1)  # Nx1
    # create output container
    k = torch.eye(4, device=pinholes.device, dtype=pinholes.dtype) + eps
    k = k.view(1, 4, 4).repeat(pinholes.shape[0], 1, 1)  # Nx4x4
    # fill output with pinhole values
    k[..., 0, 0:1] = fx
    k[..., 0, 2:3] = cx
    k[..., 1, 1:2] = fy
    k[..., 1, 2:3] = cy
    return k


def pinhole_matrix_rewrite(pinholes, eps=1e-6):
    fx, fy, cx, cy = pinholes[:, :4].unbind(-1)
    e = torch.full_like(fx, eps)
    one = e + 1.0
    return torch.stack([fx, e, cx, e,
                        e, fy, cy, e,
                        e, e, one, e,
                        e, e, e, one], dim=-1).view(-1, 4, 4)


# kornia/kornia kornia/core/ops.py eye_like (b4f5a78a), shared_memory=False
def eye_like(n: int, input: torch.Tensor, shared_memory: bool = False) -> torch.Tensor:
    identity = torch.eye(n, device=input.device, dtype=input.dtype)

    return identity[None].expand(input.shape[0], n, n) if shared_memory else identity[None].repeat(input.shape[0], 1, 1)


# kornia/kornia kornia/geometry/linalg.py transform_points (b4f5a78a), with
# kornia/geometry/conversions.py convert_points_to_homogeneous / convert_points_from_homogeneous;
# checks and the empty-input early return trimmed (no in-place code)
def transform_points(trans_01: torch.Tensor, points_1: torch.Tensor) -> torch.Tensor:
    shape_inp = list(points_1.shape)
    points_1 = points_1.reshape(-1, points_1.shape[-2], points_1.shape[-1])
    trans_01 = trans_01.reshape(-1, trans_01.shape[-2], trans_01.shape[-1])
    trans_01 = torch.repeat_interleave(trans_01, repeats=int(points_1.shape[0] // trans_01.shape[0]), dim=0)
    points_1_h = F.pad(points_1, [0, 1], "constant", 1.0)
    points_0_h = torch.bmm(points_1_h.to(trans_01.dtype), trans_01.permute(0, 2, 1))
    z_vec = points_0_h[..., -1:]
    mask = torch.abs(z_vec) > 1e-8
    scale = torch.where(mask, 1.0 / (z_vec + 1e-8), torch.ones_like(z_vec))
    points_0 = scale * points_0_h[..., :-1]
    shape_inp[-2] = points_0.shape[-2]
    shape_inp[-1] = points_0.shape[-1]
    return points_0.reshape(shape_inp)


# kornia/kornia kornia/geometry/calibration/pnp.py _mean_isotropic_scale_normalize (b4f5a78a)
def _mean_isotropic_scale_normalize(points: torch.Tensor, eps: float = 1e-8):
    x_mean = torch.mean(points, dim=1, keepdim=True)  # Bx1xD
    scale = (points - x_mean).norm(dim=-1, p=2).mean(dim=-1)  # B

    D_int = points.shape[-1]
    scale = (D_int**0.5) / (scale + eps)  # B
    transform = eye_like(D_int + 1, points)  # (B, D+1, D+1)

    idxs = torch.arange(D_int, dtype=torch.int64, device=points.device)
    transform[:, idxs, idxs] = transform[:, idxs, idxs] * scale[:, None]
    transform[:, idxs, D_int] = transform[:, idxs, D_int] + (-scale[:, None] * x_mean[:, 0, idxs])

    points_norm = transform_points(transform, points)  # BxNxD

    return (points_norm, transform)


def _normalize_rewrite_parts(points, eps=1e-8):
    x_mean = torch.mean(points, dim=1, keepdim=True)
    scale = (points - x_mean).norm(dim=-1, p=2).mean(dim=-1)
    D = points.shape[-1]
    scale = (D ** 0.5) / (scale + eps)
    top = torch.cat([torch.diag_embed(scale[:, None].expand(-1, D)),
                     (-scale[:, None] * x_mean[:, 0])[..., None]], dim=-1)  # (B, D, D+1)
    bottom = torch.eye(D + 1, dtype=points.dtype)[D:].expand(points.shape[0], 1, D + 1)
    transform = torch.cat([top, bottom], dim=1)
    return transform_points(transform, points), transform


def _flat(parts):
    return torch.cat([t.flatten() for t in parts])


def _normalize_build(decorate):
    normalize = decorate(_mean_isotropic_scale_normalize)
    return lambda points: _flat(normalize(points))  # solve_pnp_dlt uses both


def _normalize_rewrite(points):
    return _flat(_normalize_rewrite_parts(points))


# kornia/kornia kornia/geometry/conversions.py axis_angle_to_quaternion (b4f5a78a)
def axis_angle_to_quaternion(axis_angle: torch.Tensor) -> torch.Tensor:
    if not axis_angle.shape[-1] == 3:
        raise ValueError(f"Input must be a tensor of shape Nx3 or 3. Got {axis_angle.shape}")

    # unpack input and compute conversion
    a0: torch.Tensor = axis_angle[..., 0:1]
    a1: torch.Tensor = axis_angle[..., 1:2]
    a2: torch.Tensor = axis_angle[..., 2:3]
    theta_squared: torch.Tensor = a0 * a0 + a1 * a1 + a2 * a2

    theta: torch.Tensor = torch.sqrt(theta_squared)
    half_theta: torch.Tensor = theta * 0.5

    mask: torch.Tensor = theta_squared > 0.0
    ones: torch.Tensor = torch.ones_like(half_theta)

    k_neg: torch.Tensor = 0.5 * ones
    k_pos: torch.Tensor = torch.sin(half_theta) / theta
    k: torch.Tensor = torch.where(mask, k_pos, k_neg)
    w: torch.Tensor = torch.where(mask, torch.cos(half_theta), ones)

    quaternion: torch.Tensor = torch.zeros(
        size=(*axis_angle.shape[:-1], 4), dtype=axis_angle.dtype, device=axis_angle.device
    )
    quaternion[..., 1:2] = a0 * k
    quaternion[..., 2:3] = a1 * k
    quaternion[..., 3:4] = a2 * k
    quaternion[..., 0:1] = w
    return quaternion


def axis_angle_to_quaternion_rewrite(axis_angle):
    theta_squared = (axis_angle * axis_angle).sum(-1, keepdim=True)
    mask = theta_squared > 0.0
    theta = torch.sqrt(torch.where(mask, theta_squared, torch.ones_like(theta_squared)))
    k = torch.where(mask, torch.sin(theta * 0.5) / theta, torch.full_like(theta, 0.5))
    w = torch.where(mask, torch.cos(theta * 0.5), torch.ones_like(theta))
    return torch.cat([w, axis_angle * k], dim=-1)


def _pinholes(gen):
    """(N, 12) pinhole vectors, fx, fy, cx, cy first (the other eight are unused here)."""
    return (100.0 * rand(gen, 3, 12) + 1.0,)


CASES = [
    Case("kornia:pinhole_matrix", "kornia",
         "kornia/kornia kornia/geometry/camera/pinhole.py pinhole_matrix (b4f5a78a)",
         "k = (torch.eye(4) + eps).view(1, 4, 4).repeat(N, 1, 1); k[..., 0, 0:1] = fx ... "
         "with fx, fy, cx, cy from torch.chunk",
         ("factory",), simple(pinhole_matrix), pinhole_matrix_rewrite, _pinholes),
    Case("kornia:_mean_isotropic_scale_normalize", "kornia",
         "kornia/kornia kornia/geometry/calibration/pnp.py _mean_isotropic_scale_normalize; "
         "kornia/core/ops.py eye_like (b4f5a78a)",
         "transform = eye_like(D + 1, points); transform[:, idxs, idxs] = transform[:, idxs, idxs] "
         "* scale[:, None]; transform[:, idxs, D] = transform[:, idxs, D] + ...",
         ("factory", "scatter", "readback"), _normalize_build, _normalize_rewrite,
         lambda g: (randn(g, 2, 5, 3),)),
    Case("kornia:axis_angle_to_quaternion", "kornia",
         "kornia/kornia kornia/geometry/conversions.py axis_angle_to_quaternion (b4f5a78a)",
         "quaternion = torch.zeros(size=(*shape, 4)); quaternion[..., 1:2] = a0 * k; ...; "
         "quaternion[..., 0:1] = w",
         ("factory",), simple(axis_angle_to_quaternion), axis_angle_to_quaternion_rewrite,
         lambda g: (randn(g, 3),)),
]
