"""The `selected` scenario of tests/record_history.py, and its files (tests/test_selected_runs.py runs them live).

Three services and a shared library; the profile's pytest command is sharded in two and a docs command runs only
when docs/ changes. Lane `a` breaks svc_a (a wrong import): the selected check (svc_a's tests alone, those the
change reaches) is red and goes back to `a`, whose repair is green; the remainder (svc_b's and svc_c's tests) then
runs as two shards, in parallel, and the review shows the whole profile; an approval delivers.
"""

from __future__ import annotations

import sys
from pathlib import Path

from temporalio.client import Client

from reposwarm.contracts import Phase, ReviewDecision
from tests.helpers import finish, make_repo, start_run, turn, wait_for_phase, write_yaml

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
DOCS = [sys.executable, "-c", "print('docs built')"]
QUICK = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # (this venv's pytest plugins cost 1.5 s of CPU at every start)
FILES = {
    "pytest.ini": "[pytest]\npythonpath = .\n",
    "common/__init__.py": "",
    "common/util.py": "def double(x):\n    return 2 * x\n",
    "svc_a/__init__.py": "",
    "svc_a/core.py": "from common.util import double\n\n\ndef quad(x):\n    return double(double(x))\n",
    "svc_a/tests/test_a.py": "from svc_a.core import quad\n\n\ndef test_quad():\n    assert quad(2) == 8\n",
    "svc_b/__init__.py": "",
    "svc_b/core.py": "def hello(name):\n    return 'hi ' + name\n",
    "svc_b/tests/test_b.py": "from svc_b.core import hello\n\n\ndef test_hello():\n    assert hello('x') == 'hi x'\n",
    "svc_c/__init__.py": "",
    "svc_c/core.py": "def one():\n    return 1\n",
    "svc_c/tests/test_c.py": "from svc_c.core import one\n\n\ndef test_one():\n    assert one() == 1\n",
    "docs/guide.md": "# guide\n",
}
# svc_a imports a name common/util.py does not have: every test that imports svc_a fails
BROKEN = "from common.util import triple\n\n\ndef quad(x):\n    return triple(x)\n"
MENDED = "from common.util import double\n\n\ndef quad(x):\n    return double(x) + double(x)\n"


def lanes_file(tmp: Path) -> Path:
    return write_yaml(tmp / "lanes.yaml", {
        "swarm": {"max_parallel": 2, "max_helper_loops": 2, "lanes": {"a": {"allowed_paths": ["svc_a/"]}}},
        "validation": {"profiles": {"default": {"timeout_s": 120, "env": QUICK, "commands": [
            {"run": PYTEST, "shards": 2}, {"run": DOCS, "when": ["docs/**"]}]}}}})


def script_file(tmp: Path) -> Path:
    def write(call_id: str, text: str, why: str) -> dict:
        return turn((call_id, "write_file", {"path": "svc_a/core.py", "content": text, "reason": why}))

    return write_yaml(tmp / "replay.yaml", {"version": 1, "lanes": {"a": {
        1: [write("a1", BROKEN, "quad by a triple, as a first try"), finish("a2", "quad reworked")],
        "1.2": [write("a3", MENDED, "quad mended: double twice, summed"), finish("a4", "quad mended")]}}})


def plan_file(tmp: Path) -> Path:
    return write_yaml(tmp / "plan.yaml", {"interface_contract": "svc_a keeps quad.", "lanes": [
        {"lane": "a", "goal": "Rework quad in svc_a/core.py."}]})


async def start(client: Client, tmp: Path) -> str:
    repo = make_repo(tmp / "repo", FILES)
    return await start_run(client, repo, lanes_file(tmp), script_file(tmp), plan=plan_file(tmp))


async def selected(client: Client, tmp: Path) -> str:
    """The recorded scenario: the red selected check, the repair, the sharded remainder, an approval."""
    from tests.record_history import _decide, _result

    run_id = await start(client, tmp)
    status = await wait_for_phase(client, run_id, Phase.review, timeout=240)
    report = status.review.test_report if status.review is not None else None
    if report is None or not report.passed or not report.selection.startswith("whole profile"):
        raise AssertionError(f"selected: no whole-profile green check at review: {status.validations}")
    await _decide(client, run_id, ReviewDecision(approve=True, reviewer="recorder"), round_no=1)
    await _result(client, run_id)
    return run_id
