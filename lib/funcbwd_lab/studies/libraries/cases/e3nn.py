"""e3nn 0.6.0: math, o3 and nn of E(3)-equivariant networks."""

from __future__ import annotations

import torch

from funcbwd_lab.studies.libraries.case import rand, randn
from funcbwd_lab.studies.libraries.cases import fn, lib, module_fn

L = "e3nn"


def E(sub: str):
    return lib(f"e3nn.{sub}")


def T(path: str) -> str:
    return f"e3nn/e3nn: tests/{path}"


IRREPS = "2x0e + 1x1o"


def feats(g):
    return (randn(g, 5),)  # 2x0e + 1x1o: 2 + 3


def rotation(g):
    q = torch.linalg.qr(randn(g, 3, 3))[0]
    return q * torch.linalg.det(q).sign()


CASES = [
    fn("e3nn.math.soft_one_hot_linspace(cutoff=True)", L,
       "soft_one_hot_linspace(x, 0.0, 1.0, 5, basis='smooth_finite', cutoff=True)",
       T("math/soft_one_hot_test.py"),
       lambda: lambda x: E("math").soft_one_hot_linspace(x, 0.0, 1.0, 5, basis="smooth_finite",
                                                         cutoff=True),
       lambda g: (rand(g, 4),), what="calls soft_unit_step, an old-style autograd.Function"),
    fn("e3nn.math.soft_one_hot_linspace(gaussian)", L,
       "soft_one_hot_linspace(x, 0.0, 1.0, 5, basis='gaussian', cutoff=False)",
       T("math/soft_one_hot_test.py"),
       lambda: lambda x: E("math").soft_one_hot_linspace(x, 0.0, 1.0, 5, basis="gaussian",
                                                         cutoff=False),
       lambda g: (rand(g, 4),), group="control"),
    fn("e3nn.math.soft_unit_step", L, "soft_unit_step(x)", T("math/soft_unit_step_test.py"),
       lambda: E("math").soft_unit_step, lambda g: (randn(g, 4),),
       what="an old-style autograd.Function"),
    fn("e3nn.o3.spherical_harmonics", L, "spherical_harmonics([0, 1, 2], x, normalize=True)",
       T("o3/cartesian_spherical_harmonics_test.py"),
       lambda: lambda x: E("o3").spherical_harmonics([0, 1, 2], x, normalize=True),
       lambda g: (randn(g, 2, 3),), group="control"),
    fn("e3nn.o3.angles_to_matrix", L, "angles_to_matrix(alpha, beta, gamma)",
       T("o3/rotation_test.py"), lambda: lambda a: E("o3").angles_to_matrix(a[0], a[1], a[2]),
       lambda g: (randn(g, 3),), group="control"),
    fn("e3nn.o3.matrix_to_angles", L, "matrix_to_angles(R)", T("o3/rotation_test.py"),
       lambda: lambda r: torch.stack(E("o3").matrix_to_angles(r)),
       lambda g: (rotation(g),)),
    module_fn("e3nn.o3.Linear", L, "o3.Linear('2x0e + 1x1o', '1x0e + 2x1o')(x)",
              T("o3/linear_test.py"), lambda: E("o3").Linear(IRREPS, "1x0e + 2x1o"), feats,
              group="control"),
    module_fn("e3nn.o3.FullyConnectedTensorProduct", L,
              "o3.FullyConnectedTensorProduct(irreps, irreps, '1x0e + 1x1o')(x, y)",
              T("o3/tensor_product_test.py"),
              lambda: E("o3").FullyConnectedTensorProduct(IRREPS, IRREPS, "1x0e + 1x1o"),
              lambda g: (randn(g, 5), randn(g, 5)), batched=(0, 1)),
    module_fn("e3nn.o3.Norm", L, "o3.Norm('2x0e + 1x1o')(x)", T("o3/norm_test.py"),
              lambda: E("o3").Norm(IRREPS), feats),
    module_fn("e3nn.nn.Gate", L, "nn.Gate('1x0e', [tanh], '1x0e', [tanh], '1x1o')(x)",
              T("nn/gate_test.py"),
              lambda: E("nn").Gate("1x0e", [torch.tanh], "1x0e", [torch.tanh], "1x1o"), feats),
    module_fn("e3nn.nn.BatchNorm", L, "nn.BatchNorm('2x0e + 1x1o')(x) (train mode)",
              T("nn/batchnorm_test.py"), lambda: E("nn").BatchNorm(IRREPS).train(),
              lambda g: (randn(g, 4, 5),),
              what="running statistics written in train mode"),
    module_fn("e3nn.nn.FullyConnectedNet", L, "nn.FullyConnectedNet([3, 8, 2], torch.relu)(x)",
              T("nn/fc_test.py"), lambda: E("nn").FullyConnectedNet([3, 8, 2], torch.relu),
              lambda g: (randn(g, 3),)),
    module_fn("e3nn.nn.NormActivation", L, "nn.NormActivation('2x0e + 1x1o', torch.sigmoid)(x)",
              T("nn/normact_test.py"), lambda: E("nn").NormActivation(IRREPS, torch.sigmoid),
              feats),
]
