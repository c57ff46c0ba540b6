"""How the LeRobot door maps a robot's task text onto the policy's inputs."""

from __future__ import annotations

import pytest
from lerobot_client.wire import robot_features

from armory.policies.base import STR_DTYPE, InputSpec
from armory.transports.lerobot_protocol import ObservationMapping, resolve_mapping

FEATURES = robot_features([f"joint_{i}.pos" for i in range(3)], {"front": (64, 64, 3)})
IMAGE = InputSpec(shape=(64, 64, 3), dtype="uint8")
STATE = InputSpec(shape=(3,))
TEXT = InputSpec(dtype=STR_DTYPE, required=False)


def inputs(**texts: InputSpec) -> dict[str, InputSpec]:
    return {"observation/image": IMAGE, "observation/state": STATE, **texts}


@pytest.mark.parametrize("name", ["prompt", "task", "instruction"])
def test_task_goes_to_the_policy_s_only_text_input(name: str) -> None:
    """policy:mock calls it prompt, policy:lerobot task: no option needed for either."""
    resolved = resolve_mapping(ObservationMapping(), FEATURES, inputs(**{name: TEXT}))
    assert resolved.prompt_input == name


def test_a_policy_without_text_input_gets_no_task() -> None:
    assert resolve_mapping(ObservationMapping(), FEATURES, inputs()).prompt_input is None


def test_two_text_inputs_need_the_mapping_to_name_one() -> None:
    two = inputs(prompt=TEXT, task=TEXT)
    with pytest.raises(ValueError, match=r"2 text inputs \(prompt, task\).*prompt_input"):
        resolve_mapping(ObservationMapping(), FEATURES, two)
    assert resolve_mapping(ObservationMapping(prompt_input="task"), FEATURES, two).prompt_input == (
        "task"
    )


@pytest.mark.parametrize("name", ["missing", "observation/state"])
def test_a_prompt_input_that_is_not_a_text_input_is_named_in_the_error(name: str) -> None:
    with pytest.raises(ValueError, match=rf"prompt_input '{name}' is not a text input.*task"):
        resolve_mapping(ObservationMapping(prompt_input=name), FEATURES, inputs(task=TEXT))
