"""Policy interface: declared inputs, observation validation, the mock and policy:python."""

from __future__ import annotations

import time

import numpy as np
import pytest
from server_harness import make_obs

from armory.core.errors import ObservationError
from armory.core.latency_profile import LinearProfileConfig
from armory.policies.base import InputSpec, conform_observation, validate_observation
from armory.policies.mock import (
    MOCK_MAX_STEP,
    MockPolicy,
    MockPolicyConfig,
    inpaint_prefix,
    mock_actions,
    sleep_precisely,
)
from armory.policies.python import PythonPolicyConfig

INPUTS = MockPolicyConfig().inputs()


def test_mock_declares_two_cameras_a_state_an_optional_prompt_and_rtc_fields() -> None:
    """The mock's default inputs: two uint8 224x224x3 images, float32 state (8,), prompt str,
    and the optional real-time-chunking prefix and remainder (rows of 7 actions)."""
    assert MockPolicyConfig().inputs() == {
        "observation/image": InputSpec((224, 224, 3), "uint8"),
        "observation/wrist_image": InputSpec((224, 224, 3), "uint8"),
        "observation/state": InputSpec((8,), "float32"),
        "rtc_prefix": InputSpec((None, 7), required=False),
        "rtc_remainder": InputSpec((None, 7), required=False),
        "prompt": InputSpec((), "str", required=False),
    }


def test_mock_inputs_are_configurable() -> None:
    """Keys, image shape, state size and the prompt are options."""
    config = MockPolicyConfig(
        image_keys=("cam",), image_shape=(64, 48, 3), state_key="q", state_dim=3, prompt_key=None
    )
    rtc = InputSpec((None, 7), required=False)
    assert config.inputs() == {
        "cam": InputSpec((64, 48, 3), "uint8"),
        "q": InputSpec((3,)),
        "rtc_prefix": rtc,
        "rtc_remainder": rtc,
    }


def test_valid_observation_passes_with_extra_keys_and_prompt() -> None:
    """A matching observation passes; undeclared keys are allowed."""
    obs = make_obs(0, prompt="pick up the cube") | {"extra": [1, 2]}
    validate_observation(obs, INPUTS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"observation/state": None},
            "observation lacks required input 'observation/state' (expected float32 (8,))",
        ),
        (
            {"observation/image": np.zeros((100, 100, 3), np.uint8)},
            "observation input 'observation/image': expected shape (224, 224, 3), "
            "received (100, 100, 3) (uint8)",
        ),
        (
            {"observation/image": np.zeros((224, 224, 3), np.float32)},
            "observation input 'observation/image': expected dtype uint8, received float32",
        ),
        (
            {"observation/state": np.array([object()] * 8)},
            "observation input 'observation/state': dtype '|O' (object) is not allowed",
        ),
        (
            {"observation/state": np.zeros(8, dtype=[("a", "f4")])},
            "(void/structured) is not allowed",
        ),
        (
            {"observation/state": [0.0] * 8},
            "observation input 'observation/state': expected an ndarray float32 (8,), "
            "received list",
        ),
        ({"prompt": 5}, "observation input 'prompt': expected str, received int"),
    ],
)
def test_bad_observation_names_key_expected_and_received(
    change: dict[str, object], message: str
) -> None:
    """Each mismatch raises an ObservationError naming the key, what was expected and got."""
    obs = make_obs(0)
    for key, value in change.items():
        if value is None:
            del obs[key]
        else:
            obs[key] = value
    with pytest.raises(ObservationError) as info:
        validate_observation(obs, INPUTS)
    assert message in str(info.value)


def test_float_inputs_accept_other_real_dtypes_and_are_converted() -> None:
    """A float64 state (what np.random.rand gives) is accepted and converted to float32."""
    obs = make_obs(0)
    obs["observation/state"] = np.arange(8, dtype=np.float64)
    out = conform_observation(obs, INPUTS)
    assert out["observation/state"].dtype == np.float32
    np.testing.assert_array_equal(out["observation/state"], np.arange(8))
    assert obs["observation/state"].dtype == np.float64  # the input map is not modified


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_a_value_beyond_the_declared_float_range_is_refused_not_made_inf(dtype: type) -> None:
    """A finite float64 of 1e308 (or an int beyond float16) would become inf when converted
    to the declared dtype: it is refused, naming the input."""
    inputs = {"state": InputSpec(shape=(2,), dtype="float16" if dtype is np.int64 else "float32")}
    big = 1e308 if dtype is np.float64 else 70_000
    with pytest.raises(ObservationError, match=r"'state': holds .* beyond the range"):
        conform_observation({"state": np.array([0, big], dtype)}, inputs)
    out = conform_observation({"state": np.array([0, 1], dtype)}, inputs)
    assert np.isfinite(out["state"]).all()


def test_wildcard_dimensions_accept_any_size() -> None:
    """A None dimension matches any size; the rank must still agree."""
    inputs = {"points": InputSpec((None, 3), "float32")}
    validate_observation({"points": np.zeros((17, 3), np.float32)}, inputs)
    with pytest.raises(ObservationError, match=r"expected shape \(\*, 3\)"):
        validate_observation({"points": np.zeros(3, np.float32)}, inputs)


def test_a_shape_declared_as_a_list_checks_as_its_tuple() -> None:
    """A shape read from a config file as a list is kept as a tuple: arrays of that shape
    pass, others are refused naming it."""
    spec = InputSpec([4, 3], "float32")  # type: ignore[arg-type]
    assert spec.shape == (4, 3)
    validate_observation({"x": np.zeros((4, 3), np.float32)}, {"x": spec})
    for wrong in [(3, 4), (4, 3, 1), (12,)]:
        with pytest.raises(ObservationError, match=r"expected shape \(4, 3\)"):
            validate_observation({"x": np.zeros(wrong, np.float32)}, {"x": spec})


def test_input_spec_refuses_object_dtype() -> None:
    """A policy cannot declare an object input."""
    with pytest.raises(ValueError, match="object"):
        InputSpec((1,), "O")


def test_mock_actions_are_deterministic_and_depend_on_each_input() -> None:
    """The chunk is a pure function of the observation; changing one pixel changes it."""
    obs = make_obs(3, prompt="a")
    first = mock_actions(obs, INPUTS, 10, 7)
    assert first.shape == (10, 7) and first.dtype == np.float32
    np.testing.assert_array_equal(first, mock_actions(dict(obs), INPUTS, 10, 7))
    for key, value in [
        ("observation/wrist_image", obs["observation/wrist_image"].copy()),
        ("observation/state", obs["observation/state"] + np.float32(1e-3)),
        ("prompt", "b"),
    ]:
        if isinstance(value, np.ndarray) and value.dtype == np.uint8:
            value[0, 0, 0] ^= 1
        assert not np.array_equal(first, mock_actions(obs | {key: value}, INPUTS, 10, 7)), key


def test_mock_chunks_are_smooth_and_start_anywhere() -> None:
    """Consecutive actions differ by at most MOCK_MAX_STEP; chunk starts spread over [-1, 1)."""
    chunks = [mock_actions(make_obs(i), INPUTS, 10, 7) for i in range(20)]
    for chunk in chunks:
        assert np.abs(np.diff(chunk, axis=0)).max() <= MOCK_MAX_STEP + 1e-6
    starts = np.stack([chunk[0] for chunk in chunks])
    assert starts.min() < -0.5 and starts.max() > 0.5


def test_mock_inpaints_the_rtc_prefix_without_a_seam() -> None:
    """With rtc_prefix the chunk's first d rows are the prefix and the step from row d-1
    to row d is the chunk's own step; rtc keys do not change the underlying chunk."""
    fast = LinearProfileConfig(1e-4, 0.0)
    policy = MockPolicyConfig(latency_profile="linear", linear=fast).make()
    obs = make_obs(5)
    plain = policy.infer_batch([obs])[0]
    prefix = np.full((3, 7), 2.0, np.float32)
    remainder = np.zeros((4, 7), np.float32)
    joined = policy.infer_batch([obs | {"rtc_prefix": prefix, "rtc_remainder": remainder}])[0]
    np.testing.assert_array_equal(joined[:3], prefix)
    np.testing.assert_allclose(np.diff(joined[2:], axis=0), np.diff(plain[2:], axis=0), atol=1e-6)
    np.testing.assert_array_equal(inpaint_prefix(plain, np.zeros((0, 7), np.float32)), plain)


def test_mock_refuses_an_rtc_prefix_of_the_wrong_width() -> None:
    """rtc_prefix rows must have action_dim values; the error names the key."""
    obs = make_obs(0) | {"rtc_prefix": np.zeros((2, 3), np.float32)}
    with pytest.raises(ObservationError, match="rtc_prefix"):
        conform_observation(obs, INPUTS)


def test_mock_sleeps_for_the_profile_latency_of_the_batch_size() -> None:
    """A batch of b sleeps about intercept + slope * b (less the time spent hashing)."""
    slept: list[float] = []
    config = MockPolicyConfig(
        latency_profile="linear", linear=LinearProfileConfig(intercept_s=0.5, slope_s=0.25)
    )
    policy = MockPolicy(config, sleep=slept.append)
    chunks = policy.infer_batch([make_obs(i) for i in range(3)])
    assert len(chunks) == 3 and policy.batch_sizes == [3]
    assert 1.2 < slept[0] <= 1.25
    assert policy.metadata.latency_points == {1: 0.75, 2: 1.0}


def test_mock_waits_at_least_its_latency_without_oversleeping_much() -> None:
    """The default wait sleeps short of the end and yields until it: never early."""
    waits = []
    for seconds in (0.0, 0.0002, 0.01):
        started = time.perf_counter()
        sleep_precisely(seconds)
        waits.append(time.perf_counter() - started - seconds)
    assert min(waits) >= 0.0
    assert max(waits) < 0.5  # generous: a loaded machine may deschedule the thread


def test_mock_rejects_unknown_latency_profile() -> None:
    """An unknown preset names the valid ones."""
    with pytest.raises(ValueError, match="valid names: l40s-pi05, l40s-pi05-paper, linear"):
        MockPolicyConfig(latency_profile="h100")


def test_python_policy_config_calls_the_factory() -> None:
    """policy:python imports module:callable and calls it with the JSON kwargs."""
    config = PythonPolicyConfig(
        factory="server_harness:make_mock", kwargs='{"action_horizon": 4, "action_dim": 2}'
    )
    policy = config.make()
    assert (policy.metadata.action_horizon, policy.metadata.action_dim) == (4, 2)


@pytest.mark.parametrize(
    ("factory", "kwargs", "message"),
    [
        ("no_colon", "{}", "package.module:callable"),
        ("server_harness:make_mock", "[1]", "JSON object"),
        ("server_harness:make_mock", "{", "not JSON"),
    ],
)
def test_python_policy_config_names_bad_values(factory: str, kwargs: str, message: str) -> None:
    """Malformed factory names and kwargs are refused with the option's name."""
    with pytest.raises(ValueError, match=message):
        PythonPolicyConfig(factory=factory, kwargs=kwargs)


def test_python_policy_config_refuses_non_policies() -> None:
    """A factory that returns something else than a Policy is refused."""
    with pytest.raises(ValueError, match="not an armory Policy"):
        PythonPolicyConfig(factory="server_harness:make_obs", kwargs='{"seed": 1}').make()


def test_image_inputs_accept_jpeg_and_say_so_in_the_metadata() -> None:
    """Image inputs are marked "jpeg": true on the wire; JPEG bytes under one decode to
    the declared uint8 array; other inputs are not marked."""
    image_prep = pytest.importorskip("armory_client.image_prep")
    pytest.importorskip("PIL")
    assert INPUTS["observation/image"].to_wire()["jpeg"] is True
    assert "jpeg" not in INPUTS["observation/state"].to_wire()
    obs = make_obs(0)
    image = np.zeros((224, 224, 3), np.uint8)
    image[50:150, 60:120] = (200, 30, 90)
    obs["observation/image"] = image_prep.encode_jpeg(image, 95)
    out = conform_observation(obs, INPUTS)
    assert out["observation/image"].dtype == np.uint8
    assert np.abs(out["observation/image"].astype(int) - image).mean() < 2.0


@pytest.mark.parametrize(
    ("size", "match"),
    [((100, 100), r"expected shape \(224, 224, 3\)"), ((300, 300), "exceeds the limit")],
)
def test_jpeg_of_the_wrong_size_is_refused(size: tuple[int, int], match: str) -> None:
    """A JPEG smaller than declared fails validation; a larger one is refused unread."""
    image_prep = pytest.importorskip("armory_client.image_prep")
    pytest.importorskip("PIL")
    obs = make_obs(0)
    obs["observation/image"] = image_prep.encode_jpeg(np.zeros((*size, 3), np.uint8))
    with pytest.raises(ObservationError, match=match):
        conform_observation(obs, INPUTS)
