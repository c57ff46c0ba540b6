"""The live dashboard in a real browser (Debian's headless Chromium): a server and a
small fleet, the page's live rows checked against /stats, a screenshot saved.

Without a browser the test is skipped with the reason, except in CI (CI=true), where
scripts/test.sh installs one and its absence fails the run. The screenshot goes to
$ARMORY_SCREENSHOT_DIR when set (docs/dashboard.png is made that way), else to the
test's temporary folder.
"""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from armory_client.runtime import RuntimeConfig
from headless_chromium import HeadlessChromium, find_chromium, in_ci
from server_harness import run_runtimes, running_server

ROWS = """[...document.querySelectorAll('#robots tbody tr')].map(tr => ({
    robot: tr.dataset.robot, door: tr.dataset.door, status: tr.dataset.status,
    control_hz: Number(tr.dataset.controlHz), weight: Number(tr.dataset.weight),
    requests: Number(tr.dataset.requests)}))"""
RULES = """Object.fromEntries([...document.querySelectorAll('#rules tbody tr')]
    .map(tr => [tr.dataset.rule, tr.cells[2].textContent]))"""
HISTOGRAM = """Object.fromEntries([...document.querySelectorAll('#batch-hist .col')]
    .map(c => [c.dataset.size, Number(c.dataset.count)]))"""

FLEET = [
    # name, Hz, min and max execution horizon, weight, seconds
    ("arm-30hz", 30.0, 4, 10, 2.0, 14.0),
    ("arm-20hz", 20.0, 4, 10, 1.0, 14.0),
    ("base-10hz", 10.0, 2, 10, 1.0, 14.0),
    ("gripper-60hz", 60.0, 1, 2, 1.0, 14.0),  # 2 actions at 60 Hz: starves
    ("visitor", 20.0, 4, 10, 1.0, 2.0),  # leaves early: marked disconnected
]


def browser() -> str:
    binary = find_chromium()
    if binary is None:
        message = "no Chromium installed (scripts/test.sh installs Debian's chromium as root)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return binary


def stats(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as response:
        return json.load(response)


def test_dashboard_shows_the_live_fleet_in_chromium(tmp_path: Path) -> None:
    """Every robot of a running fleet appears as a live row whose door, rate and weight are
    /stats's; the starving robot and the one that left are marked; the batch histogram
    counts no more batches than /stats; each rule shows what share of its decisions it
    changed (the server explains its rules); a screenshot is saved."""
    binary = browser()
    configs = [
        RuntimeConfig(
            robot_id=name,
            control_hz=hz,
            min_execution_horizon=low,
            max_execution_horizon=high,
            weight=weight,
            duration_s=seconds,
        )
        for name, hz, low, high, weight, seconds in FLEET
    ]
    with running_server(max_batch_size=4, explain_rules=True) as server:
        fleet = threading.Thread(target=run_runtimes, args=(server.port, configs), daemon=True)
        fleet.start()
        try:
            with HeadlessChromium(binary, tmp_path / "profile") as page:
                page.open(f"http://127.0.0.1:{server.port}/dashboard")
                page.wait_for("document.getElementById('feed').textContent === 'live'")
                page.wait_for(
                    f"{ROWS}.filter(r => r.status !== 'disconnected').length === 4 && "
                    f"{ROWS}.some(r => r.robot === 'visitor' && r.status === 'disconnected') &&"
                    f"{ROWS}.some(r => r.status === 'starving')",
                    timeout_s=40,
                )
                updates = int(page.evaluate("document.body.dataset.updates"))
                page.wait_for(f"Number(document.body.dataset.updates) >= {updates + 4}")
                rows = page.evaluate(ROWS)
                histogram = page.evaluate(HISTOGRAM)
                rules = page.evaluate(RULES)
                busy_points = page.evaluate(
                    "document.querySelector('#busy-chart polyline')"
                    ".getAttribute('points').split(' ').length"
                )
                after = stats(server.port)
                out = Path(os.environ.get("ARMORY_SCREENSHOT_DIR") or tmp_path)
                out.mkdir(parents=True, exist_ok=True)
                page.screenshot(out / "dashboard.png")
        finally:
            fleet.join(30)

    by_name = {r["robot"]: r for r in after["robots"]}
    assert {r["robot"] for r in rows} == set(by_name) == {name for name, *_ in FLEET}
    for row in rows:
        served = by_name[row["robot"]]
        assert row["door"] == served["door"] == "openpi"
        assert row["control_hz"] == served["control_hz"]
        assert row["weight"] == served["weight"]
        assert 0 < row["requests"] <= served["num_requests"]
        assert (row["status"] == "disconnected") == (not served["connected"])
    assert by_name["visitor"]["connected"] is False
    assert sum(histogram.values()) <= after["num_batches"]
    assert sum(histogram.values()) > 0
    assert busy_points >= 4
    # Explained, every rule's row says what share of its decisions differ from on-time's:
    # none of on-time's own.
    assert rules and set(rules) <= set(after["rule_changes"])
    assert rules.get("on-time", "0% changed") == "0% changed"
    assert all(re.fullmatch(r"\d+% changed", text) for text in rules.values())
    assert (out / "dashboard.png").stat().st_size > 10_000


def test_dashboard_behind_the_api_key_goes_live_with_the_browsers_login(tmp_path: Path) -> None:
    """With --api-key the browser's Basic credentials (any user, the key as password) open
    the page, its script and its live feed."""
    binary = browser()
    configs = [
        RuntimeConfig(
            robot_id="keyed",
            control_hz=20.0,
            max_execution_horizon=10,
            min_execution_horizon=4,
            duration_s=8.0,
        )
    ]
    with running_server(api_key="k-42") as server:
        fleet = threading.Thread(
            target=run_runtimes,
            args=(server.port, configs),
            kwargs={"api_key": "k-42"},
            daemon=True,
        )
        fleet.start()
        try:
            with HeadlessChromium(binary, tmp_path / "profile") as page:
                page.open(f"http://operator:k-42@127.0.0.1:{server.port}/dashboard")
                page.wait_for("document.getElementById('feed').textContent === 'live'")
                page.wait_for(f"{ROWS}.some(r => r.robot === 'keyed')")
        finally:
            fleet.join(30)
