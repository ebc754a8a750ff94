"""The demo's replay checker (reposwarm/demo/verify_replay.py, which docs/trying.md offers as a model for checking
one's own script) knows every tool a lane has, as reposwarm.agent.specs defines them, and refuses what the swarm
would refuse; and the demo's own script passes it, its checks run for real on the example repository."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from reposwarm.agent.specs import TOOL_ARGS
from reposwarm.demo import verify_replay

DEMO = Path(verify_replay.__file__).parent
LANES = yaml.safe_load((DEMO / "lanes.yaml").read_text())["swarm"]["lanes"]
# one valid call of each tool (the checker's WRITES need a reason of 12 characters or more)
VALID: dict[str, dict[str, Any]] = {
    "read_file": {"path": "db/migrate.py", "start_line": 1, "end_line": 5},
    "list_dir": {},
    "search": {"pattern": "priority", "paths": ["db/"]},
    "symbol_lookup": {"symbol": "migrate"},
    "write_file": {"path": "db/x.py", "content": "X = 1\n", "reason": "a file for the check"},
    "edit_file": {"path": "db/x.py", "old": "1", "new": "2", "reason": "an edit for the check"},
    "delete_file": {"path": "db/x.py", "reason": "a removal for the check"},
    "run_checks": {"tests": ["db/tests/test_migrations.py"], "scope": "all"},
    "run": {"command": ["python3", "-c", "print(1)"], "timeout_s": 30},
    "finish": {"summary": "done", "assumptions": ["none"]},
}


def script(calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """A replay script whose db_migration lane makes these calls in one turn, then finishes."""
    tool_calls = [{"id": f"c{i}", "name": name, "arguments": args} for i, (name, args) in enumerate(calls)]
    tool_calls.append({"id": "c-end", "name": "finish", "arguments": {"summary": "done"}})
    return {"version": 1, "lanes": {"db_migration": {1: [{"tool_calls": tool_calls}]}}}


def test_every_tool_a_lane_has_is_known_to_the_checker() -> None:
    assert set(VALID) == set(TOOL_ARGS)  # a new tool needs a line here: the checker takes it from the specs
    scripts = verify_replay.check_script(script([(name, args) for name, args in VALID.items() if name != "finish"]),
                                         LANES)
    assert [c["name"] for c in scripts["db_migration"][0]["tool_calls"]][:-1] == [n for n in VALID if n != "finish"]


@pytest.mark.parametrize(("call", "said"), [
    (("rm_rf", {"path": "."}), "unknown tool 'rm_rf' (the tools: read_file,"),
    (("run", {}), "run's arguments: command: Field required"),
    (("run", {"command": []}), "an argv list starts with the program to run"),
    (("run", {"command": "ls", "shell": True}), "shell: Extra inputs are not permitted"),
    (("run_checks", {"scope": "some"}), "run_checks's arguments: scope:"),
    (("read_file", {"path": "a", "start_line": 0}), "start_line: Input should be greater than or equal to 1"),
    (("write_file", {"path": "db/x.py", "content": "", "reason": "short"}), "reason must be at least 12 characters"),
])
def test_what_the_swarm_refuses_the_checker_refuses(call: tuple[str, dict[str, Any]], said: str) -> None:
    with pytest.raises(verify_replay.ReplayError) as refused:
        verify_replay.check_script(script([call]), LANES)
    assert said in str(refused.value), refused.value


def test_the_demo_s_own_script_applies_and_its_checks_pass(tmp_path: Path) -> None:
    replay = yaml.safe_load((DEMO / "replay.yaml").read_text())
    assert verify_replay.check_script(copy.deepcopy(replay), LANES).keys() == set(verify_replay.DEFAULT_ORDER)
    done = subprocess.run([sys.executable, "-m", "reposwarm.demo.verify_replay"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "OK: replay applies cleanly and all validation commands pass"
    assert done.stdout.count("PASS  ") == 3 and "FAIL" not in done.stdout, done.stdout
