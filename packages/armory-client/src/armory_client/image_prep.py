"""Image preparation on the robot: resize to the policy's input size, cast, optionally JPEG.

Two 640x480 camera frames are 1.8 MB per observation; resized to 224x224 they are
300 kB, and as JPEG typically a few tens of kB. The server declares the images it expects in
its metadata frame (docs/protocol.md): every input whose dtype is ``uint8`` and whose
shape is ``[height, width, channels]`` (channels 1 or 3) is an image, and
`image_specs` reads them, so `prepare_images` needs no configuration.

- `resize_with_pad` is openpi's ``image_tools.resize_with_pad`` (itself
  ``tf.image.resize_with_pad`` through PIL) written in numpy: the aspect ratio is
  kept, the image is scaled to fit, and the rest is zero padding, centred (the odd
  pixel goes to the bottom or right). Resampling is PIL's: a separable filter
  stretched over the scale factor when shrinking (antialiased), bilinear (triangle)
  by default, ``area`` (box) on request; width pass first, then height. A uint8
  image is computed in PIL's fixed-point arithmetic, rounded after each pass, so it
  matches PIL bit for bit whenever PIL also resamples width first (e.g. 640x480 to
  224x224); recent Pillow releases run the height pass first for some shapes, and
  there the two differ by at most 1. With pillow installed, a single uint8 image
  (1 or 3 channels) is resized by PIL itself, about 3 times faster.
- `to_uint8` maps floats from a declared range ([0, 1] by default, or [-1, 1]) to
  0..255, rounded and clipped (openpi truncates).
- `encode_jpeg` needs pillow, imported on first use (install the ``jpeg`` extra:
  ``pip install 'armory-client[jpeg]'``).

JPEG on the wire (the server side is not part of this package): a JPEG image is
sent as msgpack bin (Python ``bytes``) under its usual key, and only for a key whose
declared input carries ``"jpeg": true`` in the metadata (a server that says so
decodes it before validation, so the policy sees the same uint8 array). A server
that does not say so never receives JPEG from `prepare_images`.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

__all__ = [
    "DEFAULT_JPEG_QUALITY",
    "ImageSpec",
    "encode_jpeg",
    "image_specs",
    "prepare_images",
    "resize_with_pad",
    "to_uint8",
]

DEFAULT_JPEG_QUALITY = 90
"""JPEG quality used when none is given (1..100; pillow advises at most 95)."""

_JPEG_HINT = "JPEG needs pillow: pip install 'armory-client[jpeg]' (or pillow>=10)"

ResizeMethod = Literal["bilinear", "area"]


# ---- resize -------------------------------------------------------------------


def resize_with_pad(
    image: np.ndarray, height: int, width: int, *, method: ResizeMethod = "bilinear"
) -> np.ndarray:
    """`image` (..., H, W, C) scaled to fit (height, width) with its aspect kept and
    zero padding centred around it; the same dtype. An image already (height, width)
    is returned as is (not copied).

    Raises ValueError for an array of fewer than 3 dimensions, a bool or non-numeric
    dtype, a target size < 1, or an unknown method.
    """
    if not isinstance(image, np.ndarray) or image.ndim < 3:
        shape = getattr(image, "shape", type(image).__name__)
        raise ValueError(f"an image must be an array (..., height, width, channels), got {shape}")
    if image.dtype.kind not in "uif":
        raise ValueError(f"cannot resize an image of dtype {image.dtype}")
    for name, size in [("height", height), ("width", width)]:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"{name} must be an int >= 1, got {size!r}")
    if method not in _FILTERS:
        raise ValueError(f"unknown resize method {method!r}; valid: {', '.join(_FILTERS)}")
    cur_height, cur_width = image.shape[-3:-1]
    if (cur_height, cur_width) == (height, width):
        return image
    if cur_height < 1 or cur_width < 1:
        raise ValueError(f"cannot resize an empty image of shape {image.shape}")
    # openpi's arithmetic, so the sizes agree to the pixel (at least 1 pixel kept).
    ratio = max(cur_width / width, cur_height / height)
    resized_height = max(1, int(cur_height / ratio))
    resized_width = max(1, int(cur_width / ratio))
    resized = _resize_pil(image, resized_height, resized_width, method)
    if resized is None:
        resized = _resize(image, resized_height, resized_width, method)
    out = np.zeros((*image.shape[:-3], height, width, image.shape[-1]), image.dtype)
    top = max(0, int((height - resized_height) / 2))
    left = max(0, int((width - resized_width) / 2))
    out[..., top : top + resized_height, left : left + resized_width, :] = resized
    return out


def _bilinear(x: np.ndarray) -> np.ndarray:
    """PIL's triangle filter (support 1)."""
    return np.maximum(0.0, 1.0 - np.abs(x))


def _box(x: np.ndarray) -> np.ndarray:
    """PIL's box filter (support 1/2): 1 on (-1/2, 1/2]."""
    return ((x > -0.5) & (x <= 0.5)).astype(np.float64)


_FILTERS = {"bilinear": (_bilinear, 1.0), "area": (_box, 0.5)}
_FIXED_BITS = 22
"""Fraction bits of PIL's fixed-point resampling of 8-bit images (32 - 8 - 2)."""
_FIXED_ONE = 1 << _FIXED_BITS


@functools.lru_cache(maxsize=64)
def _taps(in_size: int, out_size: int, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Resampling as PIL computes it: for each output pixel, the input pixels it reads
    (out_size, num_taps) and their weights (out_size, num_taps), summing to 1."""
    kernel, support = _FILTERS[method]
    scale = in_size / out_size
    filter_scale = max(scale, 1.0)
    support *= filter_scale
    centers = (np.arange(out_size) + 0.5) * scale
    # PIL's window: [int(center - support + 0.5), int(center + support + 0.5)), clipped.
    lo = np.maximum(np.trunc(centers - support + 0.5), 0).astype(np.int64)
    hi = np.minimum(np.trunc(centers + support + 0.5), in_size).astype(np.int64)
    num_taps = max(1, int((hi - lo).max()))
    pixels = lo[:, None] + np.arange(num_taps)
    weights = kernel((pixels + 0.5 - centers[:, None]) / filter_scale) * (pixels < hi[:, None])
    totals = weights.sum(axis=1, keepdims=True)
    weights /= np.where(totals == 0, 1.0, totals)
    pixels = np.minimum(pixels, in_size - 1)
    pixels.setflags(write=False)
    weights.setflags(write=False)
    return pixels, weights


def _resize(image: np.ndarray, height: int, width: int, method: str) -> np.ndarray:
    """(..., H, W, C) to (..., height, width, C): the width pass, then the height pass.

    A uint8 image is computed as PIL computes it: weights in 22-bit fixed point,
    integer sums, rounded to uint8 after each pass. Other integer images are rounded
    and clipped after each pass, float images are not rounded.
    """
    fixed_point = image.dtype == np.uint8
    work = image if fixed_point else image.astype(np.float64 if image.itemsize > 2 else np.float32)
    for axis, size in [(-2, width), (-3, height)]:
        if size == image.shape[axis]:
            continue
        pixels, weights = _taps(image.shape[axis], size, method)
        if axis == -2:
            gathered, spec = work[..., pixels, :], "...otc,ot->...oc"
        else:
            gathered, spec = work[..., pixels, :, :], "...htoc,ht->...hoc"
        if fixed_point:
            # PIL: coefficients rounded away from zero; sums fit int32 (255 * 2**22 < 2**31).
            half = np.where(weights < 0, -0.5, 0.5)
            coefficients = np.trunc(weights * _FIXED_ONE + half).astype(np.int32)
            sums = np.einsum(spec, gathered.astype(np.int32), coefficients)
            work = np.clip((sums + _FIXED_ONE // 2) >> _FIXED_BITS, 0, 255).astype(np.uint8)
        else:
            work = _round_like(np.einsum(spec, gathered, weights.astype(work.dtype)), image.dtype)
    return work.astype(image.dtype, copy=False)


def _resize_pil(image: np.ndarray, height: int, width: int, method: str) -> np.ndarray | None:
    """PIL's own resize of one uint8 (H, W, 1 or 3) image when pillow is installed (about
    3x faster than the numpy path, and the reference it follows); None otherwise."""
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] not in (1, 3):
        return None
    try:
        from PIL import Image
    except ImportError:
        return None
    resample = Image.Resampling.BILINEAR if method == "bilinear" else Image.Resampling.BOX
    pil = Image.fromarray(np.ascontiguousarray(image[..., 0] if image.shape[-1] == 1 else image))
    out = np.asarray(pil.resize((width, height), resample=resample))
    return out[..., None] if image.shape[-1] == 1 else out


def _round_like(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """For an integer dtype: round half up and clip to its range; floats unchanged."""
    if dtype.kind not in "ui":
        return values
    info = np.iinfo(dtype)
    return np.clip(np.floor(values + 0.5), info.min, info.max)


# ---- cast ---------------------------------------------------------------------


def to_uint8(image: np.ndarray, *, value_range: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """`image` as uint8. uint8 is returned as is; floats are mapped linearly from
    `value_range` ((0, 1) by default; (-1, 1) for images normalised that way) to
    0..255, rounded and clipped; other integers are clipped to 0..255; bools become 0
    or 255.

    Raises ValueError for a float image holding NaN, a bad range or a dtype that is
    not a number.
    """
    image = np.asarray(image)
    if image.dtype == np.uint8:
        return image
    if image.dtype == np.bool_:
        return np.where(image, np.uint8(255), np.uint8(0))
    if image.dtype.kind in "ui":
        return np.clip(image, 0, 255).astype(np.uint8)
    if image.dtype.kind != "f":
        raise ValueError(f"cannot cast an image of dtype {image.dtype} to uint8")
    low, high = value_range
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"value_range must be finite, low < high, got {value_range}")
    if np.isnan(image).any():
        raise ValueError("image holds NaN: cannot cast it to uint8")
    scaled = (image.astype(np.float32) - np.float32(low)) * np.float32(255.0 / (high - low))
    return np.clip(np.floor(scaled + 0.5), 0, 255).astype(np.uint8)


# ---- JPEG ---------------------------------------------------------------------


def _pil_image() -> Any:
    """The PIL.Image module, imported on first use."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError(_JPEG_HINT) from exc
    return Image


def _check_quality(quality: object) -> None:
    """A ValueError unless `quality` is an int in 1..100."""
    if not isinstance(quality, int) or isinstance(quality, bool) or not 1 <= quality <= 100:
        raise ValueError(f"JPEG quality must be an int in 1..100, got {quality!r}")


def encode_jpeg(image: np.ndarray, quality: int = DEFAULT_JPEG_QUALITY) -> bytes:
    """JPEG bytes of a uint8 image (H, W, 3) RGB or (H, W) / (H, W, 1) grayscale.

    Raises ImportError naming the ``jpeg`` extra when pillow is missing, ValueError
    for another dtype or shape, or a quality outside 1..100.
    """
    _check_quality(quality)
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise ValueError(f"JPEG needs a uint8 image, got {image.dtype} (see to_uint8)")
    if image.ndim == 3 and image.shape[-1] == 1:
        image = image[..., 0]
    if not (image.ndim == 2 or (image.ndim == 3 and image.shape[-1] == 3)) or 0 in image.shape:
        raise ValueError(f"JPEG needs an image (H, W, 3) or (H, W), got {image.shape}")
    pil = _pil_image().fromarray(np.ascontiguousarray(image))
    buffer = io.BytesIO()
    pil.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


# ---- observations ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    """One image input the server declares."""

    height: int | None
    """Rows the policy expects; None: any (the image is not resized)."""
    width: int | None
    """Columns the policy expects; None: any."""
    channels: int | None = 3
    """1 (grayscale) or 3 (RGB); None: any."""
    jpeg: bool = False
    """The server decodes JPEG for this key (its declared input says ``"jpeg": true``)."""


def image_specs(metadata: Mapping[str, Any]) -> dict[str, ImageSpec]:
    """The image inputs declared in a server's metadata frame: every input of dtype
    ``uint8`` with a shape ``[height, width, channels]``, channels 1, 3 or null."""
    specs: dict[str, ImageSpec] = {}
    inputs = metadata.get("inputs")
    if not isinstance(inputs, Mapping):
        return specs
    for key, declared in inputs.items():
        if not isinstance(declared, Mapping) or declared.get("dtype") != "uint8":
            continue
        shape = declared.get("shape")
        if not isinstance(shape, list | tuple) or len(shape) != 3:
            continue
        height, width, channels = shape
        if channels not in (1, 3, None) or not all(
            d is None or (isinstance(d, int) and d >= 1) for d in (height, width)
        ):
            continue
        specs[key] = ImageSpec(height, width, channels, jpeg=declared.get("jpeg") is True)
    return specs


def prepare_images(
    obs: Mapping[str, Any],
    specs: Mapping[str, ImageSpec],
    *,
    jpeg_quality: int | None = None,
    value_range: tuple[float, float] = (0.0, 1.0),
    method: ResizeMethod = "bilinear",
) -> dict[str, Any]:
    """A new observation map whose declared images are cast to uint8 (`to_uint8`, from
    `value_range` for floats), then resized with padding to the declared size, then,
    when `jpeg_quality` is given and the server accepts JPEG for the key, encoded.

    Keys not in `specs`, missing images and images already given as bytes are passed
    on as they are; `obs` itself is not changed. Raises ValueError naming the key of
    an image that is not (H, W, C) (or (H, W) for a grayscale input) or whose
    channels differ from the declared ones.
    """
    if jpeg_quality is not None:
        _check_quality(jpeg_quality)
    out = dict(obs)
    for key, spec in specs.items():
        value = out.get(key)
        if value is None or isinstance(value, bytes | bytearray):
            continue
        image = np.asarray(value)
        if image.ndim == 2 and spec.channels == 1:
            image = image[..., None]
        if image.ndim != 3 or (spec.channels is not None and image.shape[-1] != spec.channels):
            expected = f"(H, W, {spec.channels if spec.channels is not None else 'C'})"
            raise ValueError(f"image {key!r}: expected {expected}, got shape {image.shape}")
        try:
            image = to_uint8(image, value_range=value_range)
            if spec.height is not None and spec.width is not None:
                image = resize_with_pad(image, spec.height, spec.width, method=method)
        except ValueError as exc:
            raise ValueError(f"image {key!r}: {exc}") from None
        encode = jpeg_quality is not None and spec.jpeg
        out[key] = encode_jpeg(image, jpeg_quality) if encode else image
    return out
