"""roma 1.8.0: rotation representations and conversions (naver/roma#23 reports its in-place
writes under torch.vmap)."""

from __future__ import annotations

import torch

from funcbwd_lab.studies.libraries.case import randn
from funcbwd_lab.studies.libraries.cases import fn, lib

L = "roma"
MAP = "naver/roma: test/test_mappings.py"
UT = "naver/roma: test/test_utils.py"


def R():
    return lib("roma")


def quat(g):
    q = randn(g, 2, 4)
    return (q / q.norm(dim=-1, keepdim=True),)


def rotmat(g):
    q = torch.linalg.qr(randn(g, 2, 3, 3))[0]
    return (q * torch.linalg.det(q).sign()[..., None, None],)


def rotvec(g):
    return (randn(g, 2, 3),)


CASES = [
    fn("roma.unitquat_to_rotmat", L, "roma.unitquat_to_rotmat(quat)", MAP,
       lambda: R().unitquat_to_rotmat, quat, what="fills torch.empty(...) entry by entry"),
    fn("roma.rotmat_to_unitquat", L, "roma.rotmat_to_unitquat(R)", MAP,
       lambda: R().rotmat_to_unitquat, rotmat, what="writes through masks into a fresh tensor"),
    fn("roma.rotvec_to_rotmat", L, "roma.rotvec_to_rotmat(rotvec)", MAP,
       lambda: R().rotvec_to_rotmat, rotvec),
    fn("roma.rotvec_to_unitquat", L, "roma.rotvec_to_unitquat(rotvec)", MAP,
       lambda: R().rotvec_to_unitquat, rotvec),
    fn("roma.unitquat_to_rotvec", L, "roma.unitquat_to_rotvec(quat)", MAP,
       lambda: R().unitquat_to_rotvec, quat),
    fn("roma.rotmat_to_rotvec", L, "roma.rotmat_to_rotvec(R)", MAP,
       lambda: R().rotmat_to_rotvec, rotmat),
    fn("roma.special_procrustes", L, "roma.special_procrustes(M)",
       "naver/roma: test/test_procrustes_derivatives.py", lambda: R().special_procrustes,
       lambda g: (randn(g, 2, 3, 3),), what="custom autograd.Functions around an SVD"),
    fn("roma.special_gramschmidt", L, "roma.special_gramschmidt(M)", MAP,
       lambda: R().special_gramschmidt, lambda g: (randn(g, 2, 3, 2),)),
    fn("roma.quat_product", L, "roma.quat_product(q1, q2)", UT,
       lambda: R().quat_product, lambda g: (quat(g)[0], quat(g)[0]), batched=(0, 1)),
    fn("roma.rotmat_geodesic_distance", L, "roma.rotmat_geodesic_distance(R1, R2)", UT,
       lambda: R().rotmat_geodesic_distance, lambda g: (rotmat(g)[0], rotmat(g)[0]),
       batched=(0, 1)),
    fn("roma.unitquat_slerp", L, "roma.unitquat_slerp(q0, q1, steps)", UT,
       lambda: lambda a, b: R().unitquat_slerp(a, b, torch.tensor([0.25, 0.5])),
       lambda g: (quat(g)[0], quat(g)[0]), batched=(0, 1)),
    fn("roma.euler_to_rotmat", L, "roma.euler_to_rotmat('xyz', angles)",
       "naver/roma: test/test_euler.py", lambda: lambda a: R().euler_to_rotmat("xyz", a),
       lambda g: (randn(g, 2, 3),)),
]
