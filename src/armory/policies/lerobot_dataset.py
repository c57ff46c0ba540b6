"""A small reader of local LeRobot datasets (codebase v3.0): metadata and numeric columns.

Only what a replay needs, with pyarrow alone (extra ``replay``), no LeRobot install:

- ``meta/info.json``: ``codebase_version`` (must be ``"v3.0"``), ``fps``,
  ``features`` (``{name: {dtype, shape, names}}``) and the ``data_path`` template,
  ``data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet`` by default;
- ``meta/episodes/chunk-*/file-*.parquet``: one row per episode with
  ``episode_index``, ``length``, ``data/chunk_index`` and ``data/file_index``
  (the data file holding the episode; LeRobot never splits an episode across files);
- the data files: one row per frame with ``episode_index``, ``frame_index`` and a
  column per feature; a 1-D feature of length n is a list column of n values, a
  feature of shape (1,) a plain numeric column.

Every check runs when the dataset is opened or a column is read, and every failure
is a ValueError naming the dataset, the file and what was expected. Videos, images,
stats and tasks are not read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CODEBASE_VERSION = "v3.0"
"""The only LeRobot dataset version read."""
INFO_PATH = "meta/info.json"
EPISODES_DIR = "meta/episodes"
DEFAULT_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
_EPISODE_COLUMNS = ("episode_index", "length", "data/chunk_index", "data/file_index")
_NUMERIC_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "bool"}


@dataclass(frozen=True)
class FeatureInfo:
    """One feature of ``meta/info.json``."""

    dtype: str
    """LeRobot dtype: float32, int64, image, video, string, ..."""
    shape: tuple[int, ...]
    """Per-frame shape, e.g. (6,) for a 6-joint action."""

    @property
    def is_vector(self) -> bool:
        """A numeric feature of shape (n,): readable by :meth:`LeRobotDatasetReader.column`."""
        return self.dtype in _NUMERIC_DTYPES and len(self.shape) == 1 and self.shape[0] >= 1


@dataclass(frozen=True)
class EpisodeInfo:
    """One row of ``meta/episodes``."""

    index: int
    """``episode_index``."""
    length: int
    """Frames in the episode."""
    data_file: str
    """The data file holding it, relative to the dataset root."""


class LeRobotDatasetReader:
    """A v3.0 dataset on local disk: checked when opened, columns read on demand."""

    def __init__(self, root: Path | str) -> None:
        """Read ``meta/info.json`` and the episode table; raises ValueError (naming the
        dataset and file) for a missing folder, another codebase version, or a malformed
        metadata file."""
        self.root = Path(root)
        self._where = f"LeRobot dataset {str(self.root)!r}"
        if not self.root.is_dir():
            raise ValueError(f"{self._where}: no such directory")
        info = self._read_info()
        self.info: Mapping[str, Any] = info
        """``meta/info.json`` as read."""
        self.fps = float(info["fps"])
        """Frames per second of the recording."""
        self.features: dict[str, FeatureInfo] = _parse_features(info["features"], self._where)
        """Features by name."""
        self._data_path = str(info.get("data_path") or DEFAULT_DATA_PATH)
        self.episodes: dict[int, EpisodeInfo] = self._read_episodes()
        """Episodes by ``episode_index``, in index order."""

    def column(self, key: str, episodes: Iterable[int] | None = None) -> dict[int, np.ndarray]:
        """Feature ``key`` of each episode (all by default) as a (length, n) array, rows in
        ``frame_index`` order, in the feature's dtype. Each data file is read once."""
        feature = self.features.get(key)
        if feature is None:
            raise ValueError(
                f"{self._where}: no feature {key!r}; features: {', '.join(sorted(self.features))}"
            )
        if not feature.is_vector:
            raise ValueError(
                f"{self._where}: feature {key!r} is {feature.dtype} {feature.shape}; only numeric "
                "features of shape (n,) can be read"
            )
        wanted = list(self.episodes) if episodes is None else list(episodes)
        missing = sorted(set(wanted) - set(self.episodes))
        if missing:
            raise ValueError(
                f"{self._where}: no episodes {missing}; it has episodes "
                f"{_ranges(list(self.episodes))}"
            )
        by_file: dict[str, list[EpisodeInfo]] = {}
        for index in wanted:
            episode = self.episodes[index]
            by_file.setdefault(episode.data_file, []).append(episode)
        out: dict[int, np.ndarray] = {}
        for data_file, members in by_file.items():
            out.update(self._read_data_file(data_file, key, feature, members))
        return {index: out[index] for index in wanted}

    # ---- metadata ------------------------------------------------------

    def _read_info(self) -> dict[str, Any]:
        path = self.root / INFO_PATH
        if not path.is_file():
            raise ValueError(f"{self._where}: no {INFO_PATH}; not a LeRobot dataset")
        try:
            info = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{self._where}: cannot read {INFO_PATH}: {exc}") from None
        if not isinstance(info, dict):
            raise ValueError(f"{self._where}: {INFO_PATH} is not a JSON object")
        version = info.get("codebase_version")
        if version != CODEBASE_VERSION:
            raise ValueError(
                f"{self._where}: codebase_version {version!r}; only {CODEBASE_VERSION!r} is read "
                "(convert older datasets with LeRobot's "
                "`python -m lerobot.scripts.convert_dataset_v21_to_v30`)"
            )
        for key in ("fps", "features"):
            if key not in info:
                raise ValueError(f"{self._where}: {INFO_PATH} lacks {key!r}")
        fps = info["fps"]
        if isinstance(fps, bool) or not isinstance(fps, int | float) or not fps > 0:
            raise ValueError(f"{self._where}: {INFO_PATH} fps must be a number > 0, got {fps!r}")
        if not isinstance(info["features"], dict):
            raise ValueError(f"{self._where}: {INFO_PATH} features must be an object")
        return info

    def _read_episodes(self) -> dict[int, EpisodeInfo]:
        import pyarrow.parquet as pq

        files = sorted((self.root / EPISODES_DIR).glob("chunk-*/file-*.parquet"))
        if not files:
            raise ValueError(
                f"{self._where}: no episode metadata ({EPISODES_DIR}/chunk-*/file-*.parquet)"
            )
        episodes: dict[int, EpisodeInfo] = {}
        for path in files:
            relative = path.relative_to(self.root)
            try:
                table = pq.read_table(path, columns=list(_EPISODE_COLUMNS))
            except Exception as exc:  # pyarrow raises several types for a bad file
                raise ValueError(
                    f"{self._where}: cannot read {relative} (expected columns "
                    f"{list(_EPISODE_COLUMNS)}): {exc}"
                ) from None
            columns = {name: table.column(name).to_pylist() for name in _EPISODE_COLUMNS}
            for row in zip(*columns.values(), strict=True):
                index, length, chunk_index, file_index = row
                if not all(isinstance(v, int) for v in row) or length < 1 or index < 0:
                    raise ValueError(
                        f"{self._where}: {relative} has a bad episode row "
                        f"{dict(zip(_EPISODE_COLUMNS, row, strict=True))}"
                    )
                if index in episodes:
                    raise ValueError(f"{self._where}: episode {index} is listed twice")
                data_file = self._data_path.format(chunk_index=chunk_index, file_index=file_index)
                episodes[index] = EpisodeInfo(index=index, length=length, data_file=data_file)
        return dict(sorted(episodes.items()))

    # ---- data ------------------------------------------------------------

    def _read_data_file(
        self, data_file: str, key: str, feature: FeatureInfo, members: list[EpisodeInfo]
    ) -> dict[int, np.ndarray]:
        import pyarrow.parquet as pq

        path = self.root / data_file
        if not path.is_file():
            episodes = [e.index for e in members]
            raise ValueError(f"{self._where}: {data_file} (episodes {episodes}) does not exist")
        try:
            table = pq.read_table(path, columns=["episode_index", "frame_index", key])
        except Exception as exc:  # pyarrow raises several types for a bad file
            raise ValueError(
                f"{self._where}: cannot read columns episode_index, frame_index and {key!r} "
                f"of {data_file}: {exc}"
            ) from None
        episode_index = _plain_column(table, "episode_index", data_file, self._where)
        frame_index = _plain_column(table, "frame_index", data_file, self._where)
        values = _vector_column(table, key, feature, data_file, self._where)
        out = {}
        for episode in members:
            rows = np.flatnonzero(episode_index == episode.index)
            order = rows[np.argsort(frame_index[rows], kind="stable")]
            frames = frame_index[order]
            if len(frames) != episode.length or not np.array_equal(
                frames, np.arange(episode.length)
            ):
                raise ValueError(
                    f"{self._where}: {data_file} holds {len(frames)} frames of episode "
                    f"{episode.index} (frame_index {_ranges(frames.tolist())}); the episode "
                    f"table says {episode.length} (frame_index 0..{episode.length - 1})"
                )
            out[episode.index] = values[order]
        return out


def _parse_features(features: Mapping[str, Any], where: str) -> dict[str, FeatureInfo]:
    out = {}
    for name, spec in features.items():
        if not isinstance(spec, Mapping) or "dtype" not in spec or "shape" not in spec:
            raise ValueError(f"{where}: {INFO_PATH} feature {name!r} lacks dtype or shape")
        shape = spec["shape"]
        if not isinstance(shape, list | tuple) or not all(isinstance(d, int) for d in shape):
            raise ValueError(f"{where}: {INFO_PATH} feature {name!r} has shape {shape!r}")
        out[str(name)] = FeatureInfo(dtype=str(spec["dtype"]), shape=tuple(shape))
    return out


def _plain_column(table: Any, name: str, data_file: str, where: str) -> np.ndarray:
    column = table.column(name)
    if column.null_count:
        raise ValueError(f"{where}: column {name!r} of {data_file} has {column.null_count} nulls")
    return column.to_numpy()


def _vector_column(
    table: Any, key: str, feature: FeatureInfo, data_file: str, where: str
) -> np.ndarray:
    """Column ``key`` as a (rows, n) array of the feature's dtype."""
    import pyarrow as pa

    (width,) = feature.shape
    column = table.column(key).combine_chunks()
    expected = f"{feature.dtype} {feature.shape}"
    if column.null_count:
        raise ValueError(f"{where}: column {key!r} of {data_file} has {column.null_count} nulls")
    kind = column.type
    if pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        lengths = column.value_lengths().to_numpy(zero_copy_only=False)
        if np.any(lengths != width):
            bad = sorted(set(lengths.tolist()) - {width})
            raise ValueError(
                f"{where}: column {key!r} of {data_file} has rows of length {bad}; "
                f"info.json declares {expected}"
            )
        flat = column.flatten()
        if flat.null_count:
            raise ValueError(f"{where}: column {key!r} of {data_file} holds null values")
        values = flat.to_numpy(zero_copy_only=False).reshape(len(column), width)
    elif width == 1 and (pa.types.is_floating(kind) or pa.types.is_integer(kind)):
        values = column.to_numpy(zero_copy_only=False).reshape(len(column), 1)
    else:
        raise ValueError(
            f"{where}: column {key!r} of {data_file} has arrow type {kind}; info.json "
            f"declares {expected}"
        )
    return values.astype(np.dtype(feature.dtype), copy=False)


def _ranges(values: list[int]) -> str:
    """``0..4, 7`` for [0, 1, 2, 3, 4, 7]; at most a few ranges, then ``...``."""
    if not values:
        return "none"
    parts, start, prev = [], values[0], values[0]
    for value in [*values[1:], math.inf]:
        if value == prev + 1:
            prev = value
            continue
        parts.append(str(start) if start == prev else f"{start}..{prev}")
        start = prev = value  # type: ignore[assignment]
    text = ", ".join(parts[:6])
    return text + (", ..." if len(parts) > 6 else "")
