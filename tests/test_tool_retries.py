"""A tool call whose attempt died after writing and before recording its outcome runs again as the first did.

The run_tool activity is run as Temporal runs it (temporalio.testing.ActivityEnvironment) on a real worktree.
What a killed attempt leaves is made by running the call and removing its recorded outcome, which is the one
thing the attempt would not have written had it died between its write and its record.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.repo import lane_worktree_path
from activities.tool_call import outcome_path, run_tool
from reposwarm.contracts import ToolCall, ToolInput
from reposwarm.runs import ledger
from reposwarm.runs.store import run_dir
from tests.helpers import make_repo


def call(run_id: str, call_id: str, name: str, arguments: dict) -> ToolInput:
    return ToolInput(run_id=run_id, lane="api", call=ToolCall(id=call_id, name=name, arguments=arguments),
                     turn=1, allowed_paths=["api/"], read_only_paths=["docs/"])


def lose_the_record(run_id: str, call_id: str) -> None:
    outcome = outcome_path(run_id, "api", 1, 1, 1, call_id)
    assert outcome.exists()
    outcome.unlink()


@pytest.mark.parametrize(("name", "arguments", "after"), [
    ("edit_file", {"path": "api/app.py", "old": "VERSION = 1", "new": "VERSION = 2",
                   "reason": "Bump the API's version"}, "VERSION = 2\n"),
    ("write_file", {"path": "api/new.py", "content": "NEW = True\n", "reason": "A module the API needs"}, None),
    ("delete_file", {"path": "api/old.py", "reason": "The old module is replaced"}, None),
])
def test_a_write_run_again_after_its_attempt_died_lands_once(reposwarm_home: Path, name, arguments, after):
    run_id = f"retry-{uuid.uuid4().hex[:8]}"
    worktree = make_repo(lane_worktree_path(run_id, "api"), {"api/app.py": "VERSION = 1\n", "api/old.py": "OLD\n",
                                                             "docs/a.md": "a\n"})
    env = ActivityEnvironment()
    req = call(run_id, "c1", name, arguments)
    first = env.run(run_tool, req)
    assert first.ok, first.output
    expected = {"api/app.py": after or "VERSION = 1\n", "api/new.py": "NEW = True\n" if name == "write_file" else None,
                "api/old.py": None if name == "delete_file" else "OLD\n"}

    def state() -> dict[str, str | None]:
        return {p: (worktree / p).read_text() if (worktree / p).exists() else None for p in expected}

    assert state() == expected
    lose_the_record(run_id, "c1")
    again = env.run(run_tool, req)
    assert again.ok, again.output  # not "`old` occurs 0 times" or "no such file"
    assert again.output == first.output and again.edit == first.edit
    assert state() == expected
    assert [e["call_id"] for e in ledger.read(run_id) if e["event"] == "tool_call"] == ["c1"]


def test_a_refused_write_notes_nothing_and_changes_nothing(reposwarm_home: Path):
    run_id = f"retry-{uuid.uuid4().hex[:8]}"
    worktree = make_repo(lane_worktree_path(run_id, "api"), {"api/app.py": "VERSION = 1\n", "docs/a.md": "a\n"})
    env = ActivityEnvironment()
    out = env.run(run_tool, call(run_id, "c1", "write_file", {"path": "docs/a.md", "content": "b\n"}))
    assert out.refused and (worktree / "docs/a.md").read_text() == "a\n"
    assert not list((run_dir(run_id) / "tool-outcomes" / "api").glob("*.before"))
