"""The server's JPEG reader: what the client's encoder writes, nothing else, bounded."""

from __future__ import annotations

import io

import numpy as np
import pytest
from armory_client import encode_jpeg
from PIL import Image

from armory.policies.jpeg import decode_jpeg


def gradient(height: int, width: int) -> np.ndarray:
    """A smooth uint8 RGB test image (JPEG keeps it close)."""
    rows = np.linspace(0, 255, height, dtype=np.float32)[:, None]
    cols = np.linspace(0, 255, width, dtype=np.float32)[None, :]
    red = (rows + cols) / 2
    return np.stack([red, rows.repeat(width, 1), cols.repeat(height, 0)], -1).astype(np.uint8)


def test_decodes_the_clients_jpeg() -> None:
    """A frame the client encodes comes back with its shape and close values; grayscale
    comes back with one channel."""
    image = gradient(48, 64)
    decoded = decode_jpeg(encode_jpeg(image, quality=95))
    assert decoded.shape == image.shape and decoded.dtype == np.uint8
    error = np.abs(decoded.astype(np.int16) - image.astype(np.int16))
    assert error.mean() < 2.0 and error.max() <= 24
    gray = image[..., 0]
    assert decode_jpeg(encode_jpeg(gray)).shape == (48, 64, 1)


def test_refuses_what_is_not_a_sane_jpeg() -> None:
    """Other formats, truncated data, an image over the pixel limit and non-bytes are
    ValueErrors that say what was wrong."""
    with pytest.raises(ValueError, match="not a decodable JPEG"):
        decode_jpeg(b"not a jpeg")
    png = io.BytesIO()
    Image.fromarray(gradient(4, 4)).save(png, format="PNG")
    with pytest.raises(ValueError, match="not a decodable JPEG"):
        decode_jpeg(png.getvalue())
    with pytest.raises(ValueError, match="exceeds the limit of 100"):
        decode_jpeg(encode_jpeg(gradient(16, 16)), max_pixels=100)
    with pytest.raises(ValueError, match="not a decodable JPEG"):
        decode_jpeg(encode_jpeg(gradient(32, 32))[:100])
    with pytest.raises(ValueError, match="must be bytes"):
        decode_jpeg("text")  # type: ignore[arg-type]
