"""Issue 36 item 1: a shell in the sandbox, the lanes' `run` tool (reposwarm/agent/shell.py), for real.

Real bubblewrap, real processes, a real git repository with a linked worktree under REPOSWARM_HOME as a lane's;
and a real swarm run on the session's Temporal dev server for the issue's own check: a lane that must run a code
generator and one test file to finish its goal delivers. What a command could see or do is judged from the host
(files it wrote there, a socket it could have reached, the processes left), never from its own word alone.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from pathlib import Path

import pytest

from reposwarm.agent.shell import HEAD_CHARS, OFF, TAIL_CHARS
from reposwarm.agent.specs import TOOL_ARGS, parse_args, tool_specs
from reposwarm.agent.tools import Toolbox
from reposwarm.checks import sandbox
from reposwarm.contracts import CheckProfile, LaneStatus, Phase
from reposwarm.review.package import render_review
from reposwarm.runs import ledger
from reposwarm.slices.policy import PathPolicy, ToolRefused
from tests.helpers import finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap is Linux-only")
PY = sys.executable
FAKE_KEY = "sk-" + "shell-tool-fake-key-" + uuid.uuid4().hex  # fake
GEN = "open('api/generated.py', 'w').write('VALUES = [1, 2, 3]\\n')\nprint('generated api/generated.py')\n"
TEST_GEN = "from api.generated import VALUES\n\n\ndef test_values():\n    assert VALUES == [1, 2, 3]\n"
FILES = {"README.md": "# the user's checkout\n", ".gitignore": "__pycache__/\n.pytest_cache/\n",
         "api/__init__.py": "", "api/app.py": "VERSION = 1\n", "gen.py": GEN, "tests/test_gen.py": TEST_GEN,
         "api/generated.py": "VALUES = []\n",  # stale: the base commit's test fails, per test, until gen.py runs
         "docs/index.md": "# Docs\n"}


@pytest.fixture
def worktree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository and a linked worktree of it under REPOSWARM_HOME, as a lane's."""
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "rshome"))
    monkeypatch.delenv(sandbox.SWITCH, raising=False)
    monkeypatch.delenv(sandbox.BWRAP, raising=False)
    repo = make_repo(tmp_path / "repo", FILES)
    tree = tmp_path / "rshome" / "runs" / "this-run" / "lanes" / "api"
    git(repo, "worktree", "add", "-q", "--detach", str(tree), "HEAD")
    return tree.resolve()


def toolbox(tree: Path, shell: bool | None = None, **profile: object) -> Toolbox:
    profiles = {"default": CheckProfile(commands=[["true"]], **profile)} if profile else {}  # type: ignore[arg-type]
    return Toolbox(PathPolicy(tree, ["api/"], ["gen.py", "tests/"]), check_profiles=profiles, shell=shell)


def test_run_is_offered_after_run_checks_and_its_arguments_are_checked():
    names = [spec["name"] for spec in tool_specs()]
    assert names.index("run") == names.index("run_checks") + 1
    assert "run" in TOOL_ARGS
    for bad, why in (({"command": []}, "starts with the program"), ({"command": "  "}, "is empty"),
                     ({"command": "x" * 70_000}, "write a script"), ({"command": "ls", "timeout_s": 0}, "greater"),
                     ({"command": ["ls"], "shell": "bash"}, "Extra inputs")):
        with pytest.raises(ValueError, match=why):
            parse_args("run", bad, "")


def test_a_generator_writes_inside_the_slice_and_the_files_are_the_lanes_edits(worktree):
    tools = toolbox(worktree)
    text = tools.call("run", {"command": [PY, "gen.py"]})
    assert text.splitlines()[0].startswith("exit 0 (") and f"$ {PY} gen.py" in text.splitlines()[0]
    assert "generated api/generated.py" in text
    assert "changed in your slice (part of your change, committed after this turn): api/generated.py (modified)" \
        in text
    assert [(e.path, e.operation, e.reason) for e in tools.edits] == [
        ("api/generated.py", "modify", f"written by `{PY} gen.py`")]
    assert tools.ran is not None and tools.ran.line == f"$ {PY} gen.py -> exit 0" and tools.ran.exit_code == 0
    # a command line runs under sh -c, in the same sandbox; it sees the file it made, and its exit code is said
    text = tools.call("run", {"command": f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {PY} -m pytest -q -p no:cacheprovider "
                                         "tests/test_gen.py; exit 3"})
    assert text.startswith("exit 3 (") and "1 passed" in text
    assert tools.edits == []  # nothing new in the slice: the generated file is reported once, when it changed


def test_a_write_outside_the_slice_is_reverted_and_refused(worktree):
    tools = toolbox(worktree)
    text = tools.call("run", {"command": "echo pwned >> README.md; echo x > docs/new.md; rm docs/index.md; "
                                         "echo kept > api/mine.txt; rm api/app.py"})
    refusal = next(line for line in text.splitlines() if line.startswith("refused:"))
    assert refusal.startswith("refused: the command changed paths outside this lane's slice; reverted: ")
    assert all(name in refusal for name in ("README.md", "docs/new.md", "docs/index.md"))
    assert (worktree / "README.md").read_text() == FILES["README.md"]
    assert (worktree / "docs" / "index.md").read_text() == FILES["docs/index.md"]
    assert not (worktree / "docs" / "new.md").exists()
    # inside the slice, what it did stays, and is the lane's change
    assert (worktree / "api" / "mine.txt").read_text() == "kept\n" and not (worktree / "api" / "app.py").exists()
    assert {(e.path, e.operation) for e in tools.edits} == {("api/mine.txt", "create"), ("api/app.py", "delete")}
    assert tools.undone and git(worktree, "status", "--porcelain", "--", "README.md", "docs") == ""


def test_no_network_and_none_of_the_workers_environment(worktree, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)  # in the worker's environment, as a real key would be
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.5)
        port = server.getsockname()[1]
        probe = ("import os, socket\n"
                 "out = open('api/seen.txt', 'w')\n"
                 f"for host in ('127.0.0.1', 'example.com'):\n"
                 "    try:\n"
                 f"        socket.create_connection((host, {port}), timeout=3)\n"
                 "        out.write(f'connected {host}\\n')\n"
                 "    except OSError as err:\n"
                 "        out.write(f'no network to {host}: {err}\\n')\n"
                 "out.write('environment: ' + repr(sorted(os.environ.items())) + '\\n')\n"
                 f"for pid in [{os.getpid()}, *[p for p in os.listdir('/proc') if p.isdigit()]]:\n"
                 "    try:\n"
                 "        out.write(open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace') + '\\n')\n"
                 "    except OSError as err:\n"
                 "        out.write(f'pid {pid}: {err}\\n')\n")
        text = toolbox(worktree).call("run", {"command": [PY, "-c", probe]})
        with pytest.raises(TimeoutError):
            server.accept()  # nothing reached the host's loopback
    assert text.startswith("exit 0 ("), text
    seen = (worktree / "api" / "seen.txt").read_text()  # the command's own view, read from the host: unredacted
    assert "connected" not in seen and seen.count("no network to") == 2
    assert FAKE_KEY not in seen and "OPENAI_API_KEY" not in seen
    assert "'CI', 'true'" in seen  # (its environment was written: the check above looked at something)


def test_a_timeout_is_said_and_the_profile_caps_it(worktree):
    started = time.monotonic()
    text = toolbox(worktree).call("run", {"command": "echo started; sleep 60", "timeout_s": 1})
    assert time.monotonic() - started < 15
    assert text.startswith("timed out after 1 s (") and "started" in text
    # the lane's check profile caps what a call may ask for
    tools = toolbox(worktree, timeout_s=2)
    started = time.monotonic()
    text = tools.call("run", {"command": ["sleep", "60"], "timeout_s": 600})
    assert text.startswith("timed out after 2 s (") and time.monotonic() - started < 15
    assert tools.ran is not None and tools.ran.timed_out and tools.ran.line.endswith("-> timed out after 2 s")


def test_a_long_output_comes_back_as_its_head_and_tail(worktree):
    body = "".join(f"line {i:06d}\n" for i in range(20_000))  # 240,000 characters
    (worktree / "api" / "out.txt").write_text(body)
    text = toolbox(worktree).call("run", {"command": ["cat", "api/out.txt"]})
    cut = len(body) - HEAD_CHARS - TAIL_CHARS
    assert f"\n[... {cut:,} characters cut ...]\n" in text
    assert "line 000000" in text and "line 019999" in text and "line 010000" not in text
    assert len(text) < HEAD_CHARS + TAIL_CHARS + 500


def test_megabytes_of_output_end_at_the_profiles_cap(worktree):
    started = time.monotonic()
    text = toolbox(worktree, max_output_mb=2).call("run", {"command": "yes 0123456789abcdef"})
    assert time.monotonic() - started < 20
    assert text.startswith("ended at a limit: its output passed 2 MB (")
    assert "characters cut ...]" in text and len(text) < HEAD_CHARS + TAIL_CHARS + 500


def test_a_fork_bomb_ends_and_leaves_no_process(worktree):
    marker = f"bomb_{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    text = toolbox(worktree, max_processes=32).call(
        "run", {"command": f"{marker}() {{ {marker} | {marker} & }}; {marker}; sleep 3; echo survived",
                "timeout_s": 10})
    assert time.monotonic() - started < 30
    assert text.startswith(("exit ", "timed out after 10 s")), text[:300]
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                left.append(pid)
        except OSError:
            continue
    assert left == []


def test_the_shell_off_is_refused_in_words_the_model_can_read(worktree, monkeypatch):
    with pytest.raises(ToolRefused, match="run is off for this lane"):
        toolbox(worktree, shell=False).call("run", {"command": ["true"]})
    assert not (worktree / "api" / "made.txt").exists()
    # null follows the sandbox: off when the worker runs unsandboxed, unless the lane says shell: true
    monkeypatch.setenv(sandbox.SWITCH, "off")
    with pytest.raises(ToolRefused) as refused:
        toolbox(worktree, shell=None).call("run", {"command": "echo x > api/made.txt"})
    assert str(refused.value) == OFF and not (worktree / "api" / "made.txt").exists()
    text = toolbox(worktree, shell=True).call("run", {"command": "echo x > api/made.txt"})
    assert text.startswith("exit 0 (") and f"warning: {sandbox.OFF_WARNING}" in text
    # and a sandbox that cannot be made refuses, as run_checks does
    monkeypatch.delenv(sandbox.SWITCH)
    monkeypatch.setenv(sandbox.BWRAP, "/nonexistent/bwrap")
    with pytest.raises(ToolRefused, match="apt-get install bubblewrap"):
        toolbox(worktree, shell=None).call("run", {"command": ["true"]})


@pytest.mark.usefixtures("worker")
async def test_a_lane_that_must_run_a_generator_and_one_test_file_delivers(client, tmp_path):
    repo = make_repo(tmp_path / "repo", FILES)
    checks = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"api": {"allowed_paths": ["api/"], "read_only_paths": ["gen.py", "tests/"]}}},
        # (the profile's env reaches `run` as it reaches the checks: pytest without the worker's plugins, quicker)
        "validation": {"profiles": {"default": {"commands": [checks], "timeout_s": 60,
                                                "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "api/generated.py exports VALUES.", "lanes": [
        {"lane": "api", "goal": "Generate api/generated.py with gen.py and make tests/test_gen.py pass."}]})
    test_line = f"{PY} -m pytest -q -p no:cacheprovider tests/test_gen.py"
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("g1", "run", {"command": [PY, "gen.py"]})),  # the turn's only change comes from the command
        turn(("t1", "run", {"command": test_line})),
        finish("f1", "generated api/generated.py with gen.py; tests/test_gen.py passes"),
    ]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    assert status.review is not None
    api = status.review.lanes[0]
    assert api.status == LaneStatus.done, api.reason
    assert api.commands == [f"$ {PY} gen.py -> exit 0", f"$ {test_line} -> exit 0"]
    assert [(e.path, e.operation, e.reason) for e in api.edits] == [
        ("api/generated.py", "modify", f"written by `{PY} gen.py`")]
    assert api.edits[0].turns == [1]  # committed at the checkpoint of the turn whose only change was the command's
    # the generated file is in the merged tree, and the gate's checks passed on it
    assert git(repo, "show", f"{status.integration_sha}:api/generated.py") == "VALUES = [1, 2, 3]"
    report = status.review.test_report
    assert report is not None and report.passed, (report.problems, [c.output_tail for c in report.commands])
    markdown = render_review(status.review)
    assert f"Commands it ran:\n  - `$ {PY} gen.py -> exit 0`\n  - `$ {test_line} -> exit 0`\n" in markdown
    # every command in the ledger, with its exit code
    calls = {e["call_id"]: e for e in ledger.read(run_id) if e["event"] == "tool_call"}
    assert (calls["g1"]["command"], calls["g1"]["exit_code"], calls["g1"]["changed"]) == (
        f"{PY} gen.py", 0, ["api/generated.py"])
    assert (calls["t1"]["command"], calls["t1"]["exit_code"], calls["t1"].get("changed")) == (test_line, 0, None)
    await client.get_workflow_handle(run_id).terminate("test done")
