"""kornia 0.9.0: color, enhance, filters, geometry, losses."""

from __future__ import annotations

import torch

from funcbwd_lab.studies.libraries.case import rand, randn
from funcbwd_lab.studies.libraries.cases import fn, lib

L = "kornia"


def K():
    return lib("kornia")


def img(g):
    return rand(g, 3, 6, 6)


def T(path: str) -> str:
    return f"kornia/kornia: tests/{path}"


CASES = [
    fn("kornia.color.rgb_to_hsv", L, "kornia.color.rgb_to_hsv(image)", T("color/test_hsv.py"),
       lambda: K().color.rgb_to_hsv, lambda g: (img(g),)),
    fn("kornia.color.hsv_to_rgb", L, "kornia.color.hsv_to_rgb(image)", T("color/test_hsv.py"),
       lambda: K().color.hsv_to_rgb, lambda g: (img(g),)),
    fn("kornia.color.rgb_to_hls", L, "kornia.color.rgb_to_hls(image)", T("color/test_hls.py"),
       lambda: K().color.rgb_to_hls, lambda g: (img(g),)),
    fn("kornia.color.hls_to_rgb", L, "kornia.color.hls_to_rgb(image)", T("color/test_hls.py"),
       lambda: K().color.hls_to_rgb, lambda g: (img(g),)),
    fn("kornia.color.rgb_to_lab", L, "kornia.color.rgb_to_lab(image)", T("color/test_lab.py"),
       lambda: K().color.rgb_to_lab, lambda g: (img(g),)),
    fn("kornia.color.rgb_to_luv", L, "kornia.color.rgb_to_luv(image)", T("color/test_luv.py"),
       lambda: K().color.rgb_to_luv, lambda g: (img(g),)),
    fn("kornia.color.rgb_to_ycbcr", L, "kornia.color.rgb_to_ycbcr(image)",
       T("color/test_ycbcr.py"), lambda: K().color.rgb_to_ycbcr, lambda g: (img(g),),
       group="control"),
    fn("kornia.color.rgb_to_grayscale", L, "kornia.color.rgb_to_grayscale(image)",
       T("color/test_gray.py"), lambda: K().color.rgb_to_grayscale, lambda g: (img(g),),
       group="control"),
    fn("kornia.enhance.adjust_hue", L, "kornia.enhance.adjust_hue(image, 0.5)",
       T("enhance/test_adjust.py"), lambda: lambda x: K().enhance.adjust_hue(x, 0.5),
       lambda g: (img(g),)),
    fn("kornia.enhance.adjust_saturation", L, "kornia.enhance.adjust_saturation(image, 2.0)",
       T("enhance/test_adjust.py"), lambda: lambda x: K().enhance.adjust_saturation(x, 2.0),
       lambda g: (img(g),)),
    fn("kornia.enhance.adjust_gamma", L, "kornia.enhance.adjust_gamma(image, 2.0)",
       T("enhance/test_adjust.py"), lambda: lambda x: K().enhance.adjust_gamma(x, 2.0),
       lambda g: (img(g) + 0.1,), group="control"),
    fn("kornia.enhance.equalize_clahe", L, "equalize_clahe(image, grid_size=(2, 2))",
       T("enhance/test_equalization.py"),
       lambda: lambda x: K().enhance.equalize_clahe(x, grid_size=(2, 2)),
       lambda g: (rand(g, 1, 8, 8),), what="checks its input with torch._assert_async"),
    fn("kornia.enhance.normalize", L, "kornia.enhance.normalize(image, mean, std)",
       T("enhance/test_normalize.py"),
       lambda: lambda x: K().enhance.normalize(x[None], torch.tensor([0.5, 0.4, 0.3]),
                                               torch.tensor([0.2, 0.3, 0.4]))[0],
       lambda g: (img(g),), group="control"),
    fn("kornia.filters.gaussian_blur2d", L, "gaussian_blur2d(image, (3, 3), (1.5, 1.5))",
       T("filters/test_gaussian.py"),
       lambda: lambda x: K().filters.gaussian_blur2d(x[None], (3, 3), (1.5, 1.5))[0],
       lambda g: (img(g),), group="control"),
    fn("kornia.filters.sobel", L, "kornia.filters.sobel(image)", T("filters/test_sobel.py"),
       lambda: lambda x: K().filters.sobel(x[None])[0], lambda g: (img(g),)),
    fn("kornia.filters.laplacian", L, "kornia.filters.laplacian(image, 3)",
       T("filters/test_laplacian.py"), lambda: lambda x: K().filters.laplacian(x[None], 3)[0],
       lambda g: (img(g),), group="control"),
    fn("kornia.filters.median_blur", L, "kornia.filters.median_blur(image, (3, 3))",
       T("filters/test_median.py"), lambda: lambda x: K().filters.median_blur(x[None], (3, 3))[0],
       lambda g: (img(g),), group="control"),
    fn("kornia.filters.canny", L, "kornia.filters.canny(image)[0]", T("filters/test_canny.py"),
       lambda: lambda x: K().filters.canny(x[None])[0][0], lambda g: (img(g),)),
    fn("kornia.geometry.conversions.axis_angle_to_rotation_matrix", L,
       "axis_angle_to_rotation_matrix(axis_angle)", T("geometry/test_conversions.py"),
       lambda: K().geometry.conversions.axis_angle_to_rotation_matrix, lambda g: (randn(g, 2, 3),),
       what="kornia#2346 removed one in-place write; masks remain"),
    fn("kornia.geometry.conversions.rotation_matrix_to_quaternion", L,
       "rotation_matrix_to_quaternion(rotation_matrix)", T("geometry/test_conversions.py"),
       lambda: K().geometry.conversions.rotation_matrix_to_quaternion,
       lambda g: (torch.linalg.qr(randn(g, 2, 3, 3))[0],)),
    fn("kornia.geometry.conversions.quaternion_to_axis_angle", L,
       "quaternion_to_axis_angle(quaternion)", T("geometry/test_conversions.py"),
       lambda: K().geometry.conversions.quaternion_to_axis_angle, lambda g: (randn(g, 2, 4),)),
    fn("kornia.geometry.conversions.axis_angle_to_quaternion", L,
       "axis_angle_to_quaternion(axis_angle)", T("geometry/test_conversions.py"),
       lambda: K().geometry.conversions.axis_angle_to_quaternion, lambda g: (randn(g, 2, 3),)),
    fn("kornia.geometry.conversions.convert_points_from_homogeneous", L,
       "convert_points_from_homogeneous(points)", T("geometry/test_conversions.py"),
       lambda: K().geometry.conversions.convert_points_from_homogeneous,
       lambda g: (randn(g, 4, 3),), group="control"),
    fn("kornia.geometry.transform.rotate", L, "kornia.geometry.transform.rotate(image, angle)",
       T("geometry/transform/test_affine.py"),
       lambda: lambda x, a: K().geometry.transform.rotate(x[None], a[None])[0],
       lambda g: (img(g), rand(g) * 90), batched=(0, 1)),
    fn("kornia.losses.ssim_loss", L, "kornia.losses.ssim_loss(img1, img2, 3)",
       T("losses/test_ssim.py"),
       lambda: lambda a, b: K().losses.ssim_loss(a[None], b[None], 3),
       lambda g: (img(g), img(g)), batched=(0, 1), group="control"),
    fn("kornia.losses.total_variation", L, "kornia.losses.total_variation(image)",
       T("losses/test_total_variation.py"), lambda: K().losses.total_variation,
       lambda g: (img(g),), group="control"),
    fn("kornia.morphology.dilation", L, "kornia.morphology.dilation(image, kernel)",
       T("morphology/test_dilation.py"),
       lambda: lambda x: K().morphology.dilation(x[None], torch.ones(3, 3))[0],
       lambda g: (img(g),)),
    fn("kornia.feature.harris_response", L, "kornia.feature.harris_response(image)",
       T("feature/test_responses.py"), lambda: lambda x: K().feature.harris_response(x[None])[0],
       lambda g: (img(g),)),
]
