"""Replay recorded workflow histories against today's workflow code.

A change that would break runs already in flight (a non-deterministic change)
fails here. Guard such a change with `workflow.patched(...)` and record the new
version's histories into a folder of their own (`make record-history
VERSION=name`); never rewrite an earlier version's folder while runs of it may
still be open.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.lane import LaneWorkflow
from workflows.swarm import SwarmWorkflow

# One folder per recorded version: every earlier version's runs must still replay on today's code.
HISTORIES = sorted((Path(__file__).parent / "histories").glob("*/*.json"))


def test_there_are_recorded_histories():
    names = {p.stem for p in HISTORIES}
    assert "swarm" in names and len(names) >= 4  # the swarm, and lanes over two rounds


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: f"{p.parent.name}/{p.stem}")
async def test_recorded_history_replays(path: Path):
    replayer = Replayer(workflows=[SwarmWorkflow, LaneWorkflow], data_converter=pydantic_data_converter)
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    await replayer.replay_workflow(history)
