"""Noise tickets: seeds, ticket files, their identity, and what is refused."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from armory.policies.noise import (
    MakeTicketArgs,
    NoiseConfig,
    main,
    make_noise,
    noise_sha256,
    save_ticket,
)

SHAPE = (10, 7)


def write_npz(path: Path, **arrays: np.ndarray) -> Path:
    """An .npz file holding ``arrays`` (pickle allowed, so object arrays can be written)."""
    np.savez(path, **arrays)
    return path


def test_seed_matches_numpy_pcg64() -> None:
    """A seed gives NumPy's PCG64 float32 standard normals, the same every time."""
    first = make_noise(NoiseConfig(seed=7), SHAPE)
    again = make_noise(NoiseConfig(seed=7), SHAPE)
    assert first is not None and again is not None
    expected = np.random.Generator(np.random.PCG64(7)).standard_normal(SHAPE, dtype=np.float32)
    assert first.array.dtype == np.float32 and first.array.flags.c_contiguous
    assert first.array.tobytes() == expected.tobytes() == again.array.tobytes()
    assert first.sha256 == again.sha256 == noise_sha256(expected)
    assert first.source == "seed 7 (PCG64)"
    other = make_noise(NoiseConfig(seed=8), SHAPE)
    assert other is not None and other.sha256 != first.sha256


def test_no_seed_no_ticket_is_no_noise() -> None:
    """Neither set: no ticket."""
    assert make_noise(NoiseConfig(), SHAPE) is None
    assert not NoiseConfig().enabled


def test_ticket_array_is_read_only() -> None:
    """A ticket's array cannot be written to."""
    ticket = make_noise(NoiseConfig(seed=1), SHAPE)
    assert ticket is not None
    with pytest.raises(ValueError, match="read-only"):
        ticket.array[0, 0] = 1.0


def test_sha_ignores_byte_order_and_layout() -> None:
    """Big-endian, Fortran-order and float64 copies of the same float32 values hash alike."""
    values = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    canonical = noise_sha256(values)
    assert canonical == noise_sha256(values.astype(">f4"))
    assert canonical == noise_sha256(np.asfortranarray(values))
    assert canonical == noise_sha256(np.asfortranarray(values.astype(">f4")))
    assert canonical == noise_sha256(values.astype(np.float64))
    assert canonical == noise_sha256(values.T.copy().T)
    import hashlib

    assert canonical == hashlib.sha256(values.astype("<f4").tobytes()).hexdigest()


def test_ticket_file_round_trip(tmp_path: Path) -> None:
    """save_ticket then a ticket config: the same values and the same sha as the seed's."""
    seeded = make_noise(NoiseConfig(seed=5), SHAPE)
    assert seeded is not None
    path = save_ticket(tmp_path / "ticket", seeded.array.astype(">f4"))
    assert path.name == "ticket.npz"
    loaded = make_noise(NoiseConfig(ticket=path), SHAPE)
    assert loaded is not None
    assert loaded.array.tobytes() == seeded.array.tobytes()
    assert loaded.sha256 == seeded.sha256
    assert loaded.source == str(path)


@pytest.mark.parametrize("dtype", ["float16", "float64", ">f8"])
def test_ticket_other_float_dtypes_are_cast(tmp_path: Path, dtype: str) -> None:
    """float16 and float64 tickets are cast to float32; the sha is of the float32 values."""
    values = np.random.default_rng(0).standard_normal(SHAPE).astype(dtype)
    path = write_npz(tmp_path / "t.npz", noise=values)
    ticket = make_noise(NoiseConfig(ticket=path), SHAPE)
    assert ticket is not None
    assert ticket.array.dtype == np.float32
    assert ticket.sha256 == noise_sha256(values.astype(np.float32))


def test_seed_and_ticket_are_exclusive(tmp_path: Path) -> None:
    """Both set: a ValueError naming both."""
    with pytest.raises(ValueError, match=r"noise seed \(7\) and noise ticket .* exclusive"):
        NoiseConfig(seed=7, ticket=tmp_path / "t.npz")


@pytest.mark.parametrize("seed", [-1, True, 1.5])
def test_bad_seed(seed: object) -> None:
    """A seed must be an int >= 0."""
    with pytest.raises(ValueError, match="noise seed must be an int >= 0"):
        NoiseConfig(seed=seed)  # type: ignore[arg-type]


def _bad_tickets(tmp_path: Path) -> list[tuple[Path, str]]:
    good = np.zeros(SHAPE, np.float32)
    nan = good.copy()
    nan[2, 3] = np.nan
    big = np.full(SHAPE, 1e300)
    objects = np.empty(SHAPE, dtype=object)
    objects[:] = 0.0
    not_npz = tmp_path / "plain.npy"
    np.save(not_npz, good)
    broken = tmp_path / "broken.npz"
    with zipfile.ZipFile(broken, "w") as archive:
        archive.writestr("noise.npy", b"not an npy file")
    return [
        (tmp_path / "missing.npz", "no such file"),
        (not_npz, "not an .npz archive"),
        (write_npz(tmp_path / "pickle.npz", noise=objects), "without pickle"),
        (
            write_npz(tmp_path / "key.npz", actions=good),
            r"named 'noise', received arrays \['actions'\]",
        ),
        (
            write_npz(tmp_path / "extra.npz", noise=good, other=good),
            r"exactly one array named 'noise', received arrays \['noise', 'other'\]",
        ),
        (
            write_npz(tmp_path / "shape.npz", noise=good.T),
            r"has shape \(7, 10\); expected \(10, 7\)",
        ),
        (
            write_npz(tmp_path / "int.npz", noise=good.astype(np.int32)),
            "has dtype '<i4'; expected float32",
        ),
        (write_npz(tmp_path / "nan.npz", noise=nan), "holds 1 non-finite values"),
        (write_npz(tmp_path / "big.npz", noise=big), "holds 70 non-finite values"),
        (broken, "is not an .npy array"),
    ]


def test_bad_tickets_are_refused(tmp_path: Path) -> None:
    """Every unusable ticket file is a ValueError naming the file and what was wrong."""
    for path, message in _bad_tickets(tmp_path):
        with pytest.raises(ValueError, match=message) as info:
            make_noise(NoiseConfig(ticket=path), SHAPE)
        assert str(path) in str(info.value), path


def test_save_ticket_refuses_non_finite(tmp_path: Path) -> None:
    """save_ticket writes only finite, non-empty noise."""
    with pytest.raises(ValueError, match="finite"):
        save_ticket(tmp_path / "t.npz", np.array([np.inf], np.float32))


def test_main_writes_a_ticket(tmp_path: Path) -> None:
    """The module's entry point writes the seed's ticket and prints its sha."""
    line = main(MakeTicketArgs(seed=7, shape=(50, 32), out=tmp_path / "t.npz"))
    ticket = make_noise(NoiseConfig(ticket=tmp_path / "t.npz"), (50, 32))
    seeded = make_noise(NoiseConfig(seed=7), (50, 32))
    assert ticket is not None and seeded is not None
    assert ticket.sha256 == seeded.sha256
    assert seeded.sha256 in line
