"""Replay recorded workflow histories against today's workflow code.

A change that would break runs already in flight (a non-deterministic change)
fails here. Guard such a change with `workflow.patched(...)` and record the new
version's histories into a folder of their own (`make record-history
VERSION=name`); never rewrite an earlier version's folder while runs of it may
still be open.

The recorder (tests/record_history.py) records several scenarios, each as
`<scenario>.<workflow>[.run<n>].json`; the folders recorded before it hold one
run as `swarm.json` and `<lane>.json`. So that a recorder that silently stops
recording a path fails here too, each scenario's swarm history is checked for
the events of the path it is there for, and the newest folder must hold every
scenario.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.lane import LaneWorkflow
from workflows.swarm import SwarmWorkflow

# One folder per recorded version: every earlier version's runs must still replay on today's code.
HISTORIES = sorted((Path(__file__).parent / "histories").glob("*/*.json"))
SCENARIOS = ("happy", "repair", "converge", "can", "expire", "moving", "replan")  # tests/record_history.py
NAME = re.compile(r"^(?P<scenario>[a-z_]+)\.(?P<workflow>.+?)(?:\.run(?P<run>\d+))?$")

E = EventType  # short for the checks below
Runs = dict[str, list[WorkflowHistory]]  # a scenario's workflows ("swarm", "api.r1", ...): their runs, oldest first


@cache
def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


def is_scenario_folder(folder: Path) -> bool:
    return not (folder / "swarm.json").exists()  # a folder of the one-run recorder has swarm.json


def scenario_runs(folder: Path) -> dict[str, Runs]:
    """A scenario folder's histories: scenario -> workflow -> its runs in order."""
    found: dict[str, dict[str, dict[int, WorkflowHistory]]] = {}
    for path in sorted(folder.glob("*.json")):
        match = NAME.match(path.stem)
        assert match, f"{path.name}: not <scenario>.<workflow>[.run<n>].json"
        runs = found.setdefault(match["scenario"], {}).setdefault(match["workflow"], {})
        runs[int(match["run"] or 1)] = load(path)
    for scenario, workflows in found.items():
        for workflow, runs in workflows.items():
            assert sorted(runs) == list(range(1, len(runs) + 1)), f"{folder.name}: {scenario}.{workflow}: a run missing"
    return {s: {w: [runs[i] for i in sorted(runs)] for w, runs in ws.items()} for s, ws in found.items()}


def recorded_at(folder: Path) -> str:
    """When the folder was recorded: its swarm histories' latest start (ISO 8601 sorts as text)."""
    swarms = [p for p in folder.glob("*.json") if p.stem == "swarm" or ".swarm" in p.stem]
    return max(load(p).events[0].event_time.ToJsonString() for p in swarms)


SCENARIO_FOLDERS = sorted({p.parent for p in HISTORIES if is_scenario_folder(p.parent)}, key=recorded_at)
SCENARIO_CASES = [(folder, s) for folder in SCENARIO_FOLDERS for s in scenario_runs(folder)]


# --- reading a history ---


def of(history: WorkflowHistory, *types: int) -> list[HistoryEvent]:
    return [e for e in history.events if e.event_type in types]


def data(payloads: Any) -> Any:
    return json.loads(payloads.payloads[0].data) if payloads.payloads else None


def activities(history: WorkflowHistory) -> list[tuple[str, Any]]:
    """Each scheduled activity: its name and input, in order."""
    return [(a.activity_type.name, data(a.input)) for e in of(history, E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
            for a in [e.activity_task_scheduled_event_attributes]]


def names(history: WorkflowHistory) -> list[str]:
    return [name for name, _ in activities(history)]


def activity_outcomes(history: WorkflowHistory, name: str) -> list[tuple[int, Any]]:
    """The named activity's ends: (event type, result) for each, in order."""
    scheduled = {e.event_id for e in of(history, E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
                 if e.activity_task_scheduled_event_attributes.activity_type.name == name}
    ends: list[tuple[int, Any]] = []
    for e in history.events:
        if e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            if e.activity_task_completed_event_attributes.scheduled_event_id in scheduled:
                ends.append((e.event_type, data(e.activity_task_completed_event_attributes.result)))
        elif e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            if e.activity_task_failed_event_attributes.scheduled_event_id in scheduled:
                ends.append((e.event_type, e.activity_task_failed_event_attributes.failure.message))
    return ends


def children(history: WorkflowHistory) -> list[str]:
    """The lanes the swarm started ("api.r1", "api.r1.a2", ...), in order."""
    own = history.events[0].workflow_execution_started_event_attributes.workflow_id
    return [e.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id.removeprefix(own + ".")
            for e in of(history, E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED)]


def decisions(history: WorkflowHistory) -> list[Any]:
    """The review decisions the swarm accepted (Updates), in order."""
    return [data(e.workflow_execution_update_accepted_event_attributes.accepted_request.input.args)
            for e in of(history, E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)]


def result(history: WorkflowHistory) -> Any:
    last = history.events[-1]
    assert last.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, E.Name(last.event_type)
    return data(last.workflow_execution_completed_event_attributes.result)


def order(history: WorkflowHistory, *steps: str) -> None:
    """The activities named (with `child:<lane>` for a lane started) appear in this order."""
    seen = []
    own = history.events[0].workflow_execution_started_event_attributes.workflow_id
    for e in history.events:
        if e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            a = e.activity_task_scheduled_event_attributes
            lane = (data(a.input) or {}).get("lane") if a.activity_type.name == "merge_lane" else None
            seen.append(f"merge_lane:{lane}" if lane else a.activity_type.name)
        elif e.event_type == E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
            wid = e.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id
            seen.append(f"child:{wid.removeprefix(own + '.')}")
        elif e.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            seen.append("decision")
        elif e.event_type == E.EVENT_TYPE_TIMER_FIRED:
            seen.append("timer_fired")
    at = 0
    for step in steps:
        assert step in seen[at:], f"{step} not after {steps[:steps.index(step)]} in {seen}"
        at = seen.index(step, at) + 1


# --- what each scenario's histories must hold ---


def check_happy(runs: Runs) -> None:
    [swarm] = runs["swarm"]
    assert children(swarm) == ["api.r1", "web.r1", "api.r2"]
    order(swarm, "prepare_run", "child:api.r1", "merge_lane:api", "child:web.r1",  # web depends on api
          "merge_lane:web", "publish_review", "decision", "plan_round", "child:api.r2", "publish_review",
          "decision", "deliver")
    assert [d["approve"] for d in decisions(swarm)] == [False, True]
    assert [t for t, _ in activity_outcomes(swarm, "plan_round")] == [E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]
    assert result(swarm)["delivered_branch"] and result(swarm)["rounds"] == 2


def check_repair(runs: Runs) -> None:
    [swarm] = runs["swarm"]
    # the baseline, the red check, the repair's green check
    order(swarm, "validate", "merge_lane:api", "validate", "attribute_failures", "child:api.r1.a2",
          "merge_lane:api", "validate", "publish_review", "decision", "deliver")
    assert sorted(children(swarm)) == ["api.r1", "api.r1.a2", "web.r1"]  # api alone was blamed
    (_, blamed), = activity_outcomes(swarm, "attribute_failures")
    assert list(blamed["by_lane"]) == ["api"]
    [repair_lane] = runs["api.r1.a2"]
    assert "attributed to your change" in data(repair_lane.events[0].workflow_execution_started_event_attributes
                                               .input)["goal"]
    assert result(swarm)["delivered_branch"]


def check_converge(runs: Runs) -> None:
    [swarm] = runs["swarm"]
    order(swarm, "merge_lane:a", "merge_lane:b", "resolve_conflict", "validate", "publish_review", "deliver")
    [(kind, resolution)] = activity_outcomes(swarm, "resolve_conflict")
    assert kind == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED and resolution["resolved"], resolution
    assert result(swarm)["delivered_branch"]


def check_can(runs: Runs) -> None:
    swarm = runs["swarm"]
    assert len(swarm) >= 2, "the swarm never continued as new"
    for earlier, later in zip(swarm, swarm[1:], strict=False):
        assert earlier.events[-1].event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        new_run = earlier.events[-1].workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        started = later.events[0].workflow_execution_started_event_attributes
        assert started.original_execution_run_id == new_run
        assert data(started.input)["resume"] is not None  # carried its state
    # between review rounds: round 1 and its rejection in the first history, round 2 and the approval after
    order(swarm[0], "child:api.r1", "publish_review", "decision")
    assert [d["approve"] for d in decisions(swarm[0])] == [False]
    order(swarm[-1], "plan_round", "child:api.r2", "publish_review", "decision", "deliver")
    assert result(swarm[-1])["rounds"] == 2
    lane = runs["api.r1"]
    assert len(lane) >= 2, "the lane never continued as new"
    for earlier, later in zip(lane, lane[1:], strict=False):
        assert earlier.events[-1].event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        resume = data(later.events[0].workflow_execution_started_event_attributes.input)["resume"]
        assert resume["turn"] > 0 and resume["continued"] >= 1  # mid-lane, carrying its turns
        assert "create_lane_worktree" not in names(later) and "model_turn" in names(later)
    assert result(lane[-1])["status"] == "done"


def check_expire(runs: Runs) -> None:
    [swarm] = runs["swarm"]
    order(swarm, "publish_review", "timer_fired")
    assert of(swarm, E.EVENT_TYPE_TIMER_STARTED) and not decisions(swarm)
    assert "deliver" not in names(swarm)
    assert result(swarm)["expired"] is True


def check_moving(runs: Runs) -> None:
    [swarm] = runs["swarm"]
    # refreshed (and checked) before the review, and again before delivery
    order(swarm, "child:api.r1", "validate", "look_at_base", "merge_lane:base", "validate", "publish_review",
          "decision", "look_at_base", "merge_lane:base", "validate", "deliver")
    moves = [r for t, r in activity_outcomes(swarm, "look_at_base")]
    assert all(m["commits"] >= 1 for m in moves) and len(moves) == 2
    assert result(swarm)["delivered_branch"]


def check_replan(runs: Runs) -> None:
    [swarm] = runs["swarm"]
    order(swarm, "child:api.r1", "publish_review", "decision", "plan_round", "decision", "child:api.r3",
          "publish_review", "decision", "deliver")
    [(kind, why)] = activity_outcomes(swarm, "plan_round")
    assert kind == E.EVENT_TYPE_ACTIVITY_TASK_FAILED and "no planner reply for round 2" in why
    first, handed, approved = decisions(swarm)
    assert not first["approve"] and first["plan"] is None
    assert not handed["approve"] and handed["plan"]["lanes"][0]["lane"] == "api"
    assert approved["approve"]
    assert children(swarm) == ["api.r1", "api.r3"]  # round 2 ran no lane
    assert result(swarm)["rounds"] == 3


CHECKS = {"happy": check_happy, "repair": check_repair, "converge": check_converge, "can": check_can,
          "expire": check_expire, "moving": check_moving, "replan": check_replan}
assert set(CHECKS) == set(SCENARIOS)


# --- the tests ---


def test_there_are_recorded_histories() -> None:
    folders = sorted({p.parent for p in HISTORIES})
    assert folders and SCENARIO_FOLDERS
    for folder in folders:
        stems = {p.stem for p in folder.glob("*.json")}
        if not is_scenario_folder(folder):  # the one-run recorder: the swarm, and lanes over two rounds
            assert "swarm" in stems and len(stems) >= 4, folder.name
            continue
        for scenario, workflows in scenario_runs(folder).items():
            assert scenario in SCENARIOS, f"{folder.name}: unknown scenario {scenario}"
            assert "swarm" in workflows and len(workflows) >= 2, f"{folder.name}: {scenario}: {sorted(workflows)}"
    newest = SCENARIO_FOLDERS[-1]
    missing = set(SCENARIOS) - set(scenario_runs(newest))
    assert not missing, f"{newest.name} (the newest recording) lacks scenario(s) {sorted(missing)}"


@pytest.mark.parametrize(("folder", "scenario"), SCENARIO_CASES, ids=lambda v: getattr(v, "name", v))
def test_a_scenario_holds_the_path_it_records(folder: Path, scenario: str) -> None:
    CHECKS[scenario](scenario_runs(folder)[scenario])


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: f"{p.parent.name}/{p.stem}")
async def test_recorded_history_replays(path: Path) -> None:
    replayer = Replayer(workflows=[SwarmWorkflow, LaneWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(load(path))
