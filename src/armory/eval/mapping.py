"""From an environment's observation to a policy's declared inputs.

An environment names its observation entries its own way (``observation.state``,
``observation.images.front``, ``task``, ``privileged/state``); a policy declares
the inputs it needs (its server's metadata frame). The mapping renames entries
(``--mapping observation.state observation/state``; an entry not named keeps its
name), and :func:`check_mapping` compares one real observation with the declared
inputs before any robot starts, listing every input that does not fit. Only
declared inputs are sent (all entries when the server declares none).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


class MappingError(ValueError):
    """The environment's observation cannot feed the policy's declared inputs."""


def map_observation(
    obs: Mapping[str, Any], mapping: Mapping[str, str], inputs: Mapping[str, Any]
) -> dict[str, Any]:
    """Called per observation sent: ``obs`` renamed by ``mapping``, only declared inputs."""
    renamed = {mapping.get(key, key): value for key, value in obs.items()}
    if not inputs:
        return renamed
    return {key: value for key, value in renamed.items() if key in inputs}


def source_inputs(mapping: Mapping[str, str], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The declared ``inputs`` under the environment's names (``mapping`` undone)."""
    sources = {policy_key: env_key for env_key, policy_key in mapping.items()}
    return {sources.get(key, key): spec for key, spec in inputs.items()}


def check_mapping(
    obs: Mapping[str, Any], mapping: Mapping[str, str], inputs: Mapping[str, Any], *, env: str
) -> None:
    """Raise :class:`MappingError` listing every declared input (wire form: ``shape``,
    ``dtype``, ``required``) that the mapped ``obs`` lacks or cannot fill."""
    unknown = sorted(set(mapping) - set(obs))
    problems = [f"--mapping names {key!r}, which env:{env} does not produce" for key in unknown]
    renamed = {mapping.get(key, key): value for key, value in obs.items()}
    for key, spec in inputs.items():
        spec = spec if isinstance(spec, Mapping) else {}
        if key not in renamed:
            if spec.get("required", True):
                problems.append(f"input {key!r} ({_describe_spec(spec)}) has no source")
            continue
        problem = _misfit(renamed[key], spec)
        if problem:
            problems.append(f"input {key!r}: {problem}")
    if problems:
        produced = ", ".join(f"{k} ({_describe_value(v)})" for k, v in sorted(obs.items()))
        raise MappingError(
            f"env:{env} cannot feed the policy: {'; '.join(problems)}. The environment "
            f"produces: {produced}; rename with --mapping ENV_KEY POLICY_KEY"
        )


def _misfit(value: Any, spec: Mapping[str, Any]) -> str | None:
    """Why ``value`` cannot fill an input declared as ``spec`` (None when it can)."""
    dtype = spec.get("dtype")
    if dtype == "str":
        return None if isinstance(value, str) else f"expected text, got {_describe_value(value)}"
    if isinstance(value, str):
        return f"expected {_describe_spec(spec)}, got text"
    array = np.asarray(value)
    shape = spec.get("shape")
    if spec.get("jpeg") or (dtype == "uint8" and shape is not None and len(shape) == 3):
        # Images are resized and cast to the declared shape by the robot's runtime.
        if array.ndim != 3:
            return f"expected an image {_describe_spec(spec)}, got {_describe_value(value)}"
        return None
    if dtype is not None:
        want = np.dtype(dtype)
        castable = want.kind == "f" and array.dtype.kind in "biuf"
        if array.dtype != want and not castable:
            return f"expected {_describe_spec(spec)}, got {_describe_value(value)}"
    if shape is not None and (
        len(shape) != array.ndim
        or any(w is not None and w != g for w, g in zip(shape, array.shape, strict=False))
    ):
        return f"expected {_describe_spec(spec)}, got {_describe_value(value)}"
    return None


def _describe_spec(spec: Mapping[str, Any]) -> str:
    shape = spec.get("shape")
    dims = (
        "" if shape is None else " (" + ", ".join("*" if d is None else str(d) for d in shape) + ")"
    )
    return f"{spec.get('dtype', '?')}{dims}"


def _describe_value(value: Any) -> str:
    if isinstance(value, str):
        return "str"
    array = np.asarray(value)
    return f"{array.dtype.name} {tuple(array.shape)}"
