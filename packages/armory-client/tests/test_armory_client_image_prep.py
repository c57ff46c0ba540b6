"""Image preparation: resize_with_pad (exact small cases, PIL as reference), casts, JPEG."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from armory_client import (
    ImageSpec,
    encode_jpeg,
    image_prep,
    image_specs,
    prepare_images,
    resize_with_pad,
    to_uint8,
)

try:
    from PIL import Image
except ImportError:  # pragma: no cover - dev installs pillow
    Image = None

needs_pil = pytest.mark.skipif(
    Image is None, reason="pillow is not installed (pip install 'armory-client[dev]')"
)


def decode_jpeg(data: bytes) -> np.ndarray:
    """The uint8 (H, W, channels) image in JPEG bytes, read by pillow (the server decodes
    with its own reader)."""
    with Image.open(io.BytesIO(data), formats=["JPEG"]) as pil:
        array = np.asarray(pil, dtype=np.uint8)
    return array[..., None] if array.ndim == 2 else array


METADATA = {
    "policy": "mock",
    "inputs": {
        "observation/image": {"shape": [224, 224, 3], "dtype": "uint8", "required": True},
        "observation/wrist_image": {
            "shape": [224, 224, 3],
            "dtype": "uint8",
            "required": True,
            "jpeg": True,
        },
        "observation/depth": {"shape": [64, 48, 1], "dtype": "uint8", "required": False},
        "observation/any_size": {"shape": [None, None, 3], "dtype": "uint8", "required": False},
        "observation/state": {"shape": [8], "dtype": "float32", "required": True},
        "observation/features": {"shape": [4, 4, 3], "dtype": "float32", "required": True},
        "observation/video": {"shape": [2, 4, 4, 3], "dtype": "uint8", "required": True},
        "prompt": {"shape": None, "dtype": "str", "required": False},
    },
}


def pil_resize_with_pad(image: np.ndarray, height: int, width: int, resample: int) -> np.ndarray:
    """openpi's image_tools.resize_with_pad for one uint8 image, written against PIL."""
    pil = Image.fromarray(image)
    cur_width, cur_height = pil.size
    ratio = max(cur_width / width, cur_height / height)
    resized_height, resized_width = int(cur_height / ratio), int(cur_width / ratio)
    resized = pil.resize((resized_width, resized_height), resample=resample)
    canvas = Image.new(resized.mode, (width, height), 0)
    top = max(0, int((height - resized_height) / 2))
    left = max(0, int((width - resized_width) / 2))
    canvas.paste(resized, (left, top))
    return np.asarray(canvas)


def gradient(height: int, width: int) -> np.ndarray:
    """A smooth uint8 RGB test picture (JPEG-friendly)."""
    y, x = np.mgrid[0:height, 0:width]
    return np.stack(
        [x * 255 // max(1, width - 1), y * 255 // max(1, height - 1), (x + y) % 256], axis=-1
    ).astype(np.uint8)


# ---- resize_with_pad ---------------------------------------------------------------


@needs_pil
@pytest.mark.parametrize("method", ["bilinear", "area"])
def test_numpy_path_matches_pil_path(method: str) -> None:
    """Without pillow the numpy resampling gives what PIL gives (to 1 level, where Pillow
    runs the height pass first): robots with and without pillow send the same images."""
    rng = np.random.default_rng(3)
    image = rng.integers(0, 256, size=(480, 640, 3), dtype=np.uint8)
    for height, width in [(224, 224), (96, 128), (300, 200)]:
        fast = image_prep._resize_pil(image, height, width, method)
        slow = image_prep._resize(image, height, width, method)
        assert fast is not None and fast.shape == slow.shape == (height, width, 3)
        assert np.abs(fast.astype(int) - slow.astype(int)).max() <= 1


def test_same_size_is_returned_as_is() -> None:
    """An image already at the target size is the same object, not a copy."""
    image = np.zeros((4, 6, 3), np.uint8)
    assert resize_with_pad(image, 4, 6) is image


def test_exact_2x_downscale_area_is_block_mean() -> None:
    """Area resampling by exactly 2 averages each 2x2 block."""
    image = np.arange(16, dtype=np.float64).reshape(4, 4, 1)
    out = resize_with_pad(image, 2, 2, method="area")
    np.testing.assert_array_equal(out[..., 0], [[2.5, 4.5], [10.5, 12.5]])
    # uint8 rounds half up: 2.5 -> 3.
    out8 = resize_with_pad(image.astype(np.uint8), 2, 2, method="area")
    assert out8.dtype == np.uint8
    np.testing.assert_array_equal(out8[..., 0], [[3, 5], [11, 13]])


def test_exact_2x_downscale_bilinear_is_antialiased() -> None:
    """Bilinear by exactly 2 is PIL's stretched triangle: weights 1, 3, 3, 1 (/8), the
    edges renormalised (3, 3, 1 / 7)."""
    row = np.arange(0, 64, 8, dtype=np.float64)  # 0, 8, ..., 56
    image = np.stack([row, row])[..., None]  # (2, 8, 1)
    out = resize_with_pad(image, 1, 4)
    expected = [
        (3 * 0 + 3 * 8 + 16) / 7,
        (8 + 3 * 16 + 3 * 24 + 32) / 8,
        (24 + 3 * 32 + 3 * 40 + 48) / 8,
        (40 + 3 * 48 + 3 * 56) / 7,
    ]
    np.testing.assert_allclose(out[0, :, 0], expected, rtol=1e-12)


def test_padding_is_zero_and_centred() -> None:
    """Aspect kept: the image fills one axis, zeros pad the other, odd pixel at the end."""
    ones = np.ones((2, 4, 1), np.float32)
    out = resize_with_pad(ones, 4, 4)
    assert out[:, :, 0].tolist() == [[0] * 4, [1] * 4, [1] * 4, [0] * 4]
    out = resize_with_pad(np.ones((1, 4, 1), np.float32), 4, 4)
    assert out[:, :, 0].tolist() == [[0] * 4, [1] * 4, [0] * 4, [0] * 4]
    out = resize_with_pad(np.ones((4, 2, 3), np.uint8), 4, 4)
    assert (out[:, [1, 2]] == 1).all() and (out[:, [0, 3]] == 0).all()
    # A tall image shrinks to fit the height: 8x2 -> 4x1 in the middle of 4x4 (column 1).
    out = resize_with_pad(np.full((8, 2, 1), 9.0), 4, 4)
    assert out[:, :, 0].tolist() == [[0, 9, 0, 0]] * 4


def test_batch_dimensions_and_dtypes_are_kept() -> None:
    """Leading dimensions are batches; each image is resized alone; the dtype is kept."""
    rng = np.random.default_rng(0)
    batch = rng.integers(0, 256, (2, 3, 30, 40, 3), dtype=np.uint8)
    out = resize_with_pad(batch, 16, 16)
    assert out.shape == (2, 3, 16, 16, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[1, 2], resize_with_pad(batch[1, 2], 16, 16))
    floats = rng.random((30, 40, 3)).astype(np.float32)
    assert resize_with_pad(floats, 16, 16).dtype == np.float32
    wide = rng.integers(0, 65536, (30, 40, 1), dtype=np.uint16)
    out16 = resize_with_pad(wide, 15, 20)
    assert out16.dtype == np.uint16 and out16.max() <= wide.max()


@needs_pil
@pytest.mark.parametrize(
    ("shape", "target"),
    [
        ((480, 640), (224, 224)),  # a camera frame to pi0's input
        ((720, 1280), (224, 224)),
        ((97, 131), (61, 47)),  # odd sizes
        ((100, 37), (50, 80)),  # tall into wide
        ((48, 64), (224, 224)),  # upscale
        ((7, 9), (5, 3)),
    ],
)
@pytest.mark.parametrize("method", ["bilinear", "area"])
def test_matches_pil_reference(
    shape: tuple[int, int], target: tuple[int, int], method: str
) -> None:
    """Against openpi's PIL implementation: within 1 everywhere, identical almost everywhere."""
    rng = np.random.default_rng(sum(shape) + sum(target))
    image = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
    resample = {"bilinear": Image.BILINEAR, "area": Image.BOX}[method]
    expected = pil_resize_with_pad(image, *target, resample)
    out = resize_with_pad(image, *target, method=method)
    assert out.shape == expected.shape and out.dtype == np.uint8
    diff = np.abs(out.astype(np.int16) - expected.astype(np.int16))
    assert diff.max() <= 1
    assert (diff > 0).mean() < 0.05


def test_resize_errors_name_the_problem() -> None:
    """Bad images, sizes and methods raise a ValueError that says which."""
    with pytest.raises(ValueError, match=r"\(\.\.\., height, width, channels\)"):
        resize_with_pad(np.zeros((4, 4)), 2, 2)
    with pytest.raises(ValueError, match="dtype bool"):
        resize_with_pad(np.zeros((4, 4, 1), bool), 2, 2)
    with pytest.raises(ValueError, match="height must be an int >= 1"):
        resize_with_pad(np.zeros((4, 4, 1)), 0, 2)
    with pytest.raises(ValueError, match="valid: bilinear, area"):
        resize_with_pad(np.zeros((4, 4, 1)), 2, 2, method="cubic")  # type: ignore[arg-type]


# ---- to_uint8 --------------------------------------------------------------------


def test_to_uint8_maps_declared_ranges() -> None:
    """[0, 1] by default, [-1, 1] on request: rounded, clipped, uint8 untouched."""
    floats = np.array([0.0, 0.5, 1.0, 1.5, -0.2, 0.1], np.float32)
    assert to_uint8(floats).tolist() == [0, 128, 255, 255, 0, 26]
    signed = np.array([-1.0, 0.0, 1.0, 3.0], np.float64)
    assert to_uint8(signed, value_range=(-1.0, 1.0)).tolist() == [0, 128, 255, 255]
    image = np.zeros((2, 2, 3), np.uint8)
    assert to_uint8(image) is image
    assert to_uint8(np.array([-5, 100, 300], np.int16)).tolist() == [0, 100, 255]
    assert to_uint8(np.array([True, False])).tolist() == [255, 0]
    with pytest.raises(ValueError, match="NaN"):
        to_uint8(np.array([np.nan, 0.5]))
    with pytest.raises(ValueError, match="value_range"):
        to_uint8(floats, value_range=(1.0, 1.0))
    with pytest.raises(ValueError, match="dtype complex"):
        to_uint8(np.zeros(2, np.complex64))


# ---- JPEG ------------------------------------------------------------------------


@needs_pil
def test_jpeg_round_trip() -> None:
    """Encode, decode: the same shape, close values; lower quality, fewer bytes."""
    image = gradient(48, 64)
    data = encode_jpeg(image, quality=95)
    assert data[:2] == b"\xff\xd8"
    decoded = decode_jpeg(data)
    assert decoded.shape == image.shape and decoded.dtype == np.uint8
    error = np.abs(decoded.astype(np.int16) - image.astype(np.int16))
    assert error.mean() < 2.0 and error.max() <= 24
    assert len(encode_jpeg(image, quality=10)) < len(data)


@needs_pil
def test_jpeg_grayscale_decodes_with_one_channel() -> None:
    """(H, W) and (H, W, 1) encode as grayscale and decode to (H, W, 1)."""
    gray = gradient(16, 24)[..., 0]
    assert decode_jpeg(encode_jpeg(gray)).shape == (16, 24, 1)
    assert decode_jpeg(encode_jpeg(gray[..., None])).shape == (16, 24, 1)


@needs_pil
def test_jpeg_refuses_what_it_cannot_encode() -> None:
    """Only uint8 (H, W[, 1|3]) encodes, quality 1..100."""
    with pytest.raises(ValueError, match="uint8"):
        encode_jpeg(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        encode_jpeg(np.zeros((4, 4, 4), np.uint8))
    with pytest.raises(ValueError, match="quality"):
        encode_jpeg(np.zeros((4, 4, 3), np.uint8), quality=0)


def test_jpeg_without_pillow_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pillow, JPEG raises an ImportError that says what to install."""
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match=r"armory-client\[jpeg\]"):
        encode_jpeg(np.zeros((4, 4, 3), np.uint8))
    # Everything else works without it.
    assert resize_with_pad(np.zeros((4, 8, 3), np.uint8), 2, 2).shape == (2, 2, 3)


# ---- observations ----------------------------------------------------------------


def test_image_specs_from_metadata() -> None:
    """uint8 [H, W, 1|3] inputs are images; JPEG where the input says so."""
    assert image_specs(METADATA) == {
        "observation/image": ImageSpec(224, 224, 3, jpeg=False),
        "observation/wrist_image": ImageSpec(224, 224, 3, jpeg=True),
        "observation/depth": ImageSpec(64, 48, 1, jpeg=False),
        "observation/any_size": ImageSpec(None, None, 3, jpeg=False),
    }
    assert image_specs({}) == {} and image_specs({"inputs": "junk"}) == {}


@needs_pil
def test_prepare_images_resizes_casts_and_encodes() -> None:
    """Declared images are cast, resized and (where accepted) JPEG-encoded; the rest and
    the input map are untouched."""
    rng = np.random.default_rng(1)
    state = np.zeros(8, np.float32)
    obs = {
        "observation/image": rng.random((480, 640, 3)).astype(np.float32),
        "observation/wrist_image": gradient(480, 640),
        "observation/depth": rng.integers(0, 256, (128, 96), dtype=np.uint8),
        "observation/any_size": gradient(10, 20),
        "observation/state": state,
        "prompt": "fold the towel",
    }
    original = dict(obs)
    specs = image_specs(METADATA)
    raw = prepare_images(obs, specs)
    assert raw["observation/image"].shape == (224, 224, 3)
    assert raw["observation/image"].dtype == np.uint8
    np.testing.assert_array_equal(
        raw["observation/image"], resize_with_pad(to_uint8(obs["observation/image"]), 224, 224)
    )
    assert raw["observation/wrist_image"].shape == (224, 224, 3)
    assert raw["observation/depth"].shape == (64, 48, 1)
    assert raw["observation/any_size"] is obs["observation/any_size"]
    assert raw["observation/state"] is state and raw["prompt"] == "fold the towel"
    assert obs == original and obs["observation/image"].dtype == np.float32

    encoded = prepare_images(obs, specs, jpeg_quality=80)
    assert isinstance(encoded["observation/wrist_image"], bytes)
    assert decode_jpeg(encoded["observation/wrist_image"]).shape == (224, 224, 3)
    assert isinstance(encoded["observation/image"], np.ndarray)  # the server takes raw only
    # Already encoded: passed on.
    again = prepare_images(encoded, specs, jpeg_quality=80)
    assert again["observation/wrist_image"] is encoded["observation/wrist_image"]


def test_prepare_images_errors_name_the_key() -> None:
    """Wrong channels, a bad cast or a bad quality raise naming the key (or quality)."""
    specs = {"cam": ImageSpec(8, 8, 3)}
    with pytest.raises(
        ValueError, match=r"image 'cam': expected \(H, W, 3\), got shape \(8, 8, 4\)"
    ):
        prepare_images({"cam": np.zeros((8, 8, 4), np.uint8)}, specs)
    with pytest.raises(ValueError, match="image 'cam': image holds NaN"):
        prepare_images({"cam": np.full((8, 8, 3), np.nan)}, specs)
    with pytest.raises(ValueError, match="quality"):
        prepare_images({}, specs, jpeg_quality=101)
    assert prepare_images({"other": 1}, specs) == {"other": 1}
