"""Replay recorded workflow histories against today's workflow code.

A change that would break runs already in flight (a non-deterministic change)
fails here. Guard such a change with `workflow.patched(...)` and record the new
version's histories into a folder of their own (`make record-history
VERSION=name`); never rewrite an earlier version's folder while runs of it may
still be open. Once no open run predates a patch, it is folded and the
histories recorded again (docs/internals.md, "Changing a workflow").

The recorder (tests/record_history.py) records several scenarios, each as
`<scenario>.<workflow>[.run<n>].json`. So that a recorder that silently stops
recording a path fails here too, each scenario's swarm history is checked for
the events of the path it is there for, and the newest folder must hold every
scenario.

Lanes are warm by default (`swarm.warm_lanes`): a lane is one workflow for the
run (`<scenario>.api.json`), started at its first dispatch and sent each later
one (a repair, the next round) as an `assign` Signal, which it answers with a
`lane_done` Signal; the run's end sends it `retire`. The `cold` scenario runs
with cold lanes: a child workflow per dispatch (`cold.api.r1.json`,
`cold.api.r2.json`), its result the answer. The checks read a dispatch the same
way in both (`lane:api.r1.a2` below).
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

from tests.helpers import lane_starts, lanes_started
from workflows.lane import LaneWorkflow
from workflows.swarm import SwarmWorkflow

# One folder per recorded version: every earlier version's runs must still replay on today's code.
HISTORIES = sorted((Path(__file__).parent / "histories").glob("*/*.json"))
SCENARIOS = ("happy", "repair", "converge", "can", "expire", "moving", "replan", "proposal",
             "budget", "selected", "cold")  # tests/record_history.py
COLD_LANES = {"cold"}  # the scenarios whose lanes are cold: each dispatch of a lane a workflow of its own
NAME = re.compile(r"^(?P<scenario>[a-z_]+)\.(?P<workflow>.+?)(?:\.run(?P<run>\d+))?$")

E = EventType  # short for the checks below
Runs = dict[str, list[WorkflowHistory]]  # a scenario's workflows ("swarm", "api"; cold: "api.r1"): runs, oldest first


@cache
def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


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
    swarms = [p for p in folder.glob("*.json") if ".swarm" in p.stem]
    return max(load(p).events[0].event_time.ToJsonString() for p in swarms)


SCENARIO_FOLDERS = sorted({p.parent for p in HISTORIES}, key=recorded_at)
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


def started(history: WorkflowHistory) -> Any:
    """The workflow's input (its first run's: the request or the task; a later run's carries `resume`)."""
    return data(history.events[0].workflow_execution_started_event_attributes.input)


def short(task: dict) -> str:
    """A HelperTask's id without its run's: "api.r1", "api.r1.a2" (a repair), "api.r2" (the next round)."""
    return task["task_id"].removeprefix(task["run_id"] + ".")


def answer_id(answer: dict) -> str:
    """The task a LaneResult answers, without its run's id (the lane's name starts it)."""
    task_id = answer["changeset"]["task_id"]
    return task_id[task_id.index("." + answer["lane"] + ".") + 1:]


def children(history: WorkflowHistory) -> list[str]:
    """The lane workflows the swarm started ("api"; cold: "api.r1", "api.r1.a2", ...), in order: (cold) as its
    children, or (warm) by the client, together."""
    own = history.events[0].workflow_execution_started_event_attributes.workflow_id
    return [i.removeprefix(own + ".") for i in lanes_started(history.events)]


def sent_signals(history: WorkflowHistory, name: str) -> list[Any]:
    """The inputs of the Signals named `name` the workflow sent (SignalExternalWorkflowExecutionInitiated)."""
    return [data(a.input) for e in of(history, E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)
            for a in [e.signal_external_workflow_execution_initiated_event_attributes] if a.signal_name == name]


def signalled(history: WorkflowHistory, name: str) -> list[str]:
    """The workflows the workflow sent a Signal named `name`, without its own id ("api"), in order."""
    own = history.events[0].workflow_execution_started_event_attributes.workflow_id
    return [a.workflow_execution.workflow_id.removeprefix(own + ".")
            for e in of(history, E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)
            for a in [e.signal_external_workflow_execution_initiated_event_attributes] if a.signal_name == name]


def got_signals(history: WorkflowHistory, name: str) -> list[Any]:
    """The inputs of the Signals named `name` the workflow received (WorkflowExecutionSignaled)."""
    return [data(a.input) for e in of(history, E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
            for a in [e.workflow_execution_signaled_event_attributes] if a.signal_name == name]


def dispatched(e: HistoryEvent) -> list[str]:
    """The tasks a swarm's event sends lanes: a lane workflow started with it (a child, or by the client: lanes
    started together), or (warm) an `assign` Signal."""
    if e.event_type == E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
        return [short(data(e.start_child_workflow_execution_initiated_event_attributes.input))]
    if e.event_type == E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
        a = e.signal_external_workflow_execution_initiated_event_attributes
        return [short(data(a.input))] if a.signal_name == "assign" else []
    # a lane's id is <run>.<lane>, and a lane's name has no dot
    return [task.removeprefix(lane.rsplit(".", 1)[0] + ".") for lane, task in lane_starts(e).items()]


def answer(e: HistoryEvent) -> str | None:
    """The task a swarm's event brings a lane's answer to: (cold) its workflow's result, (warm) a `lane_done`."""
    if e.event_type == E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:  # (a warm lane's completing after `retire`
        a = e.child_workflow_execution_completed_event_attributes    # answers nothing: its id is not its task's)
        result = data(a.result)
        return answer_id(result) if result["changeset"]["task_id"] == a.workflow_execution.workflow_id else None
    if e.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
        a = e.workflow_execution_signaled_event_attributes
        return answer_id(data(a.input)) if a.signal_name == "lane_done" else None
    return None


def dispatches(history: WorkflowHistory) -> list[str]:
    """The tasks the swarm sent its lanes ("api.r1", "web.r1", "api.r1.a2", ...), in order."""
    return [d for e in history.events for d in dispatched(e)]


def answers(history: WorkflowHistory) -> list[str]:
    """The tasks the swarm's lanes answered, in order."""
    return [a for e in history.events if (a := answer(e))]


def assigned(history: WorkflowHistory) -> list[str]:
    """The tasks the swarm sent as `assign` Signals (warm: every dispatch after a lane's first)."""
    return [short(t) for t in sent_signals(history, "assign")]


def tasks_given(lane: list[WorkflowHistory]) -> list[dict]:
    """The HelperTasks a lane's workflow was given, in order: its input, then (warm) each `assign` it got."""
    return [started(lane[0])] + [t for run in lane for t in got_signals(run, "assign")]


def given(lane: list[WorkflowHistory]) -> list[str]:
    return [short(t) for t in tasks_given(lane)]


def task_of(runs: Runs, task: str) -> dict:
    """The HelperTask a lane was given as `task` ("api.r1.a2"): its workflow's input (cold) or an `assign` (warm)."""
    [found] = [t for w, lane in runs.items() if w != "swarm" for t in tasks_given(lane) if short(t) == task]
    return found


def decisions(history: WorkflowHistory) -> list[Any]:
    """The review decisions the swarm accepted (Updates), in order."""
    return [data(e.workflow_execution_update_accepted_event_attributes.accepted_request.input.args)
            for e in of(history, E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)]


def result(history: WorkflowHistory) -> Any:
    last = history.events[-1]
    assert last.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, E.Name(last.event_type)
    return data(last.workflow_execution_completed_event_attributes.result)


def order(history: WorkflowHistory, *steps: str) -> None:
    """The steps named appear in this order: activities (`merge_lane:<lane>` for a merge), `lane:<task>` for a task
    sent to a lane and `done:<task>` for its answer (a task without its run's id: `api.r1.a2`), `decision`,
    `timer_fired`."""
    seen = []
    for e in history.events:
        if e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            a = e.activity_task_scheduled_event_attributes
            lane = (data(a.input) or {}).get("lane") if a.activity_type.name == "merge_lane" else None
            seen.append(f"merge_lane:{lane}" if lane else a.activity_type.name)
        elif tasks := dispatched(e):
            seen += [f"lane:{task}" for task in tasks]
        elif task := answer(e):
            seen.append(f"done:{task}")
        elif e.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            seen.append("decision")
        elif e.event_type == E.EVENT_TYPE_TIMER_FIRED:
            seen.append("timer_fired")
    at = 0
    for step in steps:
        assert step in seen[at:], f"{step} not after {steps[:steps.index(step)]} in {seen}"
        at = seen.index(step, at) + 1


# --- what every scenario's histories must hold: its lanes' dispatches, cold or warm ---


def check_lanes(runs: Runs, warm: bool) -> None:
    """Every task sent to a lane reached it and was answered, the way the folder's lanes ran."""
    swarm = runs["swarm"]
    sent = [task for run in swarm for task in dispatches(run)]
    lanes = sorted(w for w in runs if w != "swarm")
    assert sorted(a for run in swarm for a in answers(run)) == sorted(sent), "a task not answered, or twice"
    if not warm:  # a workflow per task, named after it; its result the answer
        assert sorted(c for run in swarm for c in children(run)) == lanes == sorted(sent)
        assert not any(signalled(run, "retire") for run in swarm)
        return
    # one workflow per lane (<run>.<lane>), started at its first task by the client (no child: it outlives the
    # swarm's close or continue-as-new); each later task reaches it as an `assign` Signal, answered by a `lane_done`
    assert sorted(c for run in swarm for c in children(run)) == lanes == sorted({t.split(".")[0] for t in sent})
    assert not any(of(run, E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED) for run in swarm)
    for name in lanes:
        lane = runs[name]
        tasks = [t for t in sent if t.split(".")[0] == name]
        assert given(lane) == tasks, f"{name}: given {given(lane)}, sent {tasks}"
        assert [answer_id(a) for run in lane for a in sent_signals(run, "lane_done")] == tasks
        # the run's end retires it (its last Signal), and it completes with its last answer
        assert [e.workflow_execution_signaled_event_attributes.signal_name
                for e in of(lane[-1], E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)][-1] == "retire"
        assert answer_id(result(lane[-1])) == tasks[-1]
    # the run's end: a `retire` to each lane, the swarm's last commands
    last = swarm[-1]
    assert sorted(signalled(last, "retire")) == lanes
    tail = [e for e in last.events if e.event_type in COMMANDS][-len(lanes):]
    assert [e.signal_external_workflow_execution_initiated_event_attributes.signal_name for e in tail] == \
        ["retire"] * len(lanes), "the swarm did more after retiring its lanes"


COMMANDS = {E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, E.EVENT_TYPE_TIMER_STARTED, E.EVENT_TYPE_MARKER_RECORDED,
            E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
            E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED}  # the events of a workflow's own commands


# --- what each scenario's histories must hold ---


def check_happy(runs: Runs, warm: bool) -> None:
    [swarm] = runs["swarm"]
    assert dispatches(swarm) == ["api.r1", "web.r1", "api.r2"]
    order(swarm, "prepare_run", "lane:api.r1", "done:api.r1", "merge_lane:api", "lane:web.r1",  # web depends on api
          "merge_lane:web", "publish_review", "decision", "plan_round", "lane:api.r2", "done:api.r2",
          "publish_review", "decision", "deliver")
    if warm:  # round 2 reached api's workflow of round 1
        assert assigned(swarm) == ["api.r2"] and sorted(runs) == ["api", "swarm", "web"]
    assert [d["approve"] for d in decisions(swarm)] == [False, True]
    assert [t for t, _ in activity_outcomes(swarm, "plan_round")] == [E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]
    assert result(swarm)["delivered_branch"] and result(swarm)["rounds"] == 2


def check_repair(runs: Runs, warm: bool) -> None:
    [swarm] = runs["swarm"]
    # the baseline, the red check, the repair's green check
    order(swarm, "validate", "merge_lane:api", "validate", "attribute_failures", "lane:api.r1.a2",
          "done:api.r1.a2", "merge_lane:api", "validate", "publish_review", "decision", "deliver")
    assert sorted(dispatches(swarm)) == ["api.r1", "api.r1.a2", "web.r1"]  # api alone was blamed
    (_, blamed), = activity_outcomes(swarm, "attribute_failures")
    assert list(blamed["by_lane"]) == ["api"]
    if warm:  # the repair went to api's workflow as an `assign`, and it answered with a `lane_done`
        assert assigned(swarm) == ["api.r1.a2"] and given(runs["api"]) == ["api.r1", "api.r1.a2"]
        assert [answer_id(a) for a in got_signals(swarm, "lane_done") if a["lane"] == "api"] == ["api.r1", "api.r1.a2"]
    assert "attributed to your change" in task_of(runs, "api.r1.a2")["goal"]
    assert result(swarm)["delivered_branch"]


def check_converge(runs: Runs, warm: bool) -> None:
    [swarm] = runs["swarm"]
    order(swarm, "merge_lane:a", "merge_lane:b", "resolve_conflict", "validate", "publish_review", "deliver")
    [(kind, resolution)] = activity_outcomes(swarm, "resolve_conflict")
    assert kind == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED and resolution["resolved"], resolution
    assert sorted(dispatches(swarm)) == ["a.r1", "b.r1"]  # resolved: no lane redone
    assert result(swarm)["delivered_branch"]


def check_can(runs: Runs, warm: bool) -> None:
    swarm = runs["swarm"]
    assert len(swarm) >= 2, "the swarm never continued as new"
    for earlier, later in zip(swarm, swarm[1:], strict=False):
        assert earlier.events[-1].event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        new_run = earlier.events[-1].workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        begun = later.events[0].workflow_execution_started_event_attributes
        assert begun.original_execution_run_id == new_run
        assert data(begun.input)["resume"] is not None  # carried its state
    # between review rounds: round 1 and its rejection in the first history, round 2 and the approval after
    order(swarm[0], "lane:api.r1", "done:api.r1", "publish_review", "decision")
    assert [d["approve"] for d in decisions(swarm[0])] == [False]
    order(swarm[-1], "plan_round", "lane:api.r2", "done:api.r2", "publish_review", "decision", "deliver")
    assert result(swarm[-1])["rounds"] == 2
    if warm:  # the lane outlived the swarm's continue-as-new: round 2 reached it as an `assign`
        assert started(swarm[-1])["resume"]["warm_lanes"] == ["api"]
        assert not children(swarm[-1]) and assigned(swarm[-1]) == ["api.r2"]
    lane = runs["api" if warm else "api.r1"]
    assert len(lane) >= 2, "the lane never continued as new"
    kinds = set()
    for earlier, later in zip(lane, lane[1:], strict=False):
        assert earlier.events[-1].event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        resume = started(later)["resume"]
        if resume.get("reassigned"):  # between assignments: the next one ahead, its worktree brought to the new base
            kinds.add("between")
            assert got_signals(earlier, "assign")[-1]["task_id"] == started(later)["task_id"]
            assert resume["turn"] == 0 and resume["transcript_ref"]  # the conversation goes on
            assert "Next assignment for lane api" in resume["pending"][0]["content"]
            assert names(later)[0] == "create_lane_worktree" and "model_turn" in names(later)
        else:  # mid-lane, carrying its turns
            kinds.add("mid")
            assert resume["turn"] > 0 and resume["continued"] >= 1
            # it goes on with its turns, on its worktree (a later assignment in the same run makes its own)
            assert names(later)[0] != "create_lane_worktree" and "model_turn" in names(later)
    assert kinds == ({"mid", "between"} if warm else {"mid"}), kinds
    assert result(lane[-1])["status"] == "done"


def check_expire(runs: Runs, warm: bool) -> None:
    [swarm] = runs["swarm"]
    order(swarm, "publish_review", "timer_fired")
    assert of(swarm, E.EVENT_TYPE_TIMER_STARTED) and not decisions(swarm)
    assert "deliver" not in names(swarm)
    assert result(swarm)["expired"] is True  # (warm: its lane retired all the same, check_lanes)


def check_moving(runs: Runs, warm: bool) -> None:
    [swarm] = runs["swarm"]
    # refreshed (and checked) before the review, and again before delivery
    order(swarm, "lane:api.r1", "validate", "look_at_base", "merge_lane:base", "validate", "publish_review",
          "decision", "look_at_base", "merge_lane:base", "validate", "deliver")
    moves = [r for t, r in activity_outcomes(swarm, "look_at_base")]
    assert all(m["commits"] >= 1 for m in moves) and len(moves) == 2
    assert result(swarm)["delivered_branch"]


def check_replan(runs: Runs, warm: bool) -> None:
    [swarm] = runs["swarm"]
    order(swarm, "lane:api.r1", "publish_review", "decision", "plan_round", "decision", "lane:api.r3",
          "done:api.r3", "publish_review", "decision", "deliver")
    [(kind, why)] = activity_outcomes(swarm, "plan_round")
    assert kind == E.EVENT_TYPE_ACTIVITY_TASK_FAILED and "no planner reply for round 2" in why
    first, handed, approved = decisions(swarm)
    assert not first["approve"] and first["plan"] is None
    assert not handed["approve"] and handed["plan"]["lanes"][0]["lane"] == "api"
    assert approved["approve"]
    assert dispatches(swarm) == ["api.r1", "api.r3"]  # round 2 ran no lane
    if warm:
        assert assigned(swarm) == ["api.r3"]
    assert result(swarm)["rounds"] == 3


def check_proposal(runs: Runs, warm: bool) -> None:
    [swarm] = runs["swarm"]
    assert started(swarm)["propose"] is not None and started(swarm)["config"]["swarm"]["lanes"] == {}
    # proposed before anything else, the person's edit taken (an Update) and checked, then the run's steps
    order(swarm, "propose_lanes", "decision", "check_proposal_edit", "prepare_run", "lane:api.r1", "done:api.r1",
          "merge_lane:api", "lane:web.r1", "merge_lane:web", "publish_review", "decision", "deliver")
    assert "plan_round" not in names(swarm)  # round 1 ran the proposal's plan
    edit, approval = decisions(swarm)
    assert edit["accept"] and "web/client.py" in edit["lanes_yaml"] and approval["approve"]
    assert task_of(runs, "web.r1")["allowed_paths"] == ["web/client.py"]  # the edit's slice
    [(kind, checked)] = activity_outcomes(swarm, "check_proposal_edit")
    assert kind == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED and checked["problems"] == [], checked
    assert result(swarm)["delivered_branch"]


def check_budget(runs: Runs, warm: bool) -> None:
    [swarm] = runs["swarm"]
    # the shared prefix written before the lanes start, then both lanes; api paused, raised by the Update, done
    order(swarm, "prepare_run", "warm_prefix", "lane:api.r1", "decision", "done:api.r1", "publish_review", "decision",
          "deliver")
    pauses = got_signals(swarm, "lane_paused")
    assert [(p["lane"], p["what"], p.get("cleared", False)) for p in pauses] == [("api", "tokens", False),
                                                                               ("api", "tokens", True)]
    raised, _approval = decisions(swarm)
    assert raised["lane"] == "api" and raised["raise_factor"] == 2
    lane = runs["api"]
    assert [s["raise_factor"] for run in lane for s in got_signals(run, "budget")] == [2]
    # every turn asked once: it went on where it stopped (a model_turn's result holds the turns it went on to)
    assert sum(1 + len(r.get("then", [])) for _, r in activity_outcomes(lane[-1], "model_turn")
               if isinstance(r, dict)) == 4
    assert result(lane[-1])["status"] == "done"
    assert result(swarm)["delivered_branch"]


def check_selected(runs: Runs, warm: bool) -> None:
    [swarm] = runs["swarm"]
    # the baseline; the selected red check and its repair's green one; the remainder's two shards; the approval
    order(swarm, "validate", "plan_check", "validate", "attribute_failures", "lane:a.r1.a2", "done:a.r1.a2",
          "plan_check", "validate", "plan_check", "validate", "validate", "publish_review", "decision", "deliver")
    checks = [i for n, i in activities(swarm) if n == "validate"]
    assert [c["label"] for c in checks] == ["baseline", "round 1 check 1", "round 1 check 2",
                                            "round 1 check 2 remainder shard 1 of 2",
                                            "round 1 check 2 remainder shard 2 of 2"]
    assert all(c["part"] for c in checks[1:]) and not checks[0].get("part")
    # the two shards ran side by side: both scheduled before either completed
    shard_ids = [e.event_id for e in of(swarm, E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
                 if e.activity_task_scheduled_event_attributes.activity_type.name == "validate"][-2:]
    first_done = min(e.event_id for e in of(swarm, E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
                     if e.activity_task_completed_event_attributes.scheduled_event_id in shard_ids)
    assert max(shard_ids) < first_done
    assert {e.activity_task_scheduled_event_attributes.task_queue.name.rsplit(".", 1)[-1] for e in of(
        swarm, E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) if e.event_id in shard_ids} == {"checks"}  # (the check slots)
    assert result(swarm)["delivered_branch"]


CHECKS = {"selected": check_selected, "budget": check_budget, "happy": check_happy, "repair": check_repair,
          "converge": check_converge, "can": check_can, "expire": check_expire, "moving": check_moving,
          "replan": check_replan, "proposal": check_proposal, "cold": check_happy}
assert set(CHECKS) == set(SCENARIOS)


# --- the tests ---


def test_there_are_recorded_histories() -> None:
    assert SCENARIO_FOLDERS
    for folder in SCENARIO_FOLDERS:
        for scenario, workflows in scenario_runs(folder).items():
            assert scenario in SCENARIOS, f"{folder.name}: unknown scenario {scenario}"
            assert "swarm" in workflows and len(workflows) >= 2, f"{folder.name}: {scenario}: {sorted(workflows)}"
    newest = SCENARIO_FOLDERS[-1]
    missing = set(SCENARIOS) - set(scenario_runs(newest))
    assert not missing, f"{newest.name} (the newest recording) lacks scenario(s) {sorted(missing)}"


@pytest.mark.parametrize(("folder", "scenario"), SCENARIO_CASES, ids=lambda v: getattr(v, "name", v))
def test_a_scenario_holds_the_path_it_records(folder: Path, scenario: str) -> None:
    runs, warm = scenario_runs(folder)[scenario], scenario not in COLD_LANES
    check_lanes(runs, warm)
    CHECKS[scenario](runs, warm)


def patches(history: WorkflowHistory) -> set[str]:
    """The patches the run asked about (workflow.patched), from their markers."""
    return {json.loads(m.details["patch-data"].payloads[0].data)["id"]
            for e in of(history, E.EVENT_TYPE_MARKER_RECORDED) for m in [e.marker_recorded_event_attributes]
            if m.marker_name == "core_patch"}


def calls_run_apart(history: WorkflowHistory) -> set[str]:
    """The ids of the tool calls a lane ran as activities (run_tool) or local activities."""
    ids = {args["call"]["id"] for name, args in activities(history) if name == "run_tool"}
    for e in of(history, E.EVENT_TYPE_MARKER_RECORDED):
        m = e.marker_recorded_event_attributes
        if m.marker_name == "core_local_activity" and "result" in m.details:
            called = json.loads(m.details["result"].payloads[0].data)
            if isinstance(called, dict) and "call_id" in called:  # (a tool's outcome: not describe_lane's result)
                ids.add(called["call_id"])
    return ids


@pytest.mark.parametrize("folder", SCENARIO_FOLDERS, ids=lambda f: f.name)
def test_quick_calls_run_in_their_model_turn(folder: Path) -> None:
    """Where a lane's runs asked for patch "tools-in-turn", its quick calls after the first turn ran in the model
    turn that made them (the turn's result carries their outcomes), and no call ran twice."""
    from workflows.lane import QUICK_TOOLS

    lanes = [h for w, hs in scenario_runs(folder)["happy"].items() if w != "swarm" for h in hs]
    patched = [h for h in lanes if "tools-in-turn" in patches(h)]
    if not patched:
        assert folder != SCENARIO_FOLDERS[-1], "the newest recording predates patch tools-in-turn"
        return
    ran_in_turn = 0
    for history in patched:
        in_turn = [o for _, result in activity_outcomes(history, "model_turn") if isinstance(result, dict)
                   for o in result.get("outcomes", [])]
        assert all(o["name"] in QUICK_TOOLS for o in in_turn), in_turn
        assert not {o["call_id"] for o in in_turn} & calls_run_apart(history)
        ran_in_turn += len(in_turn)
    assert ran_in_turn, "no lane ran a quick call in its model turn"


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: f"{p.parent.name}/{p.stem}")
async def test_recorded_history_replays(path: Path) -> None:
    replayer = Replayer(workflows=[SwarmWorkflow, LaneWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(load(path))


@pytest.mark.parametrize("folder", SCENARIO_FOLDERS, ids=lambda f: f.name)
def test_a_first_turn_makes_its_worktree(folder: Path) -> None:
    """Where a lane's run asked for patch "worktree-in-turn", its first assignment's worktree was made by its first
    model_turn (the result says where), with no create_lane_worktree activity before it."""
    lanes = [hs[0] for w, hs in scenario_runs(folder)["happy"].items() if w != "swarm"]
    patched = [h for h in lanes if "worktree-in-turn" in patches(h)]
    if not patched:
        assert folder != SCENARIO_FOLDERS[-1], "the newest recording predates patch worktree-in-turn"
        return
    for history in patched:
        assert names(history)[0] == "model_turn", names(history)
        first = activity_outcomes(history, "model_turn")[0][1]
        assert isinstance(first, dict) and first["worktree"]["shared_queue"] is True, first
