"""RoMa (naver/roma): in-place code in ``roma/mappings.py``, the rotation-representation mappings.

Each case re-creates one upstream function, trimmed (docstrings cut;
``roma.internal.flatten_batch_dims`` / ``unflatten_batch_dims`` inlined for the (B, ...) inputs
used here, where they are a no-op); the in-place lines are kept exactly as written upstream.
Commits: HEAD 8ce9ed98f6bd3a137be144a4588dbc0e350cff52 (2026-08-20) for
``rotmat_to_unitquat`` and ``procrustes_naive``; the first GitHub release,
f61ff7b903b80df70ad463b4814f80233111e5a8 (2021-06-29), for ``unitquat_to_rotvec`` (its ``scale`` mask writes became ``inv_sinc`` in v1.5.5,
1af39b98, 2026-02-06; its sign flip ``quat[quat[:, 3] < 0] *= -1`` became arithmetic in 4faa9af6,
2026-02-09).
"""

from __future__ import annotations

import torch

from funcbwd_lab.studies.yourcode.case import Case, randn, simple


# naver/roma roma/mappings.py rotmat_to_unitquat (HEAD 8ce9ed98)
def rotmat_to_unitquat(R):
    matrix = R  # roma.internal.flatten_batch_dims(R, end_dim=-3) on a (B, 3, 3) input
    num_rotations, D1, D2 = matrix.shape
    assert (D1, D2) == (3, 3), "Input should be a Bx3x3 tensor."

    # Adapted from SciPy:
    # https://github.com/scipy/scipy/blob/7cb3d751756907238996502b92709dc45e1c6596/scipy/spatial/transform/rotation.py#L480

    decision_matrix = torch.empty((num_rotations, 4), dtype=matrix.dtype, device=matrix.device)
    decision_matrix[:, :3] = matrix.diagonal(dim1=1, dim2=2)
    decision_matrix[:, -1] = decision_matrix[:, :3].sum(axis=1)
    choices = decision_matrix.argmax(axis=1)

    quat = torch.empty((num_rotations, 4), dtype=matrix.dtype, device=matrix.device)

    ind = torch.nonzero(choices != 3, as_tuple=True)[0]
    i = choices[ind]
    j = (i + 1) % 3
    k = (j + 1) % 3

    quat[ind, i] = 1 - decision_matrix[ind, -1] + 2 * matrix[ind, i, i]
    quat[ind, j] = matrix[ind, j, i] + matrix[ind, i, j]
    quat[ind, k] = matrix[ind, k, i] + matrix[ind, i, k]
    quat[ind, 3] = matrix[ind, k, j] - matrix[ind, j, k]

    ind = torch.nonzero(choices == 3, as_tuple=True)[0]
    quat[ind, 0] = matrix[ind, 2, 1] - matrix[ind, 1, 2]
    quat[ind, 1] = matrix[ind, 0, 2] - matrix[ind, 2, 0]
    quat[ind, 2] = matrix[ind, 1, 0] - matrix[ind, 0, 1]
    quat[ind, 3] = 1 + decision_matrix[ind, -1]

    quat = quat / torch.norm(quat, dim=1)[:, None]
    return quat


def rotmat_to_unitquat_rewrite(R):
    m = R
    diag = m.diagonal(dim1=1, dim2=2)
    trace = diag.sum(-1)
    decision = torch.cat([diag, trace[:, None]], dim=-1)
    choices = decision.argmax(dim=1)
    candidates = []
    for i in range(3):  # the quaternion SciPy builds when the i-th diagonal entry is largest
        j, k = (i + 1) % 3, (i + 2) % 3
        q = [None] * 4
        q[i] = 1 - trace + 2 * m[:, i, i]
        q[j] = m[:, j, i] + m[:, i, j]
        q[k] = m[:, k, i] + m[:, i, k]
        q[3] = m[:, k, j] - m[:, j, k]
        candidates.append(torch.stack(q, dim=-1))
    candidates.append(torch.stack([m[:, 2, 1] - m[:, 1, 2], m[:, 0, 2] - m[:, 2, 0],
                                   m[:, 1, 0] - m[:, 0, 1], 1 + trace], dim=-1))
    candidates = torch.stack(candidates, dim=1)  # (B, 4 choices, 4)
    quat = torch.gather(candidates, 1, choices[:, None, None].expand(-1, 1, 4))[:, 0]
    return quat / torch.norm(quat, dim=1)[:, None]


# naver/roma roma/mappings.py procrustes_naive (HEAD 8ce9ed98), called as special_procrustes_naive
# (force_rotation=True, return_singular_values=False)
def procrustes_naive(M, force_rotation: bool = False, return_singular_values: bool = False):
    # roma.internal.flatten_batch_dims(M, -3) on a (B, D, D) input: a no-op
    assert M.dim() == 3 and M.shape[1] == M.shape[2], "Input should be a BxDxD batch of matrices."
    U, D, Vt = torch.linalg.svd(M)
    # D is sorted in descending order
    if force_rotation:
        # We flip the smallest singular value to ensure getting a rotation matrix
        with torch.no_grad():
            flip = torch.det(U) * torch.det(Vt) < 0
        # This is needed to avoid a runtime error "one of the variables needed for gradient computation has been modified by an inplace operation"
        SVt = Vt.clone() if torch.is_grad_enabled() else Vt
        SVt[flip, -1, :] *= -1
        R = U @ SVt
    else:
        R = U @ Vt
    if not return_singular_values:
        return R
    else:
        DS = D.clone()
        if force_rotation:
            DS[flip, -1] *= -1
        del D
        return R, DS


def special_procrustes_naive(M, return_singular_values: bool = False):
    return procrustes_naive(M, force_rotation=True, return_singular_values=return_singular_values)


def special_procrustes_naive_rewrite(M):
    U, D, Vt = torch.linalg.svd(M)
    flip = (torch.det(U) * torch.det(Vt) < 0).detach()
    sign = torch.where(flip, -torch.ones_like(D[:, 0]), torch.ones_like(D[:, 0]))
    SVt = torch.cat([Vt[:, :-1, :], Vt[:, -1:, :] * sign[:, None, None]], dim=1)
    return U @ SVt


# naver/roma roma/mappings.py unitquat_to_rotvec (first GitHub release f61ff7b9, 2021-06-29)
def unitquat_to_rotvec(quat):
    # roma.internal.flatten_batch_dims(quat, end_dim=-2) on a (B, 4) input: a no-op
    # We perform a copy to support auto-differentiation.
    quat = quat.clone()
    # Adapted from SciPy:
    # https://github.com/scipy/scipy/blob/adc4f4f7bab120ccfab9383aba272954a0a12fb0/scipy/spatial/transform/rotation.py#L1006-L1073
    # Enforce w > 0 to ensure 0 <= angle <= pi
    quat[quat[:, 3] < 0] *= -1
    angle = 2 * torch.atan2(torch.norm(quat[:, :3], dim=1), quat[:, 3])
    small_angle = (angle <= 1e-3)
    large_angle = ~small_angle

    num_rotations = len(quat)
    scale = torch.empty(num_rotations, device=quat.device)
    scale[small_angle] = (2 + angle[small_angle] ** 2 / 12 +
                          7 * angle[small_angle] ** 4 / 2880)
    scale[large_angle] = (angle[large_angle] /
                          torch.sin(angle[large_angle] / 2))

    rotvec = scale[:, None] * quat[:, :3]
    return rotvec


def unitquat_to_rotvec_rewrite(quat):
    quat = torch.where(quat[:, 3:] < 0, -quat, quat)
    angle = 2 * torch.atan2(torch.norm(quat[:, :3], dim=1), quat[:, 3])
    small_angle = angle <= 1e-3
    safe = torch.where(small_angle, torch.ones_like(angle), angle)
    scale = torch.where(small_angle, 2 + angle ** 2 / 12 + 7 * angle ** 4 / 2880,
                        safe / torch.sin(safe / 2))
    return scale[:, None] * quat[:, :3]


def _rotmats(gen, n):
    """``n`` random rotation matrices (SciPy's quaternion convention does not matter here)."""
    q = randn(gen, n, 4)
    q = q / q.norm(dim=-1, keepdim=True)
    x, y, z, w = q.unbind(-1)
    return torch.stack((1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
                        2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
                        2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)),
                       -1).reshape(n, 3, 3)


def _unitquats(gen):
    q = randn(gen, 5, 4)
    return (q / q.norm(dim=-1, keepdim=True),)


_MAP = "naver/roma roma/mappings.py"

CASES = [
    Case("roma:rotmat_to_unitquat", "roma", f"{_MAP} rotmat_to_unitquat (8ce9ed98)",
         "torch.empty decision matrix and quaternion filled by slices and by "
         "quat[ind, i] = ... with ind = nonzero(choices != 3)",
         ("factory", "scatter"), simple(rotmat_to_unitquat), rotmat_to_unitquat_rewrite,
         lambda g: (_rotmats(g, 6),)),
    Case("roma:special_procrustes_naive", "roma",
         f"{_MAP} procrustes_naive via special_procrustes_naive (8ce9ed98)",
         "SVt = Vt.clone(); SVt[flip, -1, :] *= -1 with flip from det(U) det(Vt) < 0 under no_grad",
         ("like", "mask", "arith"), simple(special_procrustes_naive),
         special_procrustes_naive_rewrite, lambda g: (randn(g, 4, 3, 3),)),
    Case("roma:unitquat_to_rotvec", "roma",
         f"{_MAP} unitquat_to_rotvec (first GitHub release f61ff7b9, 2021)",
         "quat = quat.clone(); quat[quat[:, 3] < 0] *= -1; scale = torch.empty(B); "
         "scale[small_angle] = ...; scale[large_angle] = ...",
         ("like", "factory", "mask", "arith"), simple(unitquat_to_rotvec),
         unitquat_to_rotvec_rewrite, _unitquats),
]
