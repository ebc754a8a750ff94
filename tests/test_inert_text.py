"""Model-written text is inert wherever a person reads it (issue 30.7).

A lane's finish summary and edit reasons carry a terminal retitle (OSC 0), a hidden link (OSC 8), a screen
clear (CSI 2J), a carriage return that would overwrite the line before it, and a bell. None of them reaches
`reposwarm review`, `reposwarm status`, the Web UI details or `git log` of the delivered branch.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from reposwarm.client import task_queue
from reposwarm.contracts import ChangeSet, FileEdit, Finish, Phase
from reposwarm.review.webui import md_escape
from reposwarm.text import inert, inert_line
from tests.helpers import ROOT, finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

OSC_TITLE = "\x1b]0;you have been owned\x07"
OSC_LINK = "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
CLEAR = "\x1b[2J\x1b[H"
HOSTILE = f"VERSION is 2{OSC_TITLE} {OSC_LINK}{CLEAR}\rall tests pass\x07 \x9b31m\x9d0;t\x9c"
FORBIDDEN = ("\x1b", "\x07", "\r", "\x9b", "\x9d", "\x9c")


def clean(text: str) -> bool:
    return not any(c in text for c in FORBIDDEN)


@pytest.mark.parametrize("text", [HOSTILE, OSC_TITLE, OSC_LINK, CLEAR, "a\x1b", "\x1b[", "\x1b]unended",
                                  "\x00\x01\x08\x0b\x0c\x0e\x1f\x7f\x85", "a\u202eb\u2066c"])
def test_inert_removes_every_sequence_and_control(text: str) -> None:
    out = inert(text)
    assert clean(out) and not any(ord(c) < 32 and c not in "\n\t" for c in out)
    assert not any(0x7F <= ord(c) < 0xA0 or c in "\u202e\u2066" for c in out)
    assert inert(out) == out  # idempotent


def test_inert_keeps_what_text_needs() -> None:
    assert inert("line one\n\tindented — ünïcode ✓") == "line one\n\tindented — ünïcode ✓"
    assert inert(HOSTILE).startswith("VERSION is 2 click") and "all tests pass" in inert(HOSTILE)
    assert inert_line("bob\n\tthe\x1b[1m reviewer") == "bob the reviewer"
    assert md_escape("a_b" + CLEAR) == "a\\_b"


def test_the_contracts_make_model_text_inert_and_never_refuse_it() -> None:
    done = Finish.model_validate({"summary": HOSTILE, "assumptions": [CLEAR + "x"]})
    assert clean(done.summary) and done.assumptions == ["x"]
    edit = FileEdit(path="a.py", operation="modify", reason=f"{OSC_TITLE}a reason long enough")
    assert edit.reason == "a reason long enough"
    changes = ChangeSet(task_id="t", summary=HOSTILE, assumptions=[OSC_LINK], edits=[edit])
    assert clean(changes.summary) and changes.assumptions == ["click"]


async def cli(client, *args: str) -> str:
    """The CLI in a process of its own; awaited, as the worker answering it runs on this event loop."""
    env = {**os.environ, "TEMPORAL_ADDRESS": client.service_client.config.target_host,
           "REPOSWARM_TASK_QUEUE": task_queue()}
    proc = await asyncio.create_subprocess_exec(sys.executable, str(ROOT / "starter.py"), *args, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()
    return out.decode()


@pytest.mark.usefixtures("worker")
@pytest.mark.timeout(300)
async def test_hostile_lane_text_reaches_no_terminal_and_no_commit(client, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "api/app.py exports VERSION.",
                                               "lanes": [{"lane": "api", "goal": "Set VERSION to 2."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("v1", "write_file", {"path": "api/app.py", "content": "VERSION = 2\n",
                                   "reason": f"Set VERSION to 2{CLEAR}\r{OSC_TITLE}as the goal says\x07"})),
        turn(("v2", "write_file", {"path": "api/extra.py", "content": "X = 1\n",
                                   "reason": f"{OSC_LINK} an extra module for the goal"})),
        finish("v3", HOSTILE)]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    lane = status.review.lanes[0]
    assert "all tests pass" in lane.summary and clean(lane.summary)  # the words stay, the escapes go
    assert all(clean(e.reason) for e in lane.edits) and len(lane.edits) == 2

    review = await cli(client, "review", run_id)
    assert "all tests pass" in review and clean(review), repr(review)
    shown = await cli(client, "status", run_id)
    assert run_id in shown and clean(shown), repr(shown)
    details = str(await client.get_workflow_handle(run_id).query("__temporal_workflow_metadata"))
    assert "WAITING FOR YOUR REVIEW" in details and clean(details.encode().decode("unicode_escape", "ignore"))

    approved = await cli(client, "approve", run_id)
    assert "delivered" in approved
    result = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).result()
    log = git(repo, "log", "--format=%B", result.delivered_branch)
    assert "all tests pass" in log and "as the goal says" in log and clean(log), repr(log)
    explained = await cli(client, "explain", run_id, "api/app.py")
    assert "as the goal says" in explained and clean(explained), repr(explained)
