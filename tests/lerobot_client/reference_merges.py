"""LeRobot 0.6.1's own robot-side classes on numbers Armory's test chooses.

Runs in the LeRobot environment (scripts/lerobot-env.sh). Reads a JSON map on stdin
and prints a JSON map with, for each entry asked:

- ``ensemble`` ``{"coeff", "chunks": (T, N, D)}``: the T actions ACT's
  ``ACTTemporalEnsembler(coeff, N)`` returns when fed one chunk per step;
- ``rtc_queue`` ``{"chunks": (K, N, D), "plan": [[gap, delay], ...] (K - 1)}``: the
  actions an RTC ``ActionQueue`` plays when chunk 0 lands on an idle robot, then for
  each later chunk the robot plays ``gap`` actions, asks, plays ``delay`` more while
  the policy runs, and the chunk is merged with ``real_delay=delay``; then the queue
  is played out;
- ``prefix_weights`` ``[[start, end, total, schedule], ...]``: RTC's
  ``get_prefix_weights`` for each.
"""

from __future__ import annotations

import json
import sys

import torch
from lerobot.configs.types import RTCAttentionSchedule
from lerobot.policies.act.modeling_act import ACTTemporalEnsembler
from lerobot.policies.rtc.action_queue import ActionQueue
from lerobot.policies.rtc.configuration_rtc import RTCConfig
from lerobot.policies.rtc.modeling_rtc import RTCProcessor


def ensemble(coeff: float, chunks: list) -> list:
    tensor = torch.tensor(chunks, dtype=torch.float32)
    ensembler = ACTTemporalEnsembler(coeff, tensor.shape[1])
    return [ensembler.update(chunk.unsqueeze(0))[0].tolist() for chunk in tensor]


def rtc_queue(chunks: list, plan: list) -> list:
    tensor = torch.tensor(chunks, dtype=torch.float32)
    queue = ActionQueue(RTCConfig(enabled=True))
    played: list = []

    def play(num_actions: int) -> None:
        for _ in range(num_actions):
            action = queue.get()
            played.append(None if action is None else action.tolist())

    queue.merge(tensor[0], tensor[0], 0)
    for chunk, (gap, delay) in zip(tensor[1:], plan, strict=True):
        play(gap)
        before = queue.get_action_index()
        play(delay)
        queue.merge(chunk, chunk, delay, action_index_before_inference=before)
    play(queue.qsize())
    return played


def prefix_weights(cases: list) -> list:
    out = []
    for start, end, total, schedule in cases:
        config = RTCConfig(prefix_attention_schedule=RTCAttentionSchedule[schedule.upper()])
        out.append(RTCProcessor(config).get_prefix_weights(start, end, total).tolist())
    return out


def main() -> None:
    asked = json.load(sys.stdin)
    out = {}
    if "ensemble" in asked:
        out["ensemble"] = ensemble(asked["ensemble"]["coeff"], asked["ensemble"]["chunks"])
    if "rtc_queue" in asked:
        out["rtc_queue"] = rtc_queue(asked["rtc_queue"]["chunks"], asked["rtc_queue"]["plan"])
    if "prefix_weights" in asked:
        out["prefix_weights"] = prefix_weights(asked["prefix_weights"])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
