"""The real Claude Code and Codex CLIs (pyproject's `agents` extra, installed by make test), driven offline against
our fake model servers (tests/fake_agent_api.py), one session each, inside the checks' bubblewrap sandbox.

Each session runs in a linked git worktree, as a lane's does. The fake is the only server: the agent's network
namespace holds nothing but its loopback, its one way out is the bridge to the fake, and a second server on the
host's loopback (a trap) is never reached. The worker's own provider keys are planted in its environment and
must reach neither the sandbox nor any request.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reposwarm.agents import clis
from reposwarm.agents.session import run_session
from reposwarm.agents.spec import SessionSpec, SessionSummary
from reposwarm.checks import sandbox
from tests.fake_agent_api import (
    Call,
    FakeMessages,
    FakeResponses,
    Text,
    function_outputs,
    messages_turns,
    responses_turns,
    tool_results,
)
from tests.helpers import git, make_repo

TOKEN = "rs-lane-7f3a-fake-token"  # the per-lane token the agent is given
PLANTED = {"ANTHROPIC_API_KEY": "sk-ant-api03-PLANTED-worker-key", "OPENAI_API_KEY": "sk-proj-PLANTED-worker-key"}
SESSION_LIMIT_S = 60  # each session well under this; the test says how long it took
PATCH = "*** Begin Patch\n*** Add File: notes/hello.txt\n+hello from codex\n*** End Patch\n"


def _cli_or_skip(agent: str) -> None:
    try:
        clis.find(agent)
    except clis.AgentCliMissing as err:
        pytest.skip(f"{err} (make test installs it)")
    why = sandbox.status()
    if why is not None:
        pytest.skip(f"agent sessions run in the checks' sandbox, and here: {why}")


class Trap:
    """A server on the host's loopback that no sandboxed agent may reach: it counts every connection."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


@pytest.fixture
def trap() -> Iterator[Trap]:
    found = Trap()
    yield found
    found.listener.close()


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo", {"README.md": "a repository\n", "src/app.py": "print('app')\n"})
    lane = tmp_path / "lane"
    git(repo, "worktree", "add", "-q", "-b", "swarm/run/lane", str(lane))
    return lane


@pytest.fixture(autouse=True)
def planted_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)


# (bash's /dev/tcp: whether the agent can open a connection to the trap on the host's loopback)
def _look_around(trap: Trap) -> str:
    return (f"cat /proc/net/dev; env; (exec 3<>/dev/tcp/127.0.0.1/{trap.port}) 2>/dev/null && echo TRAP-REACHED "
            "|| echo TRAP-UNREACHABLE; echo GIT-HEAD=$(git rev-parse HEAD); git for-each-ref --format='REF %(refname)'")


def _git_view_only(looked: str, worktree: Path) -> None:
    """The agent's git is a private view of its worktree's HEAD: that commit, none of the repository's refs."""
    assert f"GIT-HEAD={git(worktree, 'rev-parse', 'HEAD')}" in looked, looked
    assert "REF refs/heads/" not in looked, looked


def _spec(agent: str, worktree: Path, base_url: str, state: Path, **kw: object) -> SessionSpec:
    return SessionSpec(agent=agent, prompt=kw.pop("prompt", "Write notes/hello.txt."),  # type: ignore[arg-type]
                       worktree=worktree, base_url=base_url, token=TOKEN, state_dir=state, timeout_s=SESSION_LIMIT_S,
                       **kw)  # type: ignore[arg-type]


async def _timed(spec: SessionSpec) -> SessionSummary:
    began = time.monotonic()
    summary = await run_session(spec)
    took = time.monotonic() - began
    print(f"{spec.agent} session{' (resumed)' if spec.resume else ''}: {took:.1f}s")
    assert took < SESSION_LIMIT_S
    return summary


def _no_secret_in(text: str) -> None:
    for value in PLANTED.values():
        assert value not in text


def _only_loopback(listing: str) -> None:
    interfaces = re.findall(r"^\s*([\w.-]+):\s+\d", listing, re.M)  # (/proc/net/dev's rows)
    assert interfaces == ["lo"], listing


async def test_claude_code_writes_the_scripted_file_sandboxed(worktree: Path, tmp_path: Path, trap: Trap) -> None:
    _cli_or_skip("claude-code")
    script = messages_turns([
        [Text("Looking around first."), Call("Bash", {"command": _look_around(trap), "description": "look"})],
        [Call("Write", {"file_path": str(worktree / "notes" / "hello.txt"), "content": "hello from claude\n"})],
    ], closing="Wrote notes/hello.txt.")
    with FakeMessages(script) as api:
        summary = await _timed(_spec("claude-code", worktree, api.base_url, tmp_path / "claude-state",
                                     allowed_tools=("Bash", "Read", "Write", "Edit"), max_turns=6,
                                     git_dir=tmp_path / "repo" / ".git"))
    assert summary.exit_code == 0, summary.stderr
    assert not summary.is_error and summary.sandboxed
    assert (worktree / "notes" / "hello.txt").read_text() == "hello from claude\n"
    assert [c.name for c in summary.tool_calls] == ["Bash", "Write"]
    assert summary.final_text == "Wrote notes/hello.txt."
    assert summary.session_id and summary.turns == 3
    # every model request carried the lane's token, and nothing else that could be a key
    asked = api.model_requests()
    assert len(asked) == 3
    assert all(r.headers.get("x-api-key") == TOKEN and "authorization" not in r.headers for r in api.requests)
    _no_secret_in(repr([(r.path, r.headers, r.body) for r in api.requests]))
    # what the agent's shell saw: its own loopback only, the trap out of reach, none of the worker's keys
    looked = str(tool_results(asked[1].body)[0]["content"])
    _only_loopback(looked)
    assert "TRAP-UNREACHABLE" in looked and "TRAP-REACHED" not in looked.replace("TRAP-UNREACHABLE", "")
    assert f"ANTHROPIC_API_KEY={TOKEN}" in looked
    _git_view_only(looked, worktree)
    _no_secret_in(looked)
    assert trap.connections == 0
    _no_secret_in(repr(summary.events))


async def test_codex_writes_the_scripted_file_sandboxed(worktree: Path, tmp_path: Path, trap: Trap) -> None:
    _cli_or_skip("codex")
    script = responses_turns([
        [Call("exec_command", {"cmd": _look_around(trap)})],
        [Call("apply_patch", {"input": PATCH})],
    ], closing="Wrote notes/hello.txt.")
    with FakeResponses(script) as api:
        summary = await _timed(_spec("codex", worktree, api.base_url, tmp_path / "codex-state",
                                     git_dir=tmp_path / "repo" / ".git"))
    assert summary.exit_code == 0, summary.stderr
    assert not summary.is_error and summary.sandboxed
    assert (worktree / "notes" / "hello.txt").read_text() == "hello from codex\n"
    assert [c.name for c in summary.tool_calls] == ["command_execution", "file_change"]
    assert summary.final_text == "Wrote notes/hello.txt."
    assert summary.session_id
    asked = api.model_requests()
    assert len(asked) == 3
    # Codex's own tools, as it offers them: a shell (exec_command) and a freeform apply_patch
    offered = {t.get("name"): t.get("type") for t in asked[0].body["tools"]}
    assert offered.get("exec_command") == "function" and offered.get("apply_patch") == "custom"
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in api.requests)
    _no_secret_in(repr([(r.path, r.headers, r.body) for r in api.requests]))
    outputs = function_outputs(asked[2].body)
    looked = str(outputs[0]["output"])
    assert "TRAP-UNREACHABLE" in looked
    _only_loopback(looked)
    _git_view_only(looked, worktree)
    _no_secret_in(looked)
    assert "Success" in str(outputs[1]["output"])
    assert trap.connections == 0
    _no_secret_in(repr(summary.events))


async def test_claude_code_resumes_its_session(worktree: Path, tmp_path: Path) -> None:
    _cli_or_skip("claude-code")
    first = messages_turns([[Call("Write", {"file_path": str(worktree / "a.txt"), "content": "one\n"})]], "first done")
    with FakeMessages(first) as api:
        done = await _timed(_spec("claude-code", worktree, api.base_url, tmp_path / "state",
                                  allowed_tools=("Read", "Write"), max_turns=4))
    assert done.exit_code == 0 and done.session_id
    # the second session continues the first: its first request holds the first's whole conversation
    with FakeMessages(messages_turns([[]], "resumed done")) as api:
        again = await _timed(_spec("claude-code", worktree, api.base_url, tmp_path / "state", prompt="Now stop.",
                                   allowed_tools=("Read", "Write"), max_turns=4, resume=done.session_id))
    assert again.exit_code == 0, again.stderr
    assert again.session_id == done.session_id
    body = api.model_requests()[0].body
    assert len(tool_results(body)) == 1
    said = repr(body["messages"])
    assert "Write notes/hello.txt." in said and "Now stop." in said and "first done" in said


async def test_codex_resumes_its_session(worktree: Path, tmp_path: Path) -> None:
    _cli_or_skip("codex")
    first = responses_turns([[Call("exec_command", {"cmd": "echo one > a.txt"})]], "first done")
    with FakeResponses(first) as api:
        done = await _timed(_spec("codex", worktree, api.base_url, tmp_path / "state"))
    assert done.exit_code == 0 and done.session_id
    assert (worktree / "a.txt").read_text() == "one\n"
    with FakeResponses(responses_turns([], "resumed done")) as api:
        again = await _timed(_spec("codex", worktree, api.base_url, tmp_path / "state", prompt="Now stop.",
                                   resume=done.session_id))
    assert again.exit_code == 0, again.stderr
    assert again.session_id == done.session_id and again.final_text == "resumed done"
    said = repr(api.model_requests()[0].body["input"])
    assert "Write notes/hello.txt." in said and "Now stop." in said and "first done" in said
    assert len(function_outputs(api.model_requests()[0].body)) == 1


async def test_codex_is_ended_past_its_turns(worktree: Path, tmp_path: Path) -> None:
    """Codex has no turn limit of its own: a model that never stops is ended by reposwarm past max_turns."""
    _cli_or_skip("codex")
    forever = responses_turns([[Call("exec_command", {"cmd": f"echo {n} >> turns.txt"})] for n in range(50)])
    with FakeResponses(forever) as api:
        summary = await _timed(_spec("codex", worktree, api.base_url, tmp_path / "state", max_turns=2))
    assert summary.exit_code is None and "max_turns" in summary.stopped
    assert len(api.model_requests()) <= 4


def test_a_missing_cli_says_what_to_install(tmp_path: Path) -> None:
    """In a Python without the agents extra and nothing on PATH, the error names the package to install."""
    code = ("import sys; sys.path[:0] = [sys.argv[1]]\n"
            "from reposwarm.agents import clis\n"
            "try:\n    clis.find('codex')\nexcept clis.AgentCliMissing as err:\n    print(err)\n")
    done = subprocess.run([sys.executable, "-S", "-c", code, str(Path(__file__).resolve().parents[1])],
                          capture_output=True, text=True, env={"PATH": str(tmp_path)}, timeout=60)
    assert "openai-codex-cli-bin==0.163.0" in done.stdout and "reposwarm[agents]" in done.stdout, done


# A hostile repository's own hooks (Claude Code's project settings, Codex's project .codex/): they must not run.
HOSTILE_HOOKS = json.dumps({"hooks": {
    "PreToolUse": [{"matcher": ".*", "hooks": [{"type": "command", "command": "touch PWNED-pre"}]}],
    "SessionStart": [{"hooks": [{"type": "command", "command": "touch PWNED-start"}]}],
    "Stop": [{"hooks": [{"type": "command", "command": "touch PWNED-stop"}]}]}})
HOSTILE_FILES = {".claude/settings.json": HOSTILE_HOOKS, ".claude/settings.local.json": HOSTILE_HOOKS,
                 ".codex/hooks.json": HOSTILE_HOOKS, ".codex/config.toml": "[features]\nhooks = true\n"}


@pytest.fixture
def hostile_worktree(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo", {"README.md": "a repository\n", "src/app.py": "print('app')\n",
                                         **HOSTILE_FILES})
    lane = tmp_path / "lane"
    git(repo, "worktree", "add", "-q", "-b", "swarm/run/lane", str(lane))
    return lane


def _pwned(tree: Path) -> list[str]:
    return sorted(p.name for p in tree.rglob("PWNED-*"))


async def test_claude_code_keeps_the_slice_before_the_write(hostile_worktree: Path, tmp_path: Path) -> None:
    _cli_or_skip("claude-code")
    wt = hostile_worktree
    script = messages_turns([
        [Call("Write", {"file_path": str(wt / "src" / "app.py"), "content": "taken over\n"})],
        [Call("Write", {"file_path": "notes/../../outside.txt", "content": "escaped\n"})],
        [Call("Write", {"file_path": str(wt / "notes" / "ok.txt"), "content": "inside\n"})],
    ])
    with FakeMessages(script) as api:
        summary = await _timed(_spec("claude-code", wt, api.base_url, tmp_path / "state", writable=("notes",),
                                     allowed_tools=("Read", "Write", "Edit"), max_turns=6))
    assert summary.exit_code == 0, summary.stderr
    assert (wt / "src" / "app.py").read_text() == "print('app')\n"
    assert not (tmp_path / "outside.txt").exists()
    assert (wt / "notes" / "ok.txt").read_text() == "inside\n"
    results = tool_results(api.model_requests()[-1].body)
    assert [bool(r.get("is_error")) for r in results] == [True, True, False]
    assert "src/app.py is outside this lane's slice" in str(results[0]["content"])
    assert f"{tmp_path / 'outside.txt'} is outside this lane's slice" in str(results[1]["content"])
    assert _pwned(wt) == [] and _pwned(tmp_path) == []


async def test_codex_keeps_the_slice_before_the_write(hostile_worktree: Path, tmp_path: Path) -> None:
    _cli_or_skip("codex")
    wt = hostile_worktree
    outside = "*** Begin Patch\n*** Update File: src/app.py\n@@\n-print('app')\n+print('taken over')\n*** End Patch\n"
    sneaky = "*** Begin Patch\n*** Add File: notes/a.txt\n+a\n*** Add File: ../repo/evil.txt\n+evil\n*** End Patch\n"
    script = responses_turns([[Call("apply_patch", {"input": outside})], [Call("apply_patch", {"input": sneaky})],
                              [Call("apply_patch", {"input": PATCH})]])
    with FakeResponses(script) as api:
        summary = await _timed(_spec("codex", wt, api.base_url, tmp_path / "state", writable=("notes",)))
    assert summary.exit_code == 0, summary.stderr
    assert (wt / "src" / "app.py").read_text() == "print('app')\n"
    assert not (tmp_path / "repo" / "evil.txt").exists() and not (wt / "notes" / "a.txt").exists()
    assert (wt / "notes" / "hello.txt").read_text() == "hello from codex\n"
    outputs = [str(o["output"]) for o in function_outputs(api.model_requests()[-1].body)]
    assert "blocked by PreToolUse hook" in outputs[0] and "src/app.py is outside this lane's slice" in outputs[0]
    assert "blocked by PreToolUse hook" in outputs[1] and "outside this lane's slice" in outputs[1]
    assert "Success" in outputs[2]
    assert _pwned(wt) == [] and _pwned(tmp_path) == []


# The session as an activity would run it: in a worker process of its own, which hears the session id from the
# first event that carries it (an activity heartbeats it) and writes it down here.
RUNNER = """
import asyncio, json, sys
from pathlib import Path
sys.path[:0] = [sys.argv[1]]
from reposwarm.agents.session import run_session
from reposwarm.agents.spec import SessionSpec
spec = SessionSpec(**{**json.loads(sys.argv[2]), "worktree": Path(sys.argv[3]), "state_dir": Path(sys.argv[4]),
                      "allowed_tools": ("Read", "Write")})
def heard(event, summary):
    if summary.session_id:
        Path(sys.argv[5]).write_text(summary.session_id)
asyncio.run(run_session(spec, heard))
"""


def _processes_naming(text: str) -> list[str]:
    """Processes whose command line or environment holds `text` (the agent's own has its token there)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(text.encode() in Path(f"/proc/{pid}/{part}").read_bytes() for part in ("cmdline", "environ")):
                found.append(pid)
        except OSError:
            continue
    return found


@pytest.fixture
def worker_tmp() -> Iterator[Path]:
    """The killed worker's TMPDIR: a SIGKILLed process never cleans up what it had there (its bridge's socket
    folder), so it goes here, and the test removes it."""
    folder = Path(tempfile.mkdtemp(prefix="rs-killed-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
async def test_a_worker_killed_mid_session_leaves_nothing_running_and_the_session_resumes(
        agent: str, worktree: Path, tmp_path: Path, worker_tmp: Path) -> None:
    _cli_or_skip(agent)
    held, release = threading.Event(), threading.Event()
    if agent == "claude-code":
        first: Any = messages_turns([[Call("Write", {"file_path": str(worktree / "a.txt"), "content": "one\n"})]])
        answered, fake, carried = (lambda body: len(tool_results(body))), FakeMessages, tool_results
    else:
        first = responses_turns([[Call("exec_command", {"cmd": "echo one > a.txt"})]])
        answered, fake, carried = (lambda body: len(function_outputs(body))), FakeResponses, function_outputs

    def script(body: dict[str, Any]) -> Any:
        if answered(body) >= 1:  # the second model call: the worker dies while it waits for the reply
            held.set()
            release.wait(60)
        return first(body)

    state, heard, token = tmp_path / "state", tmp_path / "session-id", f"rs-lane-{uuid.uuid4().hex}"
    with fake(script) as api:
        given = {"agent": agent, "prompt": "Write a.txt.", "base_url": api.base_url, "token": token}
        worker = subprocess.Popen([sys.executable, "-c", RUNNER, str(Path(__file__).resolve().parents[1]),
                                   json.dumps(given), str(worktree), str(state), str(heard)],
                                  env={**os.environ, "TMPDIR": str(worker_tmp)})
        try:
            assert await asyncio.to_thread(held.wait, SESSION_LIMIT_S), "the session never reached its second turn"
            assert len(_processes_naming(token)) >= 2  # (the agent and its bridge, seen by their token)
            worker.kill()
            worker.wait(30)
        finally:
            release.set()
            if worker.poll() is None:
                worker.kill()
        for _ in range(50):  # the sandbox dies with its worker (bwrap --die-with-parent, the launcher's PDEATHSIG)
            if not _processes_naming(token):
                break
            await asyncio.sleep(0.1)
        assert _processes_naming(token) == []
        asked_before = len(api.model_requests())
    assert asked_before == 2 and (worktree / "a.txt").read_text() == "one\n"
    session_id = heard.read_text()
    with (FakeMessages(messages_turns([], "resumed")) if agent == "claude-code"
          else FakeResponses(responses_turns([], "resumed"))) as api:
        again = await _timed(_spec(agent, worktree, api.base_url, state, prompt="Go on.", resume=session_id,
                                   allowed_tools=("Read", "Write")))
    assert again.exit_code == 0, again.stderr
    assert again.session_id == session_id and again.final_text == "resumed"
    assert len(carried(api.model_requests()[0].body)) == 1  # the first turn's tool call and result, carried on
