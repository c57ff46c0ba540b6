"""JPEG camera frames on the server: decoded before validation, bounded before decoding.

A robot may send an image input as JPEG bytes when the server's metadata says the
input takes them (``"jpeg": true``; the client encodes with
``armory_client.image_prep``). Pillow is imported on first use.
"""

from __future__ import annotations

import io

import numpy as np

__all__ = ["DEFAULT_MAX_PIXELS", "decode_jpeg"]

DEFAULT_MAX_PIXELS = 50_000_000
"""Largest image decoded when the declared input gives no size."""


def decode_jpeg(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """The uint8 image (H, W, 3), or (H, W, 1) for a grayscale JPEG, in `data`.

    Only JPEG is read, and an image of more than `max_pixels` pixels is refused before
    it is decoded. Raises ValueError for bytes that are not a JPEG image of a sane size.
    """
    from PIL import Image

    if not isinstance(data, bytes | bytearray | memoryview):
        raise ValueError(f"JPEG data must be bytes, got {type(data).__name__}")
    try:
        with Image.open(io.BytesIO(data), formats=["JPEG"]) as pil:
            width, height = pil.size
            if width * height > max_pixels:
                raise ValueError(
                    f"JPEG image of {width}x{height} pixels exceeds the limit of {max_pixels}"
                )
            if pil.mode not in ("RGB", "L"):
                pil = pil.convert("RGB")
            array = np.asarray(pil, dtype=np.uint8)
    except ValueError:
        raise
    except Exception as exc:  # PIL raises UnidentifiedImageError, OSError, SyntaxError...
        raise ValueError(f"not a decodable JPEG image ({type(exc).__name__}: {exc})") from None
    return array[..., None] if array.ndim == 2 else array
